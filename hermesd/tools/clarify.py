"""The ``clarify`` tool (toolset ``clarify``): the model asks the person a question.

A call carries a question and at most `MAX_CHOICES` choices (the reference's schema; choices the
model sends as objects are unwrapped to their label). The question is pending state, like an
approval: `ClarifyBroker` sends it as a server→client ``clarify.request`` to every connection
attached to the session (never to a tool's process), and to a connection that attaches later.
The first answer wins, from an asked client's reply or ``clarify.respond`` (any client that may
use the session); the other asked clients get ``clarify.resolved``. The tool answers in the
reference's shape ``{question, choices_offered, user_response}``.

Nobody to ask is the unattended case: when no connection that can answer is attached for
``clarify.unattended_after`` seconds, or the only clients asked said they have no one to ask
(a one-shot ``hermesctl chat`` without a terminal), the model gets the fallback answer telling
it to decide for itself; so it does after ``clarify.timeout``, and when the daemon stops.
Scheduled runs never get the tool (``hermesd.cron.runner`` turns the toolset off). The RPC edge
is ``hermesd.tools.clarify_service``. Plugins see each question through the human-input hooks
(kind ``clarify``, `hermesd.runtime.human_input`), never the answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hermesd import redact
from hermesd.runtime import human_input
from hermesd.runtime.hooks import HookBus
from hermesd.tools.registry import BUILTIN

if TYPE_CHECKING:
    from hermesd.rpc.connection import Connection
    from hermesd.tools.registry import ToolRegistry

log = logging.getLogger(__name__)

TOOLSET = "clarify"
REQUEST = "clarify.request"
RESOLVED = "clarify.resolved"
MAX_CHOICES = 4
MAX_QUESTION = 4000  # characters
MAX_CHOICE = 500
MAX_ANSWER = 8000
TICK = 0.5  # seconds between checks of who could answer
# the registry's own bound must not cut a question short: the broker keeps clarify.timeout
TOOL_TIMEOUT = 7 * 24 * 3600.0

FALLBACKS = {
    "unattended": "No one could be asked: no person is connected to this conversation.",
    "timeout": "The user did not answer in time.",
    "stopped": "hermesd stopped before the user answered.",
}
#: how a question ended (``how``) -> the human-input hooks' ``outcome``
OUTCOMES = {
    "answered": "submitted",
    "timeout": "timed_out",
    "unattended": "unattended",
    "stopped": "cancelled",
    "cancelled": "cancelled",
}
DECIDE = " Decide for yourself: make the most reasonable choice and carry on."

SCHEMA: dict[str, Any] = {
    "name": "clarify",
    "description": (
        "Ask the user a question when you need a decision, a clarification or feedback "
        "before going on. Two forms:\n\n"
        "1. Multiple choice: give up to 4 choices; the user picks one or types an answer of "
        "their own.\n"
        "2. Open question: leave choices out; the user types the answer.\n\n"
        "Put each option in `choices`, never listed inside the question text.\n\n"
        "Use it when the task is ambiguous, when a choice has trade-offs the user should "
        "weigh, or to ask for feedback. Do not use it to confirm dangerous commands (the "
        "terminal asks for those itself), and prefer a sensible default of your own when "
        "little is at stake."
    ),
    "parameters": {
        "type": "object",
        "properties": {
            "question": {
                "type": "string",
                "description": "The question alone, without the options.",
            },
            "choices": {
                "type": "array",
                "items": {"type": "string"},
                "maxItems": MAX_CHOICES,
                "description": (
                    "Each option as its own element (at most 4); the user may also type an "
                    "answer of their own. Leave out for an open question."
                ),
            },
        },
        "required": ["question"],
    },
}


class ClarifyError(ValueError):
    """A call the tool refuses; its text is what the model reads."""


def flatten_choice(value: Any) -> str:
    """One choice as the text a person sees: a string stripped, an object's label (``label``,
    ``description``, ``text`` or ``title``), a list joined; "" when there is none."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, dict):
        for key in ("label", "description", "text", "title"):
            text = value.get(key)
            if isinstance(text, str) and text.strip():
                return text.strip()
        return ""
    if isinstance(value, (list, tuple)):
        return " ".join(flatten_choice(v) for v in value).strip()
    return str(value).strip()


