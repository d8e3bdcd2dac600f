"""The adapter interface: what a messaging platform implements to talk to the gateway.

An adapter turns a platform's updates into `MessageEvent` values (text, a `SessionSource`
saying where it came from, media paths) and hands each to the handler the gateway set with
`PlatformAdapter.set_message_handler`; the gateway answers through `send` (and `send_typing`,
`send_buttons`, `edit_message`, `send_image_file`, `send_document`). Built-in adapters
(Telegram) and plugin adapters (``ctx.register_platform(name, label, adapter_factory,
check_fn)``) are the same kind of object: the factory gets a `PlatformConfig` and returns a
`PlatformAdapter`. The names follow the reference's ``gateway.platforms.base`` so a plugin
written for it imports them unchanged (``hermesd.plugins.compat.gateway.platforms.base``).

This module owns only values and the abstract class; it knows no daemon, no session and no
platform library.
"""

from __future__ import annotations

import asyncio
import logging
import re
import secrets
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

_PLATFORM_NAME = re.compile(r"[a-z][a-z0-9_-]{0,31}")


class Platform(Enum):
    """A messaging platform by name; ``Platform("irc")`` makes a member for a plugin's."""

    LOCAL = "local"
    TELEGRAM = "telegram"
    MATRIX = "matrix"

    @classmethod
    def _missing_(cls, value: object) -> Platform | None:
        if not isinstance(value, str) or not _PLATFORM_NAME.fullmatch(value):
            return None
        member = object.__new__(cls)
        member._name_ = value.upper()
        member._value_ = value
        return cls._value2member_map_.setdefault(value, member)  # type: ignore[return-value]


class MessageType(Enum):
    """What kind of message arrived."""

    TEXT = "text"
    LOCATION = "location"
    PHOTO = "photo"
    VIDEO = "video"
    AUDIO = "audio"
    VOICE = "voice"
    DOCUMENT = "document"
    STICKER = "sticker"
    COMMAND = "command"


@dataclass
class PlatformConfig:
    """One platform's settings (``gateway.platforms.<name>`` in config.yaml); ``extra`` has
    the keys the gateway does not read itself (a plugin adapter's own)."""

    enabled: bool = False
    token: str | None = None
    api_key: str | None = None
    reply_to_mode: str = "first"
    typing_indicator: bool = True
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class SessionSource:
    """Where a message came from, and so where answers go and which session it belongs to."""

    platform: Platform
    chat_id: str
    chat_name: str | None = None
    chat_type: str = "dm"  # dm | group | channel | thread
    user_id: str | None = None
    user_name: str | None = None
    thread_id: str | None = None
    chat_topic: str | None = None
    user_id_alt: str | None = None
    chat_id_alt: str | None = None
    is_bot: bool = False
    message_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain data (for hooks, logs and ``gateway.status``)."""
        return {
            "platform": self.platform.value,
            "chat_id": self.chat_id,
            "chat_name": self.chat_name,
            "chat_type": self.chat_type,
            "user_id": self.user_id,
            "user_name": self.user_name,
            "thread_id": self.thread_id,
        }


@dataclass
class MessageEvent:
    """One incoming message, as every adapter reports it."""

    text: str
    message_type: MessageType = MessageType.TEXT
    source: SessionSource = field(default_factory=lambda: SessionSource(Platform.LOCAL, ""))
    raw_message: Any = None
    message_id: str | None = None
    media_urls: list[str] = field(default_factory=list)
    media_types: list[str] = field(default_factory=list)
    reply_to_message_id: str | None = None
    reply_to_text: str | None = None
    internal: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)
    timestamp: datetime = field(default_factory=datetime.now)

    def is_command(self) -> bool:
        """Whether the text is a slash command."""
        return self.text.startswith("/")

    def get_command(self) -> str | None:
        """The command's name, lower case, without ``@botname`` (None for plain text)."""
        if not self.is_command():
            return None
        parts = self.text.split(maxsplit=1)
        raw = parts[0][1:].lower() if parts else ""
        raw = raw.split("@", 1)[0]
        return raw if raw and "/" not in raw else None

    def get_command_args(self) -> str:
        """What follows the command name (the whole text for plain text)."""
        if not self.is_command():
            return self.text
        parts = self.text.split(maxsplit=1)
        return parts[1] if len(parts) > 1 else ""


