"""The built-in Telegram adapter, on python-telegram-bot's `telegram.Bot` (v22).

Long-polls ``getUpdates`` itself (no ``Application``: one loop, each update handled in a task of
its own, so a button pressed while a turn waits for it is seen at once). A message becomes a
`MessageEvent` (private chats are ``dm``, groups ``group``, forum topics carry ``thread_id``);
a pressed inline button (``callback_query``) goes to the gateway and is answered with
``answerCallbackQuery``; a reaction is a ``gateway_platform_event``. Answers go out with their
markdown rendered for Telegram's HTML parse mode (``telegram_format``; plain text when Telegram
refuses it), approvals and questions as plain text with an inline keyboard; the bot menu lists
the slash commands (``setMyCommands``). A failed ``getUpdates`` is retried after an exponential,
capped, jittered delay (`retry_delay`; ``reconnect_initial_seconds`` / ``reconnect_max_seconds``
in the platform's settings) and the adapter reports itself disconnected meanwhile. ``base_url``
in the platform's settings points the bot at another Bot API server (a local one, or the tests'
stand-in).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hermesd.gateway.base import (
    Button,
    MessageEvent,
    MessageType,
    Platform,
    PlatformAdapter,
    PlatformConfig,
    SendResult,
    SessionSource,
)
from hermesd.gateway.telegram_format import telegram_html

log = logging.getLogger(__name__)

POLL_TIMEOUT = 25  # seconds getUpdates waits on the server
RETRY_INITIAL = 1.0  # seconds before the first retry of a failed getUpdates
RETRY_MAX = 60.0  # the longest wait between retries
MAX_DOWNLOAD = 20 * 1024 * 1024  # the Bot API's own limit for getFile
_COMMAND = re.compile(r"[a-z0-9_]{1,32}")
_CHAT_TYPES = {"private": "dm", "group": "group", "supergroup": "group", "channel": "channel"}


def check_requirements() -> bool:
    """Whether python-telegram-bot is importable."""
    try:
        import telegram  # noqa: F401
    except ImportError:
        return False
    return True


def create_adapter(config: PlatformConfig) -> TelegramAdapter:
    """The adapter for ``gateway.platforms.telegram``."""
    return TelegramAdapter(config)


class TelegramAdapter(PlatformAdapter):
    """Telegram through the Bot API."""

    MAX_MESSAGE_LENGTH = 4096
    supports_buttons = True
    supported_actions = frozenset({"add_reaction", "set_thread_title"})

    def __init__(self, config: PlatformConfig) -> None:
        super().__init__(config, Platform.TELEGRAM)
        self.bot: Any = None
        self._poller: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    async def connect(self) -> bool:
        from telegram import Bot

        base_url = str(self.config.extra.get("base_url") or "https://api.telegram.org/bot")
        # files come from <server>/file/bot<token>/<path>
        file_url = base_url[: -len("bot")] + "file/bot" if base_url.endswith("/bot") else base_url
        self.bot = Bot(str(self.config.token), base_url=base_url, base_file_url=file_url)
        try:
            await self.bot.initialize()  # getMe: a wrong token fails here
        except Exception as exc:
            self._set_fatal_error("connect", f"{type(exc).__name__}: {exc}")
            return False
        self._mark_connected()
        self._poller = asyncio.get_running_loop().create_task(self._poll())
        log.info("telegram: connected as @%s", self.bot.username)
        return True

    async def disconnect(self) -> None:
        self._mark_disconnected()
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._poller
        for task in list(self._tasks):
            task.cancel()
        if self.bot is not None:
            with contextlib.suppress(Exception):
                await self.bot.shutdown()

    async def _poll(self) -> None:
        from telegram.error import Forbidden, InvalidToken

        offset: int | None = None
        failures = 0
        initial = float(self.config.extra.get("reconnect_initial_seconds") or RETRY_INITIAL)
        longest = float(self.config.extra.get("reconnect_max_seconds") or RETRY_MAX)
        while True:  # until cancelled by `disconnect`
            try:
                updates = await self.bot.get_updates(
                    offset=offset,
                    timeout=POLL_TIMEOUT,
                    read_timeout=POLL_TIMEOUT + 10,
                    allowed_updates=["message", "callback_query", "message_reaction"],
                )
            except asyncio.CancelledError:
                raise
            except (InvalidToken, Forbidden) as exc:  # retrying cannot help: stop, say why
                log.error("telegram: the Bot API refuses the token: %s", exc)
                self._set_fatal_error("token", str(exc))
                return
            except Exception as exc:
                delay = retry_delay(failures, initial, longest)
                failures += 1
                log.warning("telegram: getUpdates failed (%s); retrying in %.1fs", exc, delay)
                self._mark_disconnected()
                await asyncio.sleep(delay)
                continue
            if failures:
                log.info("telegram: reconnected after %d failed attempts", failures)
                failures = 0
                self._mark_connected()
            for update in updates:
                offset = update.update_id + 1
                task = asyncio.get_running_loop().create_task(self._on_update(update))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def _on_update(self, update: Any) -> None:
        try:
            if update.callback_query is not None:
                await self._on_button(update.callback_query)
            elif update.message is not None:
                event = self._event(update.message, update.update_id)
                await self._download(update.message, event)
                await self.handle_message(event)
            elif update.message_reaction is not None:
                await self._on_reaction(update.message_reaction)
        except Exception:
            log.exception("telegram: update %s failed", update.update_id)

    def _source(self, message: Any, user: Any) -> SessionSource:
        chat = message.chat
        thread = message.message_thread_id if getattr(message, "is_topic_message", False) else None
        return SessionSource(
            platform=self.platform,
            chat_id=str(chat.id),
            chat_name=chat.title or chat.full_name or chat.username,
            chat_type=_CHAT_TYPES.get(chat.type, "group"),
            user_id=str(user.id) if user is not None else None,
            user_name=(user.username or user.full_name) if user is not None else None,
            thread_id=str(thread) if thread else None,
            is_bot=bool(user is not None and user.is_bot),
            message_id=str(message.message_id),
        )

    def _event(self, message: Any, update_id: int) -> MessageEvent:
        text = message.text or message.caption or ""
        kind = MessageType.TEXT
        if text.startswith("/"):
            kind = MessageType.COMMAND
        elif message.photo:
            kind = MessageType.PHOTO
        elif message.voice is not None:
            kind = MessageType.VOICE
        elif message.audio is not None:
            kind = MessageType.AUDIO
        elif message.document is not None:
            kind = MessageType.DOCUMENT
        return MessageEvent(
            text=text,
            message_type=kind,
            source=self._source(message, message.from_user),
            raw_message=message,
            message_id=str(message.message_id),
            reply_to_message_id=(
                str(message.reply_to_message.message_id) if message.reply_to_message else None
            ),
            metadata={"update_id": update_id},
        )

    async def _download(self, message: Any, event: MessageEvent) -> None:
        """A photo (its largest size), a voice note, an audio file or a document into
        `media_urls` (up to `MAX_DOWNLOAD`)."""
        if message.photo:
            item, name, kind = message.photo[-1], "photo.jpg", "image/jpeg"
        elif message.voice is not None:
            item, name = message.voice, "voice.ogg"
            kind = item.mime_type or "audio/ogg"
        elif message.audio is not None:
            item = message.audio
            name = item.file_name or "audio.mp3"
            kind = item.mime_type or "audio/mpeg"
        elif message.document is not None:
            item = message.document
            name = item.file_name or "document"
            kind = item.mime_type or "application/octet-stream"
        else:
            return
        if (item.file_size or 0) > MAX_DOWNLOAD:
            event.text = f"{event.text}\n[a file of {item.file_size} bytes was not downloaded]"
            return
        try:
            data = await (await self.bot.get_file(item.file_id)).download_as_bytearray()
        except Exception as exc:
            log.warning("telegram: could not download %s: %s", name, exc)
            return
        event.media_urls.append(await self.cache_media(bytes(data), name))
        event.media_types.append(kind)

    async def _on_button(self, query: Any) -> None:
        message = query.message
        if message is None or query.data is None:
            await query.answer()
            return
        shown = await self.handle_button(self._source(message, query.from_user), query.data)
        await self.bot.answer_callback_query(query.id, text=(shown or "")[:200] or None)

    async def _on_reaction(self, reaction: Any) -> None:
        payload = {
            "chat_id": str(reaction.chat.id),
            "message_id": str(reaction.message_id),
            "user_id": str(reaction.user.id) if reaction.user else None,
            "new_reaction": [getattr(r, "emoji", None) for r in reaction.new_reaction],
            "old_reaction": [getattr(r, "emoji", None) for r in reaction.old_reaction],
        }
        await self.platform_event("reaction", payload)

    # --- sending ----------------------------------------------------------------------------

    async def _call(self, what: str, coro: Any) -> SendResult:
        try:
            message = await coro
        except Exception as exc:
            return _failed(what, exc)
        message_id = getattr(message, "message_id", None)
        return SendResult(True, str(message_id) if message_id is not None else None, None, message)

    async def send(
        self,
        chat_id: str,
        content: str,
        reply_to: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> SendResult:
        """Send ``content`` (markdown) rendered for Telegram's HTML parse mode."""
        where = {
            "message_thread_id": _thread_id(metadata),
            "reply_to_message_id": int(reply_to) if reply_to else None,
        }
        return await self._rendered(
            "sendMessage",
            lambda text, **mode: self.bot.send_message(chat_id, text, **where, **mode),
            content,
        )

    async def _rendered(self, what: str, call: Callable[..., Any], content: str) -> SendResult:
        """``call(text, parse_mode=...)`` with ``content`` as Telegram HTML; again with the
        plain markdown when Telegram refuses the markup (it names the entity it cannot parse)."""
        from telegram.error import BadRequest

        try:
            message = await call(telegram_html(content), parse_mode="HTML")
        except BadRequest as exc:
            if "parse entities" not in str(exc).lower():
                return _failed(what, exc)
            log.warning("telegram: the HTML was refused (%s); sending plain text", exc)
            return await self._call(what, call(content))
        except Exception as exc:
            return _failed(what, exc)
        message_id = getattr(message, "message_id", None)
        return SendResult(True, str(message_id) if message_id is not None else None, None, message)

    async def send_buttons(
        self,
        chat_id: str,
        content: str,
        buttons: list[Button],
        metadata: dict[str, Any] | None = None,
    ) -> SendResult:
        from telegram import InlineKeyboardButton, InlineKeyboardMarkup

        rows = [[InlineKeyboardButton(b.label, callback_data=b.data[:64])] for b in buttons]
        return await self._call(
            "sendMessage",
            self.bot.send_message(
                chat_id,
                content,
                message_thread_id=_thread_id(metadata),
                reply_markup=InlineKeyboardMarkup(rows),
            ),
        )

    async def edit_message(self, chat_id: str, message_id: str, content: str) -> SendResult:
        return await self._rendered(
            "editMessageText",
            lambda text, **mode: self.bot.edit_message_text(
                text, chat_id=chat_id, message_id=int(message_id), **mode
            ),
            content,
        )

    async def add_reaction(self, chat_id: str, message_id: str, emoji: str) -> SendResult:
        return await self._call(
            "setMessageReaction",
            self.bot.set_message_reaction(chat_id, int(message_id), reaction=emoji),
        )

    async def set_thread_title(self, chat_id: str, thread_id: str, title: str) -> SendResult:
        return await self._call(
            "editForumTopic", self.bot.edit_forum_topic(chat_id, int(thread_id), name=title)
        )

    async def send_typing(self, chat_id: str, metadata: dict[str, Any] | None = None) -> None:
        await self.bot.send_chat_action(chat_id, "typing", message_thread_id=_thread_id(metadata))

    async def send_image_file(
        self,
        chat_id: str,
        image_path: str,
        caption: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> SendResult:
        data = await asyncio.to_thread(Path(image_path).read_bytes)
        return await self._call(
            "sendPhoto",
            self.bot.send_photo(
                chat_id, data, caption=caption, message_thread_id=_thread_id(metadata)
            ),
        )

    async def send_document(
        self,
        chat_id: str,
        file_path: str,
        caption: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> SendResult:
        data = await asyncio.to_thread(Path(file_path).read_bytes)
        return await self._call(
            "sendDocument",
            self.bot.send_document(
                chat_id,
                data,
                filename=Path(file_path).name,
                caption=caption,
                message_thread_id=_thread_id(metadata),
            ),
        )

    async def set_commands(self, commands: list[tuple[str, str]]) -> None:
        from telegram import BotCommand

        menu = [
            BotCommand(name, (description or name)[:256])
            for name, description in commands
            if _COMMAND.fullmatch(name)
        ][:100]
        await self.bot.set_my_commands(menu)


def retry_delay(failures: int, initial: float, longest: float) -> float:
    """Seconds to wait after ``failures`` earlier failures in a row: ``initial`` doubled each
    time up to ``longest``, then a random half of it taken off (so many bots that lost the same
    server do not come back in step)."""
    ceiling = min(longest, initial * 2.0 ** min(failures, 32))
    return ceiling * random.uniform(0.5, 1.0)


def _failed(what: str, exc: Exception) -> SendResult:
    log.warning("telegram: %s failed: %s", what, exc)
    return SendResult(False, error=f"{type(exc).__name__}: {exc}")


def _thread_id(metadata: dict[str, Any] | None) -> int | None:
    thread = (metadata or {}).get("thread_id")
    return int(thread) if thread and str(thread).isdigit() else None
