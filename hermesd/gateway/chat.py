"""`ChatLink`: one chat user in one conversation, as a client of the daemon.

A chat user reaches the daemon the way the HTTP door's requests do: through an in-process RPC
connection (`hermesd.http.door.Link`) admitted as the user's identity (owner or member), so the
router's access gate, the session ownership rules and the budgets apply to them as to a socket
client of that identity. The link sends the chat's messages (``session.send``) and commands
(``command.run``); what the daemon asks it (``approval.request``, ``clarify.request``) becomes a
message with buttons in the chat, answered with ``approvals.respond`` / ``clarify.respond`` as
the same identity. When a question is decided elsewhere (``hermesctl``, another chat) the
daemon tells the link (``approval.resolved`` / ``clarify.resolved``) and the chat's message is
edited to say so: a decision anywhere closes the others.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

from hermesd.gateway.base import Button, PlatformAdapter, SessionSource
from hermesd.gateway.users import ChatIdentity
from hermesd.http.door import Link

log = logging.getLogger(__name__)

#: the reference's approval choices, as buttons
APPROVAL_BUTTONS = (
    ("Allow once", "once"),
    ("Allow for session", "session"),
    ("Always allow", "always"),
    ("Deny", "deny"),
)


@dataclass
class ChatLink:
    """A chat user's connection into the daemon, and the questions shown in their chat."""

    link: Link
    adapter: PlatformAdapter
    source: SessionSource
    identity: ChatIdentity
    shown: dict[str, str] = field(default_factory=dict)  # question id -> chat message id
    reader: asyncio.Task[None] | None = None

    @property
    def metadata(self) -> dict[str, Any] | None:
        """Where in the chat answers go (its thread)."""
        return {"thread_id": self.source.thread_id} if self.source.thread_id else None

    def start(self) -> None:
        """Start reading what the daemon sends this link."""
        self.reader = asyncio.get_running_loop().create_task(self._read())

    def close(self) -> None:
        """Close the link; questions shown stay answerable from elsewhere."""
        self.link.close()

    async def _read(self) -> None:
        while True:
            kind, method, params = await self.link.inbox.get()
            if kind == "closed":
                return
            try:
                await self._on(kind, method, params)
            except Exception:
                log.exception("gateway: %s on %s failed", method, self.adapter.name)

    async def _on(self, kind: str, method: str, params: Any) -> None:
        body = params[0] if isinstance(params, list) and params else {}
        if not isinstance(body, dict):
            return
        if method == "approval.request":
            await self._ask_approval(body)
        elif method == "clarify.request":
            await self._ask_question(body)
        elif method in ("approval.resolved", "clarify.resolved"):
            await self._closed(body)

    async def _ask_approval(self, request: dict[str, Any]) -> None:
        text = (
            f"⚠️ Approval needed: {request.get('description') or request.get('tool')}\n\n"
            f"{request.get('command', '')}\n\n"
            f"Answer with the buttons, or /approve, /approve session, /approve always, /deny."
        )
        buttons = [
            Button(label, f"apr:{request['id']}:{choice}") for label, choice in APPROVAL_BUTTONS
        ]
        await self._show(str(request["id"]), text, buttons)

    async def _ask_question(self, request: dict[str, Any]) -> None:
        choices = [str(c) for c in request.get("choices") or []]
        lines = [f"❓ {request.get('question', '')}"]
        lines += [f"{i}. {c}" for i, c in enumerate(choices, 1)]
        lines.append("Reply with a number or your own answer." if choices else "Reply to answer.")
        buttons = [Button(c[:60], f"clq:{request['id']}:{i}") for i, c in enumerate(choices, 1)]
        await self._show(str(request["id"]), "\n".join(lines), buttons)

    async def _show(self, question_id: str, text: str, buttons: list[Button]) -> None:
        adapter, chat = self.adapter, self.source.chat_id
        if adapter.supports_buttons and buttons:
            sent = await adapter.send_buttons(chat, text, buttons, metadata=self.metadata)
        else:
            sent = await adapter.send(chat, text, metadata=self.metadata)
        if sent.success and sent.message_id:
            self.shown[question_id] = sent.message_id

    async def _closed(self, resolved: dict[str, Any]) -> None:
        message_id = self.shown.pop(str(resolved.get("id")), None)
        if message_id is None:
            return
        outcome = resolved.get("choice") or resolved.get("how") or "decided"
        who = resolved.get("by_uid")
        text = f"Decided elsewhere: {outcome}" + (f" (uid {who})" if who is not None else "")
        await self.adapter.edit_message(self.source.chat_id, message_id, text)

    def open_question(self) -> str | None:
        """The id of the oldest clarify question shown here and not answered yet."""
        return next((q for q in self.shown if q.startswith("clq_")), None)

    async def answered(self, question_id: str, text: str) -> None:
        """A question shown here was answered from this chat: say so on its message."""
        message_id = self.shown.pop(question_id, None)
        if message_id is not None:
            await self.adapter.edit_message(self.source.chat_id, message_id, text)