def read_call(args: dict[str, Any]) -> tuple[str, list[str] | None]:
    """The question and choices of a call, checked; raises `ClarifyError`."""
    question = args.get("question")
    if not isinstance(question, str) or not question.strip():
        raise ClarifyError("Question text is required (a non-empty string).")
    question = question.strip()
    if len(question) > MAX_QUESTION:
        raise ClarifyError(
            f"the question is {len(question)} characters; the limit is {MAX_QUESTION}"
        )
    raw = args.get("choices")
    if raw is None:
        return question, None
    if not isinstance(raw, list):
        raise ClarifyError(f"choices must be a list of strings, not {type(raw).__name__}")
    choices = [c for c in (flatten_choice(v) for v in raw) if c][:MAX_CHOICES]
    for n, choice in enumerate(choices):
        if len(choice) > MAX_CHOICE:
            raise ClarifyError(
                f"choices[{n}] is {len(choice)} characters; the limit is {MAX_CHOICE}"
            )
    return question, choices or None


def result(question: str, choices: list[str] | None, response: str) -> dict[str, Any]:
    """The tool's result in the reference's shape."""
    return {"question": question, "choices_offered": choices, "user_response": response.strip()}


def fallback_text(how: str) -> str:
    """What the model is told when no person answered (``how``: unattended, timeout, stopped)."""
    return FALLBACKS.get(how, FALLBACKS["unattended"]) + DECIDE


@dataclass(eq=False)
class Question:
    """One question waiting for an answer."""

    id: str
    session_id: str
    question: str
    choices: list[str] | None
    deadline: float  # Unix time
    future: asyncio.Future[tuple[str, str, int | None]]  # (response, how, uid)
    asked: dict[Connection, asyncio.Task[None]] = field(default_factory=dict)
    winner: Connection | None = None
    unattended_reply: bool = False  # a client said it has no one to ask

    def public(self) -> dict[str, Any]:
        """The ``clarify.request`` params / ``clarify.pending`` entry (known secret values the
        model put in the question are hidden, as in every event)."""
        return {
            "id": self.id,
            "session_id": self.session_id,
            "question": redact.redact(self.question),
            "choices": [redact.redact(c) for c in self.choices or []],
            "deadline": self.deadline,
        }

    def answer_of(self, response: Any = None, choice: Any = None) -> str:
        """The answer a client gave: ``choice`` (1-based) picks an offered choice, else the
        ``response`` text; raises ValueError for neither or a choice out of range."""
        if choice is not None and not isinstance(choice, bool) and isinstance(choice, int):
            if not self.choices or not 1 <= choice <= len(self.choices):
                offered = len(self.choices or [])
                raise ValueError(f"choice {choice} is not one of the {offered} offered")
            return self.choices[choice - 1]
        if isinstance(response, str) and response.strip():
            return response.strip()[:MAX_ANSWER]
        raise ValueError("give a response (text) or a choice (its number)")


