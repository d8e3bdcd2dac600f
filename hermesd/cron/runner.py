"""One run of a job: the session it works in, the turn, and what happens to the answer.

A run is a turn of the agent on platform ``cron``: in a new session
``cron_<job>_<YYYYmmdd_HHMMSS>``, or, when the job names one, in that existing session, where
every attached client sees it live like any turn. Toolsets ``cronjob``, ``clarify`` and
``messaging`` are always off, plus ``cron.disabled_toolsets``. A tool call needing approval
waits as a pending approval any approver can answer (``cron.approval_timeout``, then denied),
or is denied at once with ``approvals.cron_mode: deny``. A ``[SILENT]`` answer (or ``SILENT``,
``NO_REPLY``) is kept but not delivered. A run has its job's authority
(`hermesd.cron.authority`): a member's job runs in a session of that member and delivers only
into that member's sessions. Scheduling is `hermesd.cron.scheduler`'s business.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from hermesd.agent.loop import Toolsets
from hermesd.approvals.broker import RunPolicy
from hermesd.cron.authority import job_authority
from hermesd.store.dbfile import SessionNotFound

if TYPE_CHECKING:
    from hermesd.agent.session_service import SessionService
    from hermesd.approvals.broker import ApprovalBroker
    from hermesd.tools.skill_catalog import SkillCatalog

log = logging.getLogger(__name__)

#: ``(target, text)`` -> a problem, or None when delivered (the gateway's `deliver`)
PlatformSender = Callable[[str, str], Awaitable["str | None"]]

PLATFORM = "cron"
ALWAYS_OFF = frozenset({"cronjob", "clarify", "messaging"})
SILENT_TOKENS = frozenset({"[SILENT]", "SILENT", "NO_REPLY", "NO REPLY"})
RUN_NOTE = (
    "[This is a scheduled run of the cron job '{name}' (id {id}); nobody is watching it as it "
    "happens and nobody can answer questions. Do the task and give the result as your answer. "
    "If there is nothing worth reporting, answer exactly [SILENT] and nothing else.]"
)


def is_silent(text: str | None) -> bool:
    """Whether an answer asks not to be delivered: a silence token as the whole answer, its
    first or last line, or ``[SILENT]`` at its start. A token inside a sentence is content."""
    stripped = (text or "").strip()
    if not stripped:
        return False

    def token(line: str) -> bool:
        return " ".join(line.strip().upper().split()) in SILENT_TOKENS

    lines = [line for line in stripped.splitlines() if line.strip()]
    return (
        token(stripped)
        or token(lines[0])
        or token(lines[-1])
        or (stripped.upper().startswith("[SILENT]"))
    )


def session_id_for(job_id: str, when: datetime) -> str:
    """``cron_<job>_<YYYYmmdd_HHMMSS>``, the reference's name for a run's session (an
    imported job's id is cut to the characters and length a session id may have)."""
    safe = re.sub(r"[^A-Za-z0-9_-]", "_", job_id)[:32]
    return f"cron_{safe}_{when.strftime('%Y%m%d_%H%M%S')}"


@dataclass
class RunOutcome:
    """How a run ended, for the job record and the run log."""

    status: str  # ok | error | delivery_failed | blocked_config
    session_id: str | None = None
    output: str | None = None
    error: str | None = None
    silent: bool = False


@dataclass
class RunSettings:
    """``cron.disabled_toolsets``, ``cron.approval_timeout``, ``approvals.cron_mode``."""

    disabled_toolsets: frozenset[str] = frozenset()
    approval_timeout: float = 300.0
    deny_approvals: bool = False

    @classmethod
    def from_config(cls, cfg: Any) -> RunSettings:
        return cls(
            frozenset(str(t) for t in cfg.get("cron.disabled_toolsets") or []),
            float(cfg.get("cron.approval_timeout")),
            cfg.get("approvals.cron_mode") == "deny",
        )


class JobRunner:
    """Runs jobs as turns of the session service."""

    def __init__(
        self,
        sessions: SessionService,
        broker: ApprovalBroker,
        skills: SkillCatalog | None,
        settings: RunSettings,
        send_to: PlatformSender | None = None,
    ) -> None:
        """``send_to(target, text)`` delivers to a chat platform (the gateway's `deliver`):
        a problem, or None."""
        self.sessions = sessions
        self.broker = broker
        self.skills = skills
        self.settings = settings
        self.send_to = send_to

    def message(self, job: dict[str, Any]) -> str:
        """What the run sends: the note, each skill in order, then the prompt."""
        parts = [RUN_NOTE.format(name=job["name"], id=job["id"])]
        for name in job.get("skills") or []:
            found = self.skills.view_result(name) if self.skills is not None else {}
            if found.get("success"):
                parts.append(f'[The skill "{name}" is loaded for this run:]\n\n{found["content"]}')
            else:
                parts.append(f'[The skill "{name}" could not be loaded; it is not installed.]')
        if job.get("prompt"):
            parts.append(job["prompt"])
        return "\n\n".join(parts)

    def toolsets(self, job: dict[str, Any]) -> Toolsets:
        return Toolsets(
            enabled=job.get("enabled_toolsets") or None,
            disabled=ALWAYS_OFF | self.settings.disabled_toolsets,
        )

    async def session_for(self, job: dict[str, Any], when: datetime) -> str:
        """The session the run works in (made now unless the job names one)."""
        named = job.get("session")
        authority = job_authority(job)
        if named:
            session = await self.sessions.store.run(self.sessions.store.sessions.get, named)
            if not authority.may_use(session.get("owner_uid")):
                raise PermissionError(f"the job may not run in session {named} (another user's)")
            return str(named)
        base = session_id_for(job["id"], when)
        for attempt in range(100):
            sid = base if attempt == 0 else f"{base}_{attempt}"
            try:
                await self.sessions.create_session(
                    session_id=sid,
                    title=f"cron: {job['name']}"[:60],
                    model=job.get("model"),
                    platform=PLATFORM,
                    cwd=job.get("workdir"),
                    owner_uid=None if authority.is_owner else authority.uid,
                )
                return sid
            except ValueError:
                continue
        raise RuntimeError(f"no free session id for {base}")

    async def run(self, job: dict[str, Any], sid: str) -> RunOutcome:
        """Run the job's turn in ``sid`` and deliver its answer."""
        policy = RunPolicy(self.settings.deny_approvals, self.settings.approval_timeout)
        self.broker.run_policies[sid] = policy
        try:
            result = await self.sessions.run_unsent_turn(
                sid,
                self.message(job),
                platform=PLATFORM,
                sender_id=f"cron:{job['id']}",
                toolsets=self.toolsets(job),
            )
        finally:
            if self.broker.run_policies.get(sid) is policy:
                del self.broker.run_policies[sid]
        if result.status != "completed":
            return RunOutcome(
                "error", sid, result.final_text, result.error or f"the turn {result.status}"
            )
        text = result.final_text or ""
        if is_silent(text):
            return RunOutcome("ok", sid, text, None, silent=True)
        problem = await self.deliver(job, sid, text)
        if problem:
            return RunOutcome("delivery_failed", sid, text, problem)
        return RunOutcome("ok", sid, text)

    async def deliver(self, job: dict[str, Any], run_sid: str, text: str) -> str | None:
        """Send the answer where ``deliver`` says; the problems, or None."""
        problems = []
        for target in [t.strip() for t in str(job.get("deliver") or "local").split(",")]:
            if target in ("", "local"):
                continue
            if target == "origin":
                origin = job.get("origin") or {}
                target_sid = origin.get("session_id") if isinstance(origin, dict) else None
                if not target_sid:
                    continue  # made outside a session: nowhere to go back to
            elif target.startswith("session:"):
                target_sid = target.split(":", 1)[1]
            else:
                problem = await self._to_platform(job, target, text)
                if problem:
                    problems.append(problem)
                continue
            if target_sid == run_sid:
                continue  # the run's own turn is already there
            problem = await self._into_session(job, str(target_sid), text)
            if problem:
                problems.append(problem)
        return "; ".join(problems) or None

    async def _to_platform(self, job: dict[str, Any], target: str, text: str) -> str | None:
        """Deliver to a chat (``telegram:CHAT_ID``): the owner's jobs only, since a chat
        reaches people the job's author may not speak to."""
        platform = target.split(":", 1)[0]
        if self.send_to is None:
            return f"hermesd has no messaging platform '{platform}' to deliver to"
        if not job_authority(job).is_owner:
            return f"only the owner's jobs may deliver to {platform}"
        return await self.send_to(target, f"[cron job '{job['name']}']\n\n{text}")

    async def _into_session(self, job: dict[str, Any], sid: str, text: str) -> str | None:
        store = self.sessions.store
        content = f"[cron job '{job['name']}' ({job['id']})]\n\n{text}"
        try:  # checked again here: the job may predate the check, or been edited in the store
            owner = (await store.run(store.sessions.get, sid)).get("owner_uid")
        except SessionNotFound:
            return f"could not deliver to session {sid}: it no longer exists"
        if not job_authority(job).may_use(owner):
            log.warning("cron job %s may not deliver into session %s: refused", job["id"], sid)
            return f"could not deliver to session {sid}: it belongs to another user"
        try:
            record = await store.run(store.messages.append, sid, "assistant", content)
        except Exception as exc:
            return f"could not deliver to session {sid}: {exc}"
        self.sessions.emit(
            {
                "type": "message",
                "session_id": sid,
                "turn_id": None,
                "role": "assistant",
                "content": content,
                "message_id": record["id"],
                "cron_job_id": job["id"],
            }
        )
        return None
