"""`Caller`: who is asking, as a value built once at the RPC edge (a leaf every layer may use).

A connection is admitted (``rpc.server``) and classified: the daemon's owner, a member of
``socket.group``, or a tool's process (``rpc.peer_trust``). That verdict, with the peer's uid,
pid and client name, is frozen into a `Caller` that every handler receives in its `Call` and
hands to the domain code it calls. Domain code never reads the connection itself.

A turn outlives the request that started it and reaches the approval broker and tools through
the agent loop and the tool registry; there the caller travels in ``current_caller`` (a value,
set by the connection beside the request's context, like ``runtime.session.current_session``).
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass

OWNER = "owner"
MEMBER = "member"
TOOL = "tool"

NO_ONE = -1  # `Caller.scope_uid` of a tool's process: it must not pass for anyone's sessions


@dataclass(frozen=True, slots=True)
class Caller:
    """The peer behind a request: uid, pid, trust (owner | member | tool), client name."""

    uid: int
    pid: int
    trust: str
    client: str = ""
    connection_id: int = 0
    tool_origin: str | None = None  # why the peer is a tool's process

    @property
    def is_owner(self) -> bool:
        """The daemon's owner (or root), not from a tool's process."""
        return self.trust == OWNER

    @property
    def is_tool(self) -> bool:
        """A process a tool started (directly or not): never the owner, never a person."""
        return self.trust == TOOL

    @property
    def scope_uid(self) -> int | None:
        """Whose sessions and approvals this caller may see: None (all) for the owner, the
        caller's own uid for a member, ``NO_ONE`` for a tool's process."""
        if self.is_owner:
            return None
        if self.is_tool:
            return NO_ONE
        return self.uid

    @property
    def session_uid(self) -> int:
        """The uid a session this caller creates belongs to."""
        scope = self.scope_uid
        return self.uid if scope is None else scope

    def describe(self) -> str:
        """A short phrase for logs: ``uid 1001 (member, pid 42)``."""
        return f"uid {self.uid} ({self.trust}, pid {self.pid})"


#: The caller of the request a task serves; a turn started by ``session.send`` and a tool call
#: from ``tools.call`` inherit it. None: no client asked (the scheduler, a plugin's thread).
current_caller: contextvars.ContextVar[Caller | None] = contextvars.ContextVar(
    "hermesd_current_caller", default=None
)
