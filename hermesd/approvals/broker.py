"""`ApprovalBroker`: whether a tool call may run, and asking people when it needs consent.

The decision for one call, in order: the hard floor (refused, always) → ``approvals.deny``
globs (refused) → "always" rules kept in state.db and ``command_allowlist`` → answers given
"for this session" → ``approvals.require`` tool names and ``pre_tool_call`` approve requests
(these always ask) → ``approvals.mode: off`` or a sessions own mode (`hermesd.approvals.modes`:
``off`` allows dangerous patterns, ``deny`` refuses instead of asking) → ask.

Asking: the pending approval is sent as a server→client ``approval.request`` to every
connection attached to the session that may answer (the owner, root, ``approvals.approvers``),
and to the connection whose ``tools.call`` triggered it; a connection attaching later is asked
then. The first valid answer (or ``approvals.respond``) wins; the other asked connections get
``approval.resolved``. A connection that disconnects answers nothing. With nobody answering
the call waits up to ``approvals.timeout`` and is then denied.

Every call has a requester: the uid of the client whose request led to it (``tools.call``,
``session.send``), the daemon's owner when there is none. A "session" answer is kept for
(session, requester), so another user passing the same ``session_id`` gets nothing from it;
a peer that may not answer sees only the pending approvals it requested. RPC translation lives in
``hermesd.approvals.service``; the pattern table in ``hermesd.approvals.patterns``.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import json
import logging
import os
import pwd
import secrets
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hermesd import redact
from hermesd.approvals import display, patterns, plugin_transport
from hermesd.approvals.modes import DENY_MODE_TEXT, SessionModes
from hermesd.caller import Caller, current_caller
from hermesd.rpc import wire
from hermesd.rpc.connection import Connection, connection_of
from hermesd.runtime import human_input
from hermesd.runtime.hooks import HookBus
from hermesd.store.dbfile import StoreError
from hermesd.store.facade import SessionStore

log = logging.getLogger(__name__)

CHOICES = ("once", "session", "always", "deny")
_SHORT = {"o": "once", "s": "session", "a": "always", "d": "deny"}
REQUEST = "approval.request"
INLINE_CHECK = 512  # characters; a longer terminal command is judged on a worker thread
RESOLVED = "approval.resolved"

_NOT_CONSENTED = " The user has NOT consented to this action."
_DO_NOT_RETRY = " Do not retry it or reach the same outcome another way; wait for the user."
TIMEOUT_TEXT = "BLOCKED: Command timed out without user response." + _NOT_CONSENTED
STOPPED_TEXT = (
    "BLOCKED: hermesd stopped before the user answered; the approval was "
    "recorded as denied." + _NOT_CONSENTED
)


def denied_text(reason: str | None = None) -> str:
    """The result the model gets when a person says no."""
    extra = f" Reason: {reason}." if reason else ""
    return "BLOCKED: Command denied by user." + extra + _NOT_CONSENTED + _DO_NOT_RETRY


def unattended_text(reason: str | None = None) -> str:
    """The result the model gets when the asked client could ask no one and denied for them."""
    why = f" ({reason})" if reason else ""
    return (
        f"BLOCKED: Command not run: no one could be asked for approval{why}, so it was "
        "denied automatically." + _NOT_CONSENTED + _DO_NOT_RETRY
    )


def parse_choice(value: Any) -> str | None:
    """``once|session|always|deny`` (or o/s/a/d); None for anything else."""
    if not isinstance(value, str):
        return None
    value = value.strip().lower()
    return _SHORT.get(value, value if value in CHOICES else None)


@dataclass
class Subject:
    """What a person is asked to approve."""

    tool: str
    command: str
    keys: list[str]
    descriptions: list[str]
    always_asks: bool  # approvals.require or a pre_tool_call approve: mode off does not skip

    @property
    def description(self) -> str:
        return "; ".join(self.descriptions)

    def shown(self) -> display.Shown:
        """The command as the approver sees it (``hermesd.approvals.display``)."""
        return display.show(self.command, redact.redact_values)

    def shown_description(self) -> str:
        return display.escape(redact.redact_values(self.description))[0]


@dataclass(eq=False)
class Pending:
    """One approval waiting for an answer."""

    id: str
    session_id: str
    subject: Subject
    deadline: float  # Unix time
    future: asyncio.Future[tuple[str, str | None, int | None]]
    requester: int  # the uid the call runs for (`ApprovalBroker.requester`)
    asked: dict[Connection, asyncio.Task[None]] = field(default_factory=dict)
    winner: Connection | None = None
    unattended: bool = False  # the winning "deny" came from a client with no one to ask
    transport_task: asyncio.Task[None] | None = None  # a plugin transport asked too

    @property
    def key(self) -> tuple[str, int]:
        """Where a "session" answer is kept: (session, requester)."""
        return (self.session_id, self.requester)

    def public(self) -> dict[str, Any]:
        """The ``approval.request`` params / ``approvals.pending`` entry."""
        shown = self.subject.shown()
        return {
            "id": self.id,
            "session_id": self.session_id,
            "requested_by_uid": self.requester,
            "tool": self.subject.tool,
            "command": shown.text,
            "command_length": shown.length,
            "notes": shown.notes,
            "secrets_hidden": shown.secrets_hidden,
            "warnings": shown.warnings,
            "pattern_key": self.subject.keys[0],
            "pattern_keys": list(self.subject.keys),
            "description": self.subject.shown_description(),
            "choices": list(CHOICES),
            "deadline": self.deadline,
        }


CRON_DENIED_TEXT = (
    "BLOCKED: {what} needs approval, and scheduled runs do not ask for it "
    "(approvals.cron_mode: deny)." + _NOT_CONSENTED
)


@dataclass(frozen=True)
class RunPolicy:
    """How a scheduled run's approvals go: denied at once, or asked with this timeout."""

    deny: bool
    timeout: float


