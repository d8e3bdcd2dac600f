"""The everyday chat commands: ``/retry``, ``/undo``, ``/history``, ``/resume``, ``/usage``,
``/version``, ``/config`` and ``/compress``.

Each handler gets the calling command's outcome (its session, its connection, and where the
result's ``action``/``session`` go) and the text after the name, and returns what the person
reads. ``/undo`` and ``/retry`` use ``session.undo`` (the record keeps an undone turn; the
model no longer sees it); ``/retry`` then starts the turn again on the caller's connection and
answers ``action: "turn"`` with the ``turn_id`` to follow; ``/resume`` attaches the caller to
another session and answers ``action: "session"`` as ``/new`` does. Registered as built-ins by
``hermesd.commands.service``.
"""

from __future__ import annotations

import json
import platform
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from hermesd import __version__
from hermesd.agent.session_service import SessionService
from hermesd.commands.registry import CommandFailed
from hermesd.rpc.humanize import usage_report
from hermesd.rpc.protocol import PROTOCOL_VERSION

HISTORY_DEFAULT = 20
PREVIEW = 300  # characters of a message shown by /history


class Outcome(Protocol):
    """What a command handler may read and set (``hermesd.commands.service._Outcome``)."""

    call: Any
    session_id: str
    action: str | None
    session: dict[str, Any] | None
    extra: dict[str, Any]


Handler = Callable[[Outcome, str], Awaitable[str]]