@dataclass
class SendResult:
    """What sending one message did."""

    success: bool
    message_id: str | None = None
    error: str | None = None
    raw_response: Any = None
    retryable: bool = False


@dataclass(frozen=True)
class Button:
    """A button under a message (an inline keyboard): its label and the data it sends back."""

    label: str
    data: str


#: the gateway's handler: gets each event, may return a text to send back
MessageHandler = Callable[[MessageEvent], Awaitable[str | None]]
#: the gateway's handler of a pressed button: (source of the press, its data)
ButtonHandler = Callable[[SessionSource, str], Awaitable[str | None]]
#: the gateway's handler of other platform events (``gateway_platform_event``): type, payload
PlatformEventHandler = Callable[[str, dict[str, Any]], Awaitable[None]]


class PlatformAdapter(ABC):
    """The base of every platform adapter (the reference's ``BasePlatformAdapter``).

    Subclasses implement `connect`, `disconnect`, `send` and `get_chat_info`; the rest have
    plain defaults. ``MAX_MESSAGE_LENGTH`` is the platform's limit the gateway splits at.
    """

    MAX_MESSAGE_LENGTH = 4096
    supports_code_blocks = False
    supports_buttons = False
    #: the verbs of `add_reaction`/`set_thread_title` this platform has (``ctx.platform_actions``)
    supported_actions: frozenset[str] = frozenset()

    def __init__(self, config: PlatformConfig, platform: Platform) -> None:
        self.config = config
        self.platform = platform
        self._message_handler: MessageHandler | None = None
        self._button_handler: ButtonHandler | None = None
        self._authorization_check: Callable[[str | None], bool] | None = None
        self._pairing_check: Callable[[], bool] | None = None
        self._event_handler: PlatformEventHandler | None = None
        self._running = False
        self._fatal_error_message: str | None = None
        #: where `cache_media` keeps downloaded files (the gateway sets it per platform)
        self.media_dir = Path(tempfile.gettempdir())

    @property
    def name(self) -> str:
        """The platform's name as people read it."""
        return self.platform.value.title()

    @property
    def is_connected(self) -> bool:
        """Whether the adapter is connected and receiving."""
        return self._running

    @property
    def fatal_error_message(self) -> str | None:
        """Why the adapter stopped for good, if it did."""
        return self._fatal_error_message

    def set_message_handler(self, handler: MessageHandler) -> None:
        """The gateway's handler of incoming messages (set before `connect`)."""
        self._message_handler = handler

    def set_button_handler(self, handler: ButtonHandler) -> None:
        """The gateway's handler of pressed buttons (platforms with buttons)."""
        self._button_handler = handler

    def set_authorization_check(self, check: Callable[[str | None], bool]) -> None:
        """The gateway's test of whether a platform user id is admitted (an adapter asks it
        before it acts for someone outside a message, e.g. joining a room they invite it to)."""
        self._authorization_check = check

    def _is_sender_authorized(self, user_id: str | None) -> bool:
        check = self._authorization_check
        return bool(check is not None and check(user_id))

    def set_pairing_check(self, check: Callable[[], bool]) -> None:
        """The gateway's answer to whether a stranger in a direct chat is offered pairing
        (``gateway.unauthorized_dm_behavior: pair``), read when an adapter must decide."""
        self._pairing_check = check

    def _strangers_may_pair(self) -> bool:
        check = self._pairing_check
        return True if check is None else bool(check())

    def set_platform_event_handler(self, handler: PlatformEventHandler) -> None:
        """The gateway's handler of reactions, edits and the like."""
        self._event_handler = handler

    async def platform_event(self, event_type: str, payload: dict[str, Any]) -> None:
        """Report a reaction, an edit or the like (``gateway_platform_event``)."""
        if self._event_handler is not None:
            await self._event_handler(event_type, payload)

    async def cache_media(self, data: bytes, name: str) -> str:
        """Keep a downloaded file (a photo, a document) in `media_dir`; its path, for
        `MessageEvent.media_urls`."""

        def write() -> str:
            self.media_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            safe = re.sub(r"[^A-Za-z0-9._-]", "_", name)[-80:] or "file"
            path = self.media_dir / f"{secrets.token_hex(6)}-{safe}"
            path.write_bytes(data)
            return str(path)

        return await asyncio.to_thread(write)

    def _mark_connected(self) -> None:
        self._running = True
        self._fatal_error_message = None

    def _mark_disconnected(self) -> None:
        self._running = False

    def _set_fatal_error(self, code: str, message: str, *, retryable: bool = False) -> None:
        self._running = False
        self._fatal_error_message = f"{code}: {message}"

    async def handle_message(self, event: MessageEvent) -> None:
        """Hand ``event`` to the gateway and send back what it returns (the adapter's call)."""
        if self._message_handler is None:
            log.warning("%s: message dropped, no gateway handler is set", self.name)
            return
        reply = await self._message_handler(event)
        if reply:
            await self.send(event.source.chat_id, reply, metadata=_thread(event.source))

    async def handle_button(self, source: SessionSource, data: str) -> str | None:
        """Hand a pressed button to the gateway; the text to show for it."""
        if self._button_handler is None:
            return None
        return await self._button_handler(source, data)

    @abstractmethod
    async def connect(self) -> bool:
        """Connect and start receiving; False when it cannot."""

    @abstractmethod
    async def disconnect(self) -> None:
        """Stop receiving and disconnect."""

    @abstractmethod
    async def send(
        self,
        chat_id: str,
        content: str,
        reply_to: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> SendResult:
        """Send one message (already split to ``MAX_MESSAGE_LENGTH``) to ``chat_id``."""

    async def get_chat_info(self, chat_id: str) -> dict[str, Any]:
        """What the platform says about a chat (name, type)."""
        return {"name": chat_id, "type": "dm"}

    async def send_typing(self, chat_id: str, metadata: dict[str, Any] | None = None) -> None:
        """Show that an answer is being written (a no-op where the platform has none)."""
        return None

    async def stop_typing(self, chat_id: str) -> None:
        """Stop showing it (most platforms stop by themselves)."""
        return None

    async def send_buttons(
        self,
        chat_id: str,
        content: str,
        buttons: list[Button],
        metadata: dict[str, Any] | None = None,
    ) -> SendResult:
        """A message with buttons; without buttons on the platform, the text alone."""
        return await self.send(chat_id, content, metadata=metadata)

    async def edit_message(self, chat_id: str, message_id: str, content: str) -> SendResult:
        """Replace a sent message's text (and drop its buttons); unsupported by default."""
        return SendResult(False, error="editing is not supported")

    async def send_image_file(
        self,
        chat_id: str,
        image_path: str,
        caption: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> SendResult:
        """Send an image file; by default its path as text."""
        return await self.send(chat_id, f"{caption or ''}\n{image_path}".strip(), metadata=metadata)

    async def send_document(
        self,
        chat_id: str,
        file_path: str,
        caption: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> SendResult:
        """Send a file; by default its path as text."""
        return await self.send(chat_id, f"{caption or ''}\n{file_path}".strip(), metadata=metadata)

    async def add_reaction(self, chat_id: str, message_id: str, emoji: str) -> SendResult:
        """React to a message with ``emoji`` (platforms listing ``add_reaction``)."""
        return SendResult(False, error="reactions are not supported")

    async def set_thread_title(self, chat_id: str, thread_id: str, title: str) -> SendResult:
        """Rename a thread or forum topic (platforms listing ``set_thread_title``)."""
        return SendResult(False, error="renaming threads is not supported")

    async def set_commands(self, commands: list[tuple[str, str]]) -> None:
        """Offer ``(name, description)`` slash commands in the platform's menu, if it has one."""
        return None

    def format_message(self, content: str) -> str:
        """The platform's form of a markdown answer (unchanged by default)."""
        return content


def _thread(source: SessionSource) -> dict[str, Any] | None:
    return {"thread_id": source.thread_id} if source.thread_id else None