class ApprovalBroker(SessionModes):
    """Approval decisions and pending approvals of one daemon."""

    def __init__(
        self,
        store: SessionStore,
        hooks: HookBus,
        config: Any,
        attached: Callable[[str], Iterable[Connection]],
        hermes_home: Path | None = None,
    ) -> None:
        self.store = store
        # the table needs it for hermes_state/hermes_plugins (the store lives in it)
        self.hermes_home = hermes_home or Path(store.path).parent
        self.hooks = hooks
        self.attached = attached
        self.owner_uid = os.geteuid()
        self.pending: dict[str, Pending] = {}
        self.rules: dict[str, dict[str, Any]] = {}
        self._session_keys: dict[tuple[str, int], set[str]] = {}  # (session, requester)
        self.session_modes: dict[str, str] = {}  # approvals.mode set for one session
        self._waiting = 0  # approve() calls not yet returned
        self._none_waiting: asyncio.Event | None = None  # set by close() for its wait
        self._loop: asyncio.AbstractEventLoop | None = None  # the daemon's, set by load()
        self.closed = False
        # sessions a scheduled run works in (hermesd.cron): refuse asking, or ask with their
        # own timeout
        self.run_policies: dict[str, RunPolicy] = {}
        self.reload(config)

    def reload(self, config: Any) -> None:
        """Take ``approvals.*`` and ``command_allowlist`` from the configuration."""
        self.mode = str(config.get("approvals.mode"))
        self.timeout = float(config.get("approvals.timeout"))
        self.deny_globs = [str(g) for g in config.get("approvals.deny") or []]
        self.require = {str(t) for t in config.get("approvals.require") or []}
        self.approvers = {str(a) for a in config.get("approvals.approvers") or []}
        self.allowlist = {str(k) for k in config.get("command_allowlist") or []}
        self.terminal_cwd = config.get("terminal.cwd")
        self.transport = str(config.get("security.approval.transport") or "builtin")

    async def load(self) -> None:
        """Read the "always" rules from state.db."""
        self._loop = asyncio.get_running_loop()
        rows = await self.store.run(self.store.approvals.all)
        self.rules = {r["pattern_key"]: r for r in rows}

    # --- who may answer --------------------------------------------------------------------

    def may_answer(self, caller: Caller | None) -> bool:
        """Whether ``caller`` may be asked and may answer: never a tool's own process."""
        if caller is None or caller.is_tool:
            return False
        return self.may_answer_uid(caller.uid)

    def may_answer_uid(self, uid: int | None) -> bool:
        """The daemon's owner, root, or a uid/user name listed in ``approvals.approvers``."""
        if uid is None or uid < 0:
            return False
        if uid in (self.owner_uid, 0) or str(uid) in self.approvers:
            return True
        return _user_name(uid) in self.approvers

    def requester(self) -> int:
        """The uid the current call runs for: the peer whose request led here (the owner and
        root count as the owner), or the owner when no client did."""
        caller = current_caller.get()
        scope = caller.scope_uid if caller is not None else None
        return self.owner_uid if scope is None else scope

    # --- the decision ----------------------------------------------------------------------

    def where(self, args: dict[str, Any]) -> patterns.Where:
        """What the table is told about a terminal call: homes, our pid, its directory.

        The directory is the terminal's own choice (its ``cwd`` argument, else its default,
        the workspace: ``terminal.cwd`` or ``$HERMES_HOME/workspace``, see
        `hermesd.tools.workspace`), so that ``rm -rf *`` is judged where it runs.
        """
        home = os.path.expanduser("~")
        workspace = str(self.hermes_home / "workspace")
        base = os.path.expanduser(str(self.terminal_cwd)) if self.terminal_cwd else workspace
        raw = args.get("cwd")
        cwd = os.path.join(base, os.path.expanduser(raw)) if isinstance(raw, str) and raw else base
        return patterns.Where(home, str(self.hermes_home), os.getpid(), os.path.abspath(cwd))

    def assess(self, tool: str, args: dict[str, Any]) -> patterns.Assessment | None:
        """The table's findings for a terminal call (None for other tools)."""
        if tool != "terminal":
            return None
        return patterns.assess(str(args.get("command") or ""), self.where(args))

    def subject(
        self,
        tool: str,
        args: dict[str, Any],
        asked: str | None = None,
        rule_key: str | None = None,
        assessment: patterns.Assessment | None = None,
    ) -> Subject | None:
        """What needs consent in this call, or None when nothing does."""
        command = (
            str(args.get("command") or "")
            if tool == "terminal"
            else f"{tool} {json.dumps(args, ensure_ascii=False, default=str)[:4000]}"
        )
        keys: list[str] = []
        descriptions: list[str] = []
        if tool == "terminal":
            found = assessment or self.assess(tool, args)
            for pattern in found.dangerous if found else []:
                keys.append(pattern.key)
                descriptions.append(pattern.description)
        always = False
        if tool in self.require:
            keys.append(f"tool:{tool}")
            descriptions.append(f"{tool} needs approval (approvals.require)")
            always = True
        if asked is not None:
            keys.append(rule_key or f"tool:{tool}")
            descriptions.append(asked)
            always = True
        if not keys:
            return None
        return Subject(tool, command, list(dict.fromkeys(keys)), descriptions, always)

    def verdict(
        self,
        tool: str,
        args: dict[str, Any],
        session_id: str,
        asked: str | None = None,
        rule_key: str | None = None,
    ) -> tuple[str, str | None, Subject | None]:
        """``("allow"|"block"|"ask", block message, subject)`` without asking anyone."""
        command = str(args.get("command") or "") if tool == "terminal" else ""
        assessment = self.assess(tool, args) if command else None
        if assessment is not None:
            hard = assessment.floor
            if hard is not None:
                return (
                    "block",
                    (
                        f"BLOCKED: {hard.description} is never allowed (hermesd's hard "
                        "floor: no approval or setting unlocks it)."
                    ),
                    None,
                )
        # a deny glob meets the whole command and each simple command in it, unquoted and
        # unwrapped, so `true⏎rm -rf x` or `"rm" -rf x` cannot slip past "rm -rf *"
        targets = [command, *assessment.texts] if assessment is not None else [tool]
        for glob in self.deny_globs:
            if any(fnmatch.fnmatchcase(target, glob) for target in targets):
                return (
                    "block",
                    (f"BLOCKED: denied by the approvals.deny rule '{glob}'." + _NOT_CONSENTED),
                    None,
                )
        subject = self.subject(tool, args, asked, rule_key, assessment)
        if subject is None:
            return "allow", None, None
        answered = self._session_keys.get((session_id, self.requester()), set())
        granted = set(self.rules) | self.allowlist | answered
        if all(key in granted for key in subject.keys):
            return "allow", None, subject
        if self.session_mode(session_id) == "off" and not subject.always_asks:
            return "allow", None, subject
        return "ask", None, subject

    async def approve(
        self,
        tool: str,
        args: dict[str, Any],
        session_id: str,
        asked: str | None = None,
        rule_key: str | None = None,
    ) -> str | None:
        """The registry's approver: None lets the call run, a str blocks it."""
        if tool == "terminal" and len(str(args.get("command") or "")) > INLINE_CHECK:
            # parsing a long command can take tens of milliseconds: not on the event loop
            decision, message, subject = await asyncio.to_thread(
                self.verdict, tool, args, session_id, asked, rule_key
            )
        else:
            decision, message, subject = self.verdict(tool, args, session_id, asked, rule_key)
        if decision != "ask":
            if decision == "block":
                log.info("tool %s for session %s refused: %s", tool, session_id or "-", message)
            return message
        assert subject is not None
        if self.closed:
            return STOPPED_TEXT
        policy = self.run_policies.get(session_id)
        if policy is not None and policy.deny:
            log.info(
                "tool %s in scheduled run %s denied (approvals.cron_mode: deny)", tool, session_id
            )
            return CRON_DENIED_TEXT.format(what=subject.description)
        if self.session_mode(session_id) == "deny":
            return DENY_MODE_TEXT.format(what=subject.description)
        if self._loop is not None and asyncio.get_running_loop() is not self._loop:
            # A plugin called dispatch_tool from the event loop thread, so this pipeline runs
            # on a private loop; connections belong to the daemon's loop: fail closed.
            return (
                f"BLOCKED: {subject.description} needs approval, which cannot be asked "
                "from a private event loop." + _NOT_CONSENTED
            )
        self._waiting += 1
        try:
            return await self._ask(subject, session_id)
        finally:
            self._waiting -= 1
            if not self._waiting and self._none_waiting is not None:
                self._none_waiting.set()

    # --- asking ----------------------------------------------------------------------------

    async def _ask(self, subject: Subject, session_id: str) -> str | None:
        loop = asyncio.get_running_loop()
        policy = self.run_policies.get(session_id)
        timeout = self.timeout if policy is None else policy.timeout
        pending = Pending(
            f"apr_{secrets.token_hex(6)}",
            session_id,
            subject,
            time.time() + timeout,
            loop.create_future(),
            self.requester(),
        )
        self.pending[pending.id] = pending
        shown = subject.shown()
        surface = "cron" if policy is not None else "cli"
        hook_kwargs = {
            "command": shown.text,
            "description": subject.shown_description(),
            "pattern_key": subject.keys[0],
            "pattern_keys": list(subject.keys),
            "session_key": session_id,
            "surface": surface,
        }
        choice, reason, uid = "timeout", None, None
        human = human_input.human_request("approval", pending.id, session_id, surface, shown.text)
        try:
            await self.hooks.invoke("pre_approval_request", **hook_kwargs)
            await human_input.requested(self.hooks, human)
            log.info(
                "approval %s: %s for session %s (uid %d) waits for an answer (%s): %d characters: "
                "%s%s",
                pending.id,
                subject.tool,
                session_id or "-",
                pending.requester,
                ", ".join(subject.keys),
                shown.length,
                shown.text,
                "".join(f" [{note}]" for note in shown.notes)
                + "".join(f" [warning: {w['message']}]" for w in shown.warnings),
                extra={redact.VALUES_ONLY: True},
            )
            # The client whose request led here (tools.call, a command, session.send) is asked
            # too, even when it is not attached: it is the one waiting.
            caller = connection_of(current_caller.get())
            asked = [*self.attached(session_id), *([caller] if caller else [])]
            for conn in dict.fromkeys(asked):
                self._send_request(pending, conn)
            pending.transport_task = plugin_transport.ask_too(self, pending, hook_kwargs)
            try:
                choice, reason, uid = await asyncio.wait_for(
                    asyncio.shield(pending.future), max(0.0, pending.deadline - time.time())
                )
            except TimeoutError:
                log.info("approval %s timed out after %gs", pending.id, timeout)
        except asyncio.CancelledError:
            choice = "cancelled"
            raise
        finally:
            self._finish(pending, choice, uid)
            if choice != "cancelled":
                await self.hooks.invoke(
                    "post_approval_response",
                    **hook_kwargs,
                    choice=choice,
                    decided_by="timeout" if choice == "timeout" else "user",
                )
            await human_input.resolved(self.hooks, human, choice)
        return await self._apply(pending, choice, reason, uid)

    def _send_request(self, pending: Pending, conn: Connection) -> None:
        if conn in pending.asked or not conn.is_open or not self.may_answer(conn.caller):
            return
        pending.asked[conn] = asyncio.get_running_loop().create_task(
            self._request_one(pending, conn)
        )

    async def _request_one(self, pending: Pending, conn: Connection) -> None:
        try:
            answer = await conn.request(
                REQUEST, [pending.public()], timeout=max(0.1, pending.deadline - time.time())
            )
        except (ConnectionError, TimeoutError) as exc:
            log.debug("approval %s: connection %d gave no answer (%s)", pending.id, conn.id, exc)
            return
        except Exception as exc:
            log.debug("approval %s: connection %d answered an error: %s", pending.id, conn.id, exc)
            return
        choice = parse_choice(answer.get("choice")) if isinstance(answer, dict) else None
        if choice is None:
            log.warning(
                "approval %s: connection %d sent an invalid answer %r", pending.id, conn.id, answer
            )
            return
        reason = answer.get("reason") if isinstance(answer.get("reason"), str) else None
        if choice == "deny" and answer.get("unattended") is True and not pending.future.done():
            pending.unattended = True
        self._resolve(pending, choice, reason, conn.peer.uid, conn)

    def _resolve(
        self,
        pending: Pending,
        choice: str,
        reason: str | None,
        uid: int | None,
        conn: Connection | None,
    ) -> bool:
        if pending.future.done():
            return False
        pending.winner = conn
        pending.future.set_result((choice, reason, uid))
        return True

    def _finish(self, pending: Pending, choice: str, uid: int | None) -> None:
        self.pending.pop(pending.id, None)
        if pending.transport_task is not None:
            pending.transport_task.cancel()
        data = wire.pack_notification(
            RESOLVED, [{"id": pending.id, "choice": choice, "by_uid": uid}]
        )
        for conn, task in pending.asked.items():
            task.cancel()
            if conn is not pending.winner:
                conn.send_packed(data)

    async def _apply(
        self, pending: Pending, choice: str, reason: str | None, uid: int | None
    ) -> str | None:
        keys = pending.subject.keys
        log.info("approval %s answered %s by uid %s", pending.id, choice, uid)
        if choice == "once":
            return None
        if choice == "session":
            if pending.session_id:  # with no session, "session" means just this once
                self._session_keys.setdefault(pending.key, set()).update(keys)
            return None
        if choice == "always":
            who = _user_name(uid) if uid is not None else "unknown"
            for key in keys:
                try:
                    self.rules[key] = await self.store.run(
                        self.store.approvals.add,
                        key,
                        f"{who} (uid {uid})",
                        pending.subject.description,
                    )
                except StoreError as exc:  # approved all the same; remembered for the session
                    log.error(
                        "could not remember 'always' for %s: %s; approved for this session only",
                        key,
                        exc,
                    )
                    if pending.session_id:
                        self._session_keys.setdefault(pending.key, set()).add(key)
            return None
        if choice == "stopped":
            return STOPPED_TEXT
        if choice == "timeout":
            return TIMEOUT_TEXT
        if pending.unattended:
            return unattended_text(reason)
        return denied_text(reason)

    # --- entry points for the service and for /approve, /deny -----------------------------

    def on_attach(self, session_id: str, conn: Connection) -> None:
        """A connection attached to ``session_id``: ask it about that session's approvals."""
        for pending in list(self.pending.values()):
            if pending.session_id == session_id:
                self._send_request(pending, conn)

    def pending_for(
        self, session_id: str | None = None, uid: int | None = None
    ) -> list[dict[str, Any]]:
        """Pending approvals (of one session, or all), oldest first; all of them for a uid
        that may answer, else only those ``uid`` requested (None: no filter)."""
        mine = uid is None or self.may_answer_uid(uid)
        return [
            p.public()
            for p in self.pending.values()
            if (session_id is None or p.session_id == session_id) and (mine or p.requester == uid)
        ]

    def respond(
        self, approval_id: str, choice: str, reason: str | None, uid: int
    ) -> dict[str, Any]:
        """Answer a pending approval as ``uid``.

        Raises KeyError (no such pending approval), ValueError (not a choice) or
        PermissionError (``uid`` may not answer approvals).
        """
        pending = self.pending.get(approval_id)
        if pending is None:
            raise KeyError(approval_id)
        parsed = parse_choice(choice)
        if parsed is None:
            raise ValueError(f"choice must be one of {', '.join(CHOICES)}, not {choice!r}")
        if not self.may_answer_uid(uid):
            raise PermissionError(uid)
        self._resolve(pending, parsed, reason, uid, None)
        return {"id": approval_id, "choice": parsed}

    async def revoke(self, pattern_key: str) -> bool:
        """Forget an "always" rule; False when there was none."""
        removed = await self.store.run(self.store.approvals.revoke, pattern_key)
        self.rules.pop(pattern_key, None)
        return bool(removed)

    async def close(self, timeout: float = 2.0) -> None:
        """Daemon stopping: every pending approval is answered "stopped" (a denial), and the
        waiting calls get up to ``timeout`` seconds to hand that result back."""
        self.closed = True
        for pending in list(self.pending.values()):
            log.warning(
                "approval %s (%s, session %s) still pending at shutdown: denied",
                pending.id,
                pending.subject.tool,
                pending.session_id or "-",
            )
            self._resolve(pending, "stopped", None, None, None)
        if self._waiting:
            self._none_waiting = asyncio.Event()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._none_waiting.wait(), timeout)


def _user_name(uid: int | None) -> str:
    try:
        return pwd.getpwuid(uid).pw_name if uid is not None else ""
    except KeyError:
        return str(uid)