class SessionCommands:
    """Handlers of the chat commands that act on the caller's session."""

    def __init__(
        self,
        sessions: SessionService,
        status: Callable[[], dict[str, Any]],
        config_view: Callable[[], dict[str, Any]] | None = None,
        usage_report: Callable[[Any, dict[str, Any]], Awaitable[dict[str, Any]]] | None = None,
    ) -> None:
        self.sessions = sessions
        self.status = status
        self.config_view = config_view
        self.usage_report = usage_report  # usage.get (hermesd.agent.usage_service)

    def handlers(self) -> dict[str, Handler]:
        """Command name → handler."""
        return {
            "retry": self.retry,
            "undo": self.undo,
            "history": self.history,
            "resume": self.resume,
            "usage": self.usage,
            "version": self.version,
            "config": self.config,
            "compress": self.compress,
        }

    @staticmethod
    def _session(outcome: Outcome, what: str) -> str:
        if not outcome.session_id:
            raise CommandFailed(
                f"/{what} needs a session: use it inside hermesctl chat, or pass session_id "
                "(hermesctl cmd --session ID)."
            )
        return outcome.session_id

    async def undo(self, outcome: Outcome, raw_args: str) -> str:
        sid = self._session(outcome, "undo")
        result = await self.sessions.rpc_undo(outcome.call, {"session_id": sid})
        if not result["undone"]:
            raise CommandFailed("Nothing to undo: no turn is left in this conversation.")
        outcome.extra["undone"] = result["undone"]
        count = len(result["undone"])
        return (
            f"Undone: {_one_line(result['user_message'] or '', 60)!r} and its answer "
            f"({count} message{'s' if count != 1 else ''} kept in the record, no longer sent "
            "to the model)."
        )

    async def retry(self, outcome: Outcome, raw_args: str) -> str:
        sid = self._session(outcome, "retry")
        refused = await self.sessions.agent.meter.refusal(sid)  # before undoing anything
        if refused is not None:
            raise CommandFailed(str(refused))
        result = await self.sessions.rpc_undo(outcome.call, {"session_id": sid})
        message = result["user_message"]
        if not message:
            raise CommandFailed("Nothing to retry: no message is left in this conversation.")
        started = await self.sessions.rpc_send(  # with the images it had, if any
            outcome.call, {"session_id": sid, "message": message, "images": result["user_images"]}
        )
        outcome.action = "turn"
        outcome.extra.update(turn_id=started["turn_id"], message=message)
        return f"Retrying: {_one_line(message, 60)}"

    async def history(self, outcome: Outcome, raw_args: str) -> str:
        sid = self._session(outcome, "history")
        try:
            limit = int(raw_args) if raw_args else HISTORY_DEFAULT
        except ValueError:
            raise CommandFailed("usage: /history [N] (the newest N messages)") from None
        page = await self.sessions.rpc_history(
            outcome.call, {"session_id": sid, "limit": max(1, limit)}
        )
        messages = page["messages"]
        if not messages:
            return "No messages yet."
        return "\n".join(_history_line(m) for m in messages)

    async def resume(self, outcome: Outcome, raw_args: str) -> str:
        target = raw_args.strip()
        caller = outcome.call.caller
        if not target:
            target = await self._latest_other(outcome.session_id, caller.scope_uid)
        wanted = {"session_id": target}
        # command.run checked the session it runs in; the one named here is checked now
        await self.sessions.guard(caller, wanted, "session_id")
        session = await self.sessions.rpc_attach(outcome.call, wanted)
        if outcome.session_id and outcome.session_id != session["id"]:
            await self.sessions.rpc_detach(outcome.call, {"session_id": outcome.session_id})
            self.sessions.switched(outcome.session_id, session["id"], "resume")
        outcome.action, outcome.session = "session", session
        title = f" “{session['title']}”" if session.get("title") else ""
        return f"Resumed session {session['id']}{title} ({session['message_count']} messages)."

    async def _latest_other(self, current: str, scope: int | None) -> str:
        store = self.sessions.store
        page = await store.run(store.sessions.page, 50, owner_uid=scope)
        for s in page["sessions"]:
            if s["id"] != current and s["message_count"]:
                return str(s["id"])
        raise CommandFailed("No other session with messages to resume.")

    async def usage(self, outcome: Outcome, raw_args: str) -> str:
        if self.usage_report is None:
            raise CommandFailed("This daemon keeps no usage records.")
        sid = self._session(outcome, "usage")
        report = await self.usage_report(outcome.call, {"session_id": sid})
        outcome.extra["usage"] = report
        s = report["session"]
        model = s["model"] or self.sessions.agent.client.settings.model or "?"
        text = usage_report(report, f"Session {sid} (model {model})")
        older = s["total_tokens"] - report["totals"]["total_tokens"]
        if older > 0:  # a session older than the usage table has counters but no rows
            text += f"\n(and {older:,} tokens counted before per-request records were kept)"
        return text

    async def version(self, outcome: Outcome, raw_args: str) -> str:
        return (
            f"hermesd {__version__} (protocol {PROTOCOL_VERSION}, Python "
            f"{platform.python_version()})"
        )

    async def config(self, outcome: Outcome, raw_args: str) -> str:
        if self.config_view is None:
            raise CommandFailed("This daemon cannot show its configuration.")
        settings = self.config_view()
        key = raw_args.strip()
        if key:
            chosen = {k: v for k, v in settings.items() if k == key or k.startswith(key + ".")}
            if not chosen:
                raise CommandFailed(f"No setting '{key}'. /config lists them all.")
            settings = chosen
        width = max(len(k) for k in settings)
        lines = [f"{k:<{width}}  {json.dumps(v, ensure_ascii=False)}" for k, v in settings.items()]
        return "\n".join(lines) + "\n(read-only; edit config.yaml and reload to change)"

    async def compress(self, outcome: Outcome, raw_args: str) -> str:
        sid = self._session(outcome, "compress")
        focus = raw_args.strip() or None
        result = await self.sessions.rpc_compress(outcome.call, {"session_id": sid, "focus": focus})
        outcome.extra["compaction"] = result
        if not result["compacted"]:
            return f"Nothing compacted: {result.get('why_not') or 'no change'}."
        note = (
            " (mechanical summary: the summary model failed)"
            if result.get("summary_fallback")
            else ""
        )
        return (
            f"Compacted with {result['engine']}: {result['replaced']} messages summarised"
            f"{note}; the model now gets {result['messages_after']} messages instead of "
            f"{result['messages_before']}. Every message stays in the record."
        )


def _one_line(text: str, limit: int) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _history_line(m: dict[str, Any]) -> str:
    mark = " (undone)" if m.get("undone") else ""
    role = m["role"]
    if role == "tool":
        body = f"[tool {m.get('tool_name') or ''}] {_one_line(m.get('content') or '', PREVIEW)}"
    else:
        calls = [str((c.get("function") or {}).get("name")) for c in (m.get("tool_calls") or [])]
        body = f"[{role}] {_one_line(m.get('content') or '', PREVIEW)}"
        if calls:
            body += f" ⚙ {', '.join(calls)}"
    return f"#{m['id']}{mark} {body}"
