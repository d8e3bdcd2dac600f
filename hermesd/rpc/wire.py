"""msgpack-RPC framing: bytes in, typed messages out, and back.

Owns the three message shapes (request ``[0, msgid, method, params]``, response
``[1, msgid, error, result]``, notification ``[2, method, params]``), the streaming decoder and
its size limits. It knows nothing about sockets, asyncio or what a method means, and imports
only msgpack, so the client can use it at no cost.
"""

from __future__ import annotations

import msgpack

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds at start-up; the client cannot afford it
    from collections.abc import Iterator
    from typing import Any

REQUEST = 0
RESPONSE = 1
NOTIFICATION = 2

DEFAULT_MAX_MESSAGE = 8 * 1024 * 1024
MAX_MSGID = 2**32 - 1


class _Message:
    __slots__: tuple[str, ...] = ()

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and all(
            getattr(self, f) == getattr(other, f) for f in self.__slots__
        )

    def __repr__(self) -> str:
        fields = ", ".join(f"{f}={getattr(self, f)!r}" for f in self.__slots__)
        return f"{type(self).__name__}({fields})"


class Request(_Message):
    __slots__ = ("method", "msgid", "params")

    def __init__(self, msgid: int, method: str, params: list[Any]) -> None:
        self.msgid, self.method, self.params = msgid, method, params


class Response(_Message):
    __slots__ = ("error", "msgid", "result")

    def __init__(self, msgid: int, error: Any, result: Any) -> None:
        self.msgid, self.error, self.result = msgid, error, result


class Notification(_Message):
    __slots__ = ("method", "params")

    def __init__(self, method: str, params: list[Any]) -> None:
        self.method, self.params = method, params


Message = Request | Response | Notification


class FrameError(Exception):
    """A decodable object that is not a valid msgpack-RPC message.

    ``msgid`` is set when the frame was a request whose id could be read, so the peer can be
    answered; otherwise the peer gets a protocol-error notification.
    """

    def __init__(self, message: str, msgid: int | None = None) -> None:
        super().__init__(message)
        self.msgid = msgid


class StreamError(Exception):
    """The byte stream cannot be decoded any further; the connection must be closed."""

    def __init__(self, message: str, too_large: bool = False) -> None:
        super().__init__(message)
        self.too_large = too_large


def _valid_msgid(value: Any) -> bool:
    return type(value) is int and 0 <= value <= MAX_MSGID


def classify(obj: Any) -> Message:
    """Turn one decoded msgpack object into a message, or raise FrameError."""
    if type(obj) is not list or not obj:
        raise FrameError("a message must be a non-empty array")
    kind = obj[0]
    if kind == REQUEST and type(kind) is int:
        msgid = obj[1] if len(obj) > 1 and _valid_msgid(obj[1]) else None
        if len(obj) != 4:
            raise FrameError("a request must be [0, msgid, method, params]", msgid)
        if msgid is None:
            raise FrameError("request msgid must be an unsigned 32-bit integer")
        if type(obj[2]) is not str:
            raise FrameError("request method must be a string", msgid)
        if type(obj[3]) is not list:
            raise FrameError("request params must be an array", msgid)
        return Request(msgid, obj[2], obj[3])
    if kind == RESPONSE and type(kind) is int:
        if len(obj) != 4 or not _valid_msgid(obj[1]):
            raise FrameError("a response must be [1, msgid, error, result]")
        return Response(obj[1], obj[2], obj[3])
    if kind == NOTIFICATION and type(kind) is int:
        if len(obj) != 3 or type(obj[1]) is not str or type(obj[2]) is not list:
            raise FrameError("a notification must be [2, method, params]")
        return Notification(obj[1], obj[2])
    raise FrameError("message type must be 0 (request), 1 (response) or 2 (notification)")


