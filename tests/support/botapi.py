"""A stand-in for Telegram's Bot API on 127.0.0.1: the calls hermesd's Telegram adapter uses.

Telegram cannot be reached from the tests, so this server follows the published Bot API
(https://core.telegram.org/bots/api) for getMe, getUpdates (long polling with ``offset`` and
``timeout``), sendMessage (with ``reply_markup`` inline keyboards and ``parse_mode`` HTML),
sendChatAction, getFile (and the file download at ``/file/bot<token>/<file_path>``),
editMessageText, answerCallbackQuery, setMyCommands, sendPhoto, sendDocument,
setMessageReaction and editForumTopic, at ``http://127.0.0.1:PORT/bot<token>/<method>``,
form-encoded or multipart like python-telegram-bot sends them. A text sent with
``parse_mode=HTML`` is checked as Telegram checks it (only its tags, balanced, entities
escaped: else 400 "can't parse entities") and kept as the plain text people see, the markup
under ``html``. Tests play the people: `user_says`, `user_sends_photo`, `user_sends_voice`,
`user_sends_audio`, `press` and `react` queue updates; `wait_sent` waits for what the bot sent.
The one stand-in besides the model (docs/gateway.md).
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable
from email.parser import BytesParser
from email.policy import HTTP
from html.parser import HTMLParser
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self
from urllib.parse import parse_qs, unquote

TOKEN = "123456:TEST-token"
BOT = {"id": 123456, "is_bot": True, "first_name": "Hermes", "username": "hermes_test_bot"}
_JSON_FIELDS = {"reply_markup", "commands", "allowed_updates", "reply_parameters", "reaction"}
#: the tags Telegram's HTML parse mode accepts
_TAGS = {"b", "strong", "i", "em", "u", "ins", "s", "strike", "del", "span", "tg-spoiler", "a"}
_TAGS |= {"code", "pre", "blockquote", "tg-emoji"}


def person(user_id: int, name: str = "") -> dict[str, Any]:
    """A Telegram User object for a person."""
    name = name or f"user{user_id}"
    return {"id": user_id, "is_bot": False, "first_name": name, "username": name}


class BotApiServer:
    """The fake Bot API: updates to hand out, and every call the bot made."""

    def __init__(self, token: str = TOKEN) -> None:
        self.token = token
        self.revoked = False  # True: every call answers 401, as for a token BotFather revoked
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.updates: list[dict[str, Any]] = []
        self._cond = threading.Condition()
        self._update_ids = itertools.count(1)
        self._message_ids = itertools.count(1000)
        self.sent: dict[int, dict[str, Any]] = {}  # the bot's messages by id
        self.files: dict[str, bytes] = {}  # file_id -> content, for getFile and downloads
        self.paths: dict[str, str] = {}  # file_path (getFile's) -> file_id
        self.refuse_html = False  # True: every parse_mode=HTML text is refused (400)
        self.down = False  # True: every call fails as if the network were gone (500)
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.daemon_threads = True
        self._server.api = self  # type: ignore[attr-defined]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        """What the adapter's ``base_url`` setting takes."""
        return f"http://127.0.0.1:{self._server.server_address[1]}/bot"

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    # --- the people ------------------------------------------------------------------------

    def user_says(
        self,
        user_id: int,
        text: str,
        *,
        chat_id: int | None = None,
        chat_type: str = "private",
        thread_id: int | None = None,
    ) -> None:
        """A person writes ``text`` (in a private chat with the bot unless ``chat_id``)."""
        self._push({"message": self._incoming(user_id, text, chat_id, chat_type, thread_id)})

    def _keep_file(self, kind: str, data: bytes, suffix: str) -> str:
        file_id = f"{kind}{len(self.files) + 1}"
        self.files[file_id] = data
        self.paths[f"{kind}s/file_{len(self.files)}{suffix}"] = file_id
        return file_id

    def user_sends_voice(
        self, user_id: int, data: bytes, *, chat_id: int | None = None, chat_type: str = "private"
    ) -> None:
        """A person records a voice message (OGG/Opus, as Telegram's apps send them)."""
        self._audio(user_id, data, "voice", {"mime_type": "audio/ogg"}, chat_id, chat_type)

    def user_sends_audio(self, user_id: int, data: bytes, file_name: str) -> None:
        """A person sends an audio file (a song, a recording from elsewhere) as music."""
        self._audio(user_id, data, "audio", {"mime_type": "audio/mpeg", "file_name": file_name})

    def _audio(
        self,
        user_id: int,
        data: bytes,
        kind: str,
        fields: dict[str, Any],
        chat_id: int | None = None,
        chat_type: str = "private",
    ) -> None:
        file_id = self._keep_file(kind, data, ".oga" if kind == "voice" else ".mp3")
        message = self._incoming(user_id, "", chat_id, chat_type, None)
        del message["text"]
        message[kind] = {
            "file_id": file_id,
            "file_unique_id": file_id,
            "duration": 2,
            "file_size": len(data),
            **fields,
        }
        self._push({"message": message})

    def user_sends_photo(self, user_id: int, data: bytes, caption: str = "") -> None:
        """A person sends a photo (with a caption) in their private chat with the bot."""
        file_id = self._keep_file("photo", data, ".jpg")
        message = self._incoming(user_id, "", None, "private", None)
        del message["text"]
        sizes = [
            {
                "file_id": file_id,
                "file_unique_id": file_id,
                "width": 9,
                "height": 9,
                "file_size": len(data),
            }
        ]
        message.update(photo=sizes, caption=caption)
        self._push({"message": message})

    def _incoming(
        self, user_id: int, text: str, chat_id: int | None, chat_type: str, thread_id: int | None
    ) -> dict[str, Any]:
        chat = {"id": chat_id or user_id, "type": chat_type}
        if chat_type == "private":
            chat["first_name"] = person(user_id)["first_name"]
        else:
            chat["title"] = f"group {chat_id}"
        message: dict[str, Any] = {
            "message_id": next(self._message_ids),
            "date": int(time.time()),
            "chat": chat,
            "from": person(user_id),
            "text": text,
        }
        if text.startswith("/"):
            command = text.split()[0]
            message["entities"] = [{"type": "bot_command", "offset": 0, "length": len(command)}]
        if thread_id is not None:
            message["message_thread_id"] = thread_id
            message["is_topic_message"] = True
        return message

    def press(self, user_id: int, message_id: int, data: str) -> None:
        """A person presses the inline button carrying ``data`` under the bot's message."""
        message = self.sent[message_id]
        query = {
            "id": f"cq{message_id}{user_id}",
            "from": person(user_id),
            "message": message,
            "chat_instance": "1",
            "data": data,
        }
        self._push({"callback_query": query})

    def react(self, user_id: int, message_id: int, emoji: str) -> None:
        """A person reacts with ``emoji`` to a message in their private chat with the bot."""
        reaction = {
            "chat": {"id": user_id, "type": "private"},
            "message_id": message_id,
            "user": person(user_id),
            "date": int(time.time()),
            "old_reaction": [],
            "new_reaction": [{"type": "emoji", "emoji": emoji}],
        }
        self._push({"message_reaction": reaction})

    def _push(self, update: dict[str, Any]) -> None:
        with self._cond:
            self.updates.append({"update_id": next(self._update_ids), **update})
            self._cond.notify_all()

    # --- what the bot did ------------------------------------------------------------------

    def wait_call(
        self,
        method: str,
        match: Callable[[dict[str, Any]], bool] = lambda p: True,
        timeout: float = 30,
    ) -> dict[str, Any]:
        """The first call of ``method`` whose params ``match``, waiting for it."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for name, params in self.calls:
                    if name == method and match(params):
                        return params
                left = deadline - time.monotonic()
                if left <= 0:
                    seen = [(n, p.get("text")) for n, p in self.calls if n != "sendChatAction"]
                    raise AssertionError(f"no {method} matching in {timeout}s; calls: {seen}")
                self._cond.wait(left)

    def wait_sent(self, chat_id: int, contains: str, timeout: float = 30) -> dict[str, Any]:
        """The first message sent to ``chat_id`` whose text contains ``contains``."""
        return self.wait_call(
            "sendMessage",
            lambda p: str(p.get("chat_id")) == str(chat_id) and contains in str(p.get("text")),
            timeout,
        )

    def texts(self, chat_id: int) -> list[str]:
        """Texts the bot sent to ``chat_id``, in order."""
        with self._cond:
            return [
                str(p.get("text"))
                for n, p in self.calls
                if n == "sendMessage" and str(p.get("chat_id")) == str(chat_id)
            ]

    # --- serving ---------------------------------------------------------------------------

    def answer(self, method: str, params: dict[str, Any]) -> Any:
        """The ``result`` of one Bot API call."""
        if method == "getUpdates":
            return self._get_updates(params)
        with self._cond:
            self.calls.append((method, params))
            self._cond.notify_all()
        if method == "getMe":
            return {
                **BOT,
                "can_join_groups": True,
                "can_read_all_group_messages": False,
                "supports_inline_queries": False,
            }
        if params.get("parse_mode") == "HTML":
            params["html"] = params["text"]
            params["text"] = self._plain(params["text"])
        if method in ("sendMessage", "sendPhoto", "sendDocument"):
            return self._message(method, params)
        if method == "getFile":
            data = self.files[params["file_id"]]
            path = next(p for p, f in self.paths.items() if f == params["file_id"])
            return {
                "file_id": params["file_id"],
                "file_unique_id": params["file_id"],
                "file_size": len(data),
                "file_path": path,
            }
        if method == "editMessageText":
            message = self.sent[int(params["message_id"])]
            message["text"] = params["text"]
            message.pop("reply_markup", None)
            return message
        # sendChatAction, answerCallbackQuery, setMyCommands, deleteWebhook,
        # setMessageReaction, editForumTopic
        return True

    def _plain(self, text: str) -> str:
        """What people see of an HTML text; a BadRequest when Telegram would refuse it."""
        if self.refuse_html:
            raise BadRequest("can't parse entities: refused by the test")
        checker = _TelegramHtml()
        checker.feed(text)
        checker.close()
        if checker.open:
            raise BadRequest(f"can't parse entities: unclosed <{checker.open[-1]}>")
        return "".join(checker.plain)

    def _message(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        chat_id = int(params["chat_id"])
        message: dict[str, Any] = {
            "message_id": next(self._message_ids),
            "date": int(time.time()),
            "chat": {"id": chat_id, "type": "private" if chat_id > 0 else "group"},
            "from": BOT,
        }
        if method == "sendMessage":
            message["text"] = params["text"]
        elif method == "sendPhoto":
            message["photo"] = [{"file_id": "p1", "file_unique_id": "p1", "width": 1, "height": 1}]
        else:
            message["document"] = {
                "file_id": "d1",
                "file_unique_id": "d1",
                "file_name": params.get("document_name", "file"),
            }
        if isinstance(params.get("reply_markup"), dict):
            message["reply_markup"] = params["reply_markup"]
        params["message_id"] = message["message_id"]
        self.sent[message["message_id"]] = message
        return message

    def _get_updates(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        offset = int(params.get("offset") or 0)
        deadline = time.monotonic() + min(float(params.get("timeout") or 0), 5.0)
        with self._cond:
            self.updates = [u for u in self.updates if u["update_id"] >= offset]
            while not self.updates and time.monotonic() < deadline:
                self._cond.wait(deadline - time.monotonic())
            return list(self.updates)


class BadRequest(Exception):
    """A call Telegram answers with 400 and this description."""


class _TelegramHtml(HTMLParser):
    """Checks a text as Telegram's HTML parse mode does; keeps the plain text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.open: list[str] = []
        self.plain: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in _TAGS:
            raise BadRequest(f'can\'t parse entities: unsupported start tag "{tag}"')
        self.open.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if not self.open or self.open[-1] != tag:
            raise BadRequest(f'can\'t parse entities: unexpected end tag "{tag}"')
        self.open.pop()

    def handle_data(self, data: str) -> None:
        self.plain.append(data)


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client gone mid-answer (the daemon stopping while it long-polls)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        api: BotApiServer = self.server.api  # type: ignore[attr-defined]
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        download = f"/file/bot{api.token}/"
        path = unquote(self.path)
        if api.down:
            self._reply(502, {"ok": False, "error_code": 502, "description": "Bad Gateway"})
            return
        if path.startswith(download):  # a file's content (getFile's file_path)
            data = api.files[api.paths[path[len(download) :]]]
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        prefix = f"/bot{api.token}/"
        if not self.path.startswith(prefix) or api.revoked:
            self._reply(401, {"ok": False, "error_code": 401, "description": "Unauthorized"})
            return
        method = self.path[len(prefix) :]
        try:
            params = _params(self.headers.get("Content-Type") or "", body)
            self._reply(200, {"ok": True, "result": api.answer(method, params)})
        except (KeyError, BadRequest) as exc:
            self._reply(400, {"ok": False, "error_code": 400, "description": f"Bad Request: {exc}"})

    do_GET = do_POST

    def _reply(self, status: int, obj: Any) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def _params(content_type: str, body: bytes) -> dict[str, Any]:
    if not body:
        return {}
    if content_type.startswith("application/json"):
        return dict(json.loads(body))
    if content_type.startswith("multipart/form-data"):
        message = BytesParser(policy=HTTP).parsebytes(
            b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + body
        )
        found: dict[str, Any] = {}
        for part in message.iter_parts():
            name = part.get_param("name", header="content-disposition")
            filename = part.get_filename()
            payload = part.get_payload(decode=True) or b""
            if filename:
                found[f"{name}_name"] = filename
                found[str(name)] = payload
            else:
                found[str(name)] = _value(str(name), payload.decode())
        return found
    return {k: _value(k, v[0]) for k, v in parse_qs(body.decode(), keep_blank_values=True).items()}


def _value(name: str, raw: str) -> Any:
    return json.loads(raw) if name in _JSON_FIELDS else raw