class ClarifyBroker:
    """Pending questions of one daemon and who is asked them."""

    def __init__(
        self,
        attached: Callable[[str], Iterable[Connection]],
        config: Any,
        hooks: HookBus | None = None,
    ) -> None:
        self.attached = attached
        self.hooks = hooks
        self.pending: dict[str, Question] = {}
        self.closed = False
        self.reload(config)

    def reload(self, config: Any) -> None:
        """``clarify.timeout`` and ``clarify.unattended_after``."""
        self.timeout = float(config.get("clarify.timeout"))
        self.unattended_after = float(config.get("clarify.unattended_after"))

    async def call(self, args: Any, session_id: str) -> dict[str, Any]:
        """One ``clarify`` call: the reference's result, or ``{"error": ...}``."""
        if not isinstance(args, dict):
            return {"error": "arguments must be an object with a question"}
        try:
            question, choices = read_call(args)
        except ClarifyError as exc:
            return {"error": str(exc)}
        if not session_id:
            return {"error": "Clarify tool is not available without a session to ask in."}
        if self.closed:
            return result(question, choices, fallback_text("stopped"))
        response, how, uid = await self.ask(session_id, question, choices)
        log.info("clarify in session %s answered (%s, uid %s)", session_id, how, uid)
        return result(question, choices, response if how == "answered" else fallback_text(how))

    async def ask(
        self, session_id: str, question: str, choices: list[str] | None
    ) -> tuple[str, str, int | None]:
        """Ask the session's people; ``(response, how, uid)`` with ``how`` one of answered,
        unattended, timeout, stopped."""
        loop = asyncio.get_running_loop()
        pending = Question(
            f"clq_{secrets.token_hex(6)}",
            session_id,
            question,
            choices,
            time.time() + self.timeout,
            loop.create_future(),
        )
        self.pending[pending.id] = pending
        outcome: tuple[str, str, int | None] = ("", "cancelled", None)
        human = human_input.human_request(
            "clarify", pending.id, session_id, "cli", pending.public()["question"]
        )
        try:
            if self.hooks is not None:
                await human_input.requested(self.hooks, human)
            for conn in list(self.attached(session_id)):
                self._send_request(pending, conn)
            outcome = await self._wait(pending)
            return outcome
        finally:
            self._finish(pending, outcome[1], outcome[2])
            if self.hooks is not None:
                await human_input.resolved(self.hooks, human, OUTCOMES[outcome[1]])

    async def _wait(self, pending: Question) -> tuple[str, str, int | None]:
        alone_since: float | None = None
        while True:
            now = time.monotonic()
            left = pending.deadline - time.time()
            if left <= 0:
                return "", "timeout", None
            if self._anyone_asked(pending):
                alone_since = None
            elif pending.unattended_reply:
                return "", "unattended", None
            elif alone_since is None:
                alone_since = now
            elif now - alone_since >= self.unattended_after:
                return "", "unattended", None
            with contextlib.suppress(TimeoutError):
                return await asyncio.wait_for(asyncio.shield(pending.future), min(left, TICK))

    @staticmethod
    def _anyone_asked(pending: Question) -> bool:
        """Whether an asked client may still answer (its request open, its connection too)."""
        return any(conn.is_open and not task.done() for conn, task in pending.asked.items())

    def _send_request(self, pending: Question, conn: Connection) -> None:
        if conn in pending.asked or not conn.is_open or conn.caller.is_tool:
            return
        pending.asked[conn] = asyncio.get_running_loop().create_task(
            self._request_one(pending, conn)
        )

    async def _request_one(self, pending: Question, conn: Connection) -> None:
        try:
            answer = await conn.request(
                REQUEST, [pending.public()], timeout=max(0.1, pending.deadline - time.time())
            )
        except (ConnectionError, TimeoutError) as exc:
            log.debug("clarify %s: connection %d gave no answer (%s)", pending.id, conn.id, exc)
            return
        except Exception as exc:  # an error reply: this client cannot answer questions
            log.debug("clarify %s: connection %d answered an error: %s", pending.id, conn.id, exc)
            return
        if not isinstance(answer, dict):
            log.warning("clarify %s: connection %d sent %r", pending.id, conn.id, answer)
            return
        if answer.get("unattended") is True:
            pending.unattended_reply = True
            return
        if answer.get("resolved_elsewhere"):
            return
        try:
            text = pending.answer_of(answer.get("response"), answer.get("choice"))
        except ValueError as exc:
            log.warning("clarify %s: connection %d: %s", pending.id, conn.id, exc)
            return
        self._resolve(pending, text, conn.peer.uid, conn)

    def _resolve(
        self, pending: Question, text: str, uid: int | None, conn: Connection | None
    ) -> bool:
        if pending.future.done():
            return False
        pending.winner = conn
        pending.future.set_result((text, "answered", uid))
        return True

    def _finish(self, pending: Question, how: str, uid: int | None) -> None:
        self.pending.pop(pending.id, None)
        for conn, task in pending.asked.items():
            task.cancel()
            if conn is not pending.winner and conn.is_open:
                conn.notify(
                    RESOLVED,
                    [
                        {
                            "id": pending.id,
                            "session_id": pending.session_id,
                            "how": how,
                            "by_uid": uid,
                        }
                    ],
                )

    # --- entry points for the service ------------------------------------------------------

    def on_attach(self, session_id: str, conn: Connection) -> None:
        """A connection attached to ``session_id``: ask it that session's open questions."""
        for pending in list(self.pending.values()):
            if pending.session_id == session_id:
                self._send_request(pending, conn)

    def pending_for(self, session_id: str) -> list[dict[str, Any]]:
        """The session's open questions, oldest first."""
        return [p.public() for p in self.pending.values() if p.session_id == session_id]

    def respond(
        self, question_id: str, session_id: str, response: Any, choice: Any, uid: int
    ) -> dict[str, Any]:
        """Answer an open question of ``session_id`` as ``uid``; raises KeyError (no such
        question in that session) or ValueError (no usable answer)."""
        pending = self.pending.get(question_id)
        if pending is None or pending.session_id != session_id:
            raise KeyError(question_id)
        text = pending.answer_of(response, choice)
        if not self._resolve(pending, text, uid, None):
            raise KeyError(question_id)
        return {"id": question_id, "response": text}

    def close(self) -> None:
        """Daemon stopping: every open question gets the fallback answer."""
        self.closed = True
        for pending in list(self.pending.values()):
            if not pending.future.done():
                pending.future.set_result(("", "stopped", None))


def register_clarify(tools: ToolRegistry, broker: ClarifyBroker) -> None:
    """Register the ``clarify`` tool (toolset ``clarify``) over ``broker``."""

    async def handler(args: dict[str, Any], session_id: str = "", **_: Any) -> str:
        return json.dumps(await broker.call(args, session_id), ensure_ascii=False)

    tools.register(
        "clarify",
        TOOLSET,
        SCHEMA,
        handler,
        emoji="❓",
        owner=BUILTIN,
        check_arguments=False,
        timeout=TOOL_TIMEOUT,
    )
