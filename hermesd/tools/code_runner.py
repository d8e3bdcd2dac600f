"""The program `execute_code` starts inside the tool sandbox: it installs the generated
``hermes_tools`` module and runs the model's script as ``__main__``.

Run by path with the sandbox's Python, never imported by the daemon, standard library only.
Its two arguments are the channel the daemon handed it: the descriptor it writes requests to
and the one it reads replies from (`hermesd.tools.code_channel` is the daemon's side). Every
frame is a 4-byte big-endian length and that many bytes of UTF-8 JSON. The daemon's first frame
is ``{"module": source, "code": script}``; after it each tool call is a request ``{"id", "tool",
"args"}`` answered by ``{"id", "result"}`` or ``{"id", "error"}``. The channel's descriptors are
not inherited by what the script starts, so only the script itself can call tools.
"""

from __future__ import annotations

import json
import linecache
import os
import struct
import sys
import threading
import traceback
import types
from typing import Any

HEADER = struct.Struct(">I")
MAX_REPLY = 64 * 1024 * 1024  # a reply is a tool result the daemon already bounded
SCRIPT_NAME = "script.py"


class ChannelClosed(RuntimeError):
    """The daemon closed the channel (the call limit, a bad frame, the run ending)."""


class Channel:
    """The script's end of the channel: one call at a time (threads share it)."""

    def __init__(self, out_fd: int, in_fd: int) -> None:
        self.out_fd, self.in_fd = out_fd, in_fd
        self.lock = threading.Lock()
        self.next_id = 0

    def send(self, message: dict[str, Any]) -> None:
        body = json.dumps(message, ensure_ascii=False).encode("utf-8")
        data = HEADER.pack(len(body)) + body
        while data:
            try:
                written = os.write(self.out_fd, data)
            except BrokenPipeError:
                raise ChannelClosed("the daemon closed the tool channel") from None
            data = data[written:]

    def receive(self) -> dict[str, Any]:
        (size,) = HEADER.unpack(self._exactly(HEADER.size))
        if size > MAX_REPLY:
            raise ChannelClosed(f"the daemon sent a frame of {size} bytes")
        message = json.loads(self._exactly(size).decode("utf-8"))
        if not isinstance(message, dict):
            raise ChannelClosed("the daemon sent a frame that is not an object")
        return message

    def _exactly(self, size: int) -> bytes:
        chunks, left = [], size
        while left:
            chunk = os.read(self.in_fd, min(left, 1 << 20))
            if not chunk:
                raise ChannelClosed("the daemon closed the tool channel")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def call(self, tool: str, args: dict[str, Any]) -> Any:
        """One tool call: its result, parsed from JSON when it is JSON."""
        with self.lock:
            self.next_id += 1
            self.send({"id": self.next_id, "tool": tool, "args": args})
            reply = self.receive()
        if "error" in reply and "result" not in reply:
            return {"error": reply["error"]}
        result = reply.get("result")
        if isinstance(result, str):
            try:
                return json.loads(result)
            except ValueError:
                return result
        return result


def _run(code: str) -> int:
    """Run the script as ``__main__``; its exit status (a traceback without this file's
    frame on an uncaught exception)."""
    linecache.cache[SCRIPT_NAME] = (len(code), None, code.splitlines(True), SCRIPT_NAME)
    main = types.ModuleType("__main__")
    main.__file__ = SCRIPT_NAME
    sys.modules["__main__"] = main
    try:
        compiled = compile(code, SCRIPT_NAME, "exec")
    except SyntaxError:
        traceback.print_exc(limit=0)
        return 1
    try:
        exec(compiled, main.__dict__)
    except SystemExit:
        raise
    except BaseException as exc:
        traceback.print_exception(
            type(exc), exc, exc.__traceback__.tb_next if exc.__traceback__ else None
        )
        return 1
    return 0


def main(argv: list[str]) -> int:
    out_fd, in_fd = int(argv[1]), int(argv[2])
    for fd in (out_fd, in_fd):
        os.set_inheritable(fd, False)
    # run by path, Python put this file's folder first; the script's imports start at its cwd
    sys.path[0] = os.getcwd()
    channel = Channel(out_fd, in_fd)
    first = channel.receive()
    module = types.ModuleType("hermes_tools")
    module.__dict__["_channel"] = channel
    exec(compile(str(first["module"]), "hermes_tools.py", "exec"), module.__dict__)
    sys.modules["hermes_tools"] = module
    status = _run(str(first["code"]))
    sys.stdout.flush()
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv))
