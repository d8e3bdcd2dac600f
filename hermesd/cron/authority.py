"""Whose authority a job has, and what that lets it choose: its directory and its sessions.

A job made through ``cron.*`` (the owner's ``hermesctl``, ``/cron``, a plugin) has the daemon
owner's authority: any directory, any session. A job the model makes with the ``cronjob`` tool
has the authority of the session it was made in and no more: its ``workdir`` must lie inside
that session's workspace (the run's tools may write there and nowhere else), and the sessions
it runs in or delivers to must be ones that session's owner may use (a member of
``socket.group`` only their own). The run's session belongs to the same uid. The rules are
checked when the job is made or changed, and again when a run delivers.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class AuthorityError(ValueError):
    """A job field its maker has no authority for; the message says which and why."""


def is_owner_uid(uid: int | None) -> bool:
    """None (made by the daemon's owner or the daemon), the daemon's own uid, or root."""
    return uid is None or uid in (os.geteuid(), 0)


@dataclass(frozen=True)
class Authority:
    """``uid``: whose sessions the job may use (None: the owner's, all of them);
    ``workspace``: the folder its ``workdir`` must lie in (None: anywhere)."""

    uid: int | None = None
    workspace: Path | None = None

    @property
    def is_owner(self) -> bool:
        return is_owner_uid(self.uid)

    def may_use(self, session_owner: int | None) -> bool:
        """Whether a session owned by ``session_owner`` is this authority's to use."""
        return self.is_owner or session_owner == self.uid

    def workdir(self, value: Any) -> Any:
        """``value`` checked against the workspace; the workspace itself when not given."""
        if self.workspace is None:
            return value  # jobs.create checks it is an absolute directory
        if value is None or value == "":
            return str(self.workspace)
        if not isinstance(value, str) or not os.path.isabs(value):
            raise AuthorityError("workdir must be an absolute path")
        real = Path(os.path.realpath(value))
        if real != self.workspace and self.workspace not in real.parents:
            raise AuthorityError(
                f"workdir {value} is outside this session's workspace {self.workspace}: a job "
                "made here may only work inside it (the owner can widen it with "
                "hermesctl cron update)"
            )
        return str(real)


def job_authority(job: dict[str, Any]) -> Authority:
    """The authority a stored job acts with (its ``owner_uid``)."""
    uid = job.get("owner_uid")
    return Authority(uid if isinstance(uid, int) else None)


def session_targets(job: dict[str, Any]) -> list[str]:
    """Every session the job names: the one it runs in and those it delivers to."""
    out = [str(job["session"])] if job.get("session") else []
    for target in str(job.get("deliver") or "").split(","):
        target = target.strip()
        if target.startswith("session:"):
            out.append(target.split(":", 1)[1])
        elif target == "origin":
            origin = job.get("origin")
            if isinstance(origin, dict) and origin.get("session_id"):
                out.append(str(origin["session_id"]))
    return out