class Decoder:
    """Incremental decoder: feed bytes, iterate decoded objects.

    Limits: a single message may not exceed ``max_message`` bytes; strings, binaries, arrays
    and maps are bounded by the same figure, so a tiny frame cannot announce a giant container.
    ``buffered`` is what waits for the rest of a message; ``last_size`` the encoded size of the
    object last yielded.
    """

    def __init__(self, max_message: int = DEFAULT_MAX_MESSAGE) -> None:
        self.max_message = max_message
        self._fed = 0  # bytes fed so far
        self._done = 0  # bytes of the whole messages among them (msgpack's tell() counts the
        # part of an unfinished message it has already parsed too)
        self.last_size = 0
        self._unpacker = msgpack.Unpacker(
            raw=False,
            read_size=min(
                4096, max_message
            ),  # initial buffer: 1 MiB default x 1,000 clients adds up
            max_buffer_size=max_message,
            max_str_len=max_message,
            max_bin_len=max_message,
            max_array_len=max_message // 2 or 1,
            max_map_len=max_message // 4 or 1,
            max_ext_len=max_message,
            strict_map_key=False,
        )

    def feed(self, data: bytes | bytearray | memoryview) -> Iterator[Any]:
        """Add bytes and yield every complete object; raise StreamError on undecodable input."""
        try:
            self._unpacker.feed(data)
            self._fed += len(data)
        except msgpack.BufferFull:
            raise StreamError(
                f"message larger than the {self.max_message}-byte limit", too_large=True
            ) from None
        unpacker = self._unpacker
        while True:
            try:
                obj = next(unpacker)
            except StopIteration:
                return
            except msgpack.BufferFull:
                raise StreamError(
                    f"message larger than the {self.max_message}-byte limit", too_large=True
                ) from None
            except ValueError as exc:  # ExtraData, FormatError, StackError, limits, bad UTF-8
                raise StreamError(f"undecodable msgpack: {exc}") from None
            except Exception as exc:  # msgpack may raise other types on hostile input
                raise StreamError(f"undecodable msgpack: {type(exc).__name__}: {exc}") from None
            end = unpacker.tell()
            self.last_size, self._done = end - self._done, end
            yield obj

    @property
    def buffered(self) -> int:
        """Bytes received that do not yet make a whole message."""
        return self._fed - self._done


def _default(obj: Any) -> Any:
    # Sets, tuples and paths are common in service results; give the wire a plain shape.
    if isinstance(obj, (set, frozenset)):
        return sorted(obj)
    return str(obj)


_packer_opts = {"use_bin_type": True, "default": _default, "datetime": False}


class Encoder:
    """A reusable encoder (``packb`` builds and discards a Packer per call); not thread-safe."""

    __slots__ = ("_pack",)

    def __init__(self) -> None:
        self._pack = msgpack.Packer(**_packer_opts).pack

    def response(self, msgid: int, error: Any, result: Any) -> bytes:
        """Encode ``[1, msgid, error, result]``."""
        data: bytes = self._pack([RESPONSE, msgid, error, result])
        return data

    def notification(self, method: str, params: list[Any]) -> bytes:
        """Encode ``[2, method, params]``."""
        data: bytes = self._pack([NOTIFICATION, method, params])
        return data

    def request(self, msgid: int, method: str, params: list[Any]) -> bytes:
        """Encode ``[0, msgid, method, params]``."""
        data: bytes = self._pack([REQUEST, msgid, method, params])
        return data


def pack(obj: Any) -> bytes:
    """Encode one object."""
    data: bytes = msgpack.packb(obj, **_packer_opts)
    return data


def pack_request(msgid: int, method: str, params: list[Any]) -> bytes:
    """Encode ``[0, msgid, method, params]``."""
    data: bytes = msgpack.packb([REQUEST, msgid, method, params], **_packer_opts)
    return data


def pack_response(msgid: int, error: Any, result: Any) -> bytes:
    """Encode ``[1, msgid, error, result]``."""
    data: bytes = msgpack.packb([RESPONSE, msgid, error, result], **_packer_opts)
    return data


def pack_notification(method: str, params: list[Any]) -> bytes:
    """Encode ``[2, method, params]``."""
    data: bytes = msgpack.packb([NOTIFICATION, method, params], **_packer_opts)
    return data
