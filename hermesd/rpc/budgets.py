"""Memory budgets shared by every connection: per peer uid and for the whole daemon.

Three kinds of bytes a client can make the daemon hold: ``input`` (a message received in part,
waiting for the rest), ``inflight`` (the encoded size of requests whose handlers still run, a
measure of the parameters they keep alive) and ``output`` (bytes queued to a client that reads
slower than it is sent to). Each kind has a limit per uid and a limit for all peers together;
`Budgets.take` refuses bytes that would pass either. Connections report what they hold;
what a refusal means (a closed connection, an error reply) is ``rpc.Connection``'s business.
This module knows nothing of sockets or messages.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

KINDS = ("input", "inflight", "output")
UNLIMITED = 2**63  # a limit of 0 in the configuration


@dataclass(frozen=True, slots=True)
class BudgetLimits:
    """Bytes of each kind one uid, and all peers together, may make the daemon hold (0: no
    limit)."""

    input_per_uid: int = 64 * 1024 * 1024
    input_total: int = 256 * 1024 * 1024
    inflight_per_uid: int = 64 * 1024 * 1024
    inflight_total: int = 256 * 1024 * 1024
    output_per_uid: int = 64 * 1024 * 1024
    output_total: int = 256 * 1024 * 1024

    def per_uid(self, kind: str) -> int:
        limit: int = getattr(self, f"{kind}_per_uid")
        return limit

    def total(self, kind: str) -> int:
        limit: int = getattr(self, f"{kind}_total")
        return limit


class OverBudget(Exception):
    """Bytes refused: ``scope`` is ``uid`` or ``total``; the message is for the peer."""

    def __init__(self, kind: str, scope: str, limit: int) -> None:
        who = "this user's" if scope == "uid" else "all clients'"
        super().__init__(f"{who} {kind} budget of {limit} bytes is used up")
        self.kind, self.scope, self.limit = kind, scope, limit


class Budgets:
    """What every uid holds of each kind, against `BudgetLimits`. Event-loop only."""

    def __init__(self, limits: BudgetLimits | None = None) -> None:
        self.limits = limits = limits or BudgetLimits()
        self._per_uid = {kind: limits.per_uid(kind) or UNLIMITED for kind in KINDS}
        self._total = {kind: limits.total(kind) or UNLIMITED for kind in KINDS}
        self.totals = dict.fromkeys(KINDS, 0)
        self._by_uid: dict[str, defaultdict[int, int]] = {k: defaultdict(int) for k in KINDS}
        self.refused = dict.fromkeys(KINDS, 0)  # times a take was refused, for status

    def take(self, kind: str, uid: int, nbytes: int) -> None:
        """Hold ``nbytes`` more for ``uid``; raise `OverBudget` (nothing held) past a limit."""
        if nbytes <= 0:
            return
        held = self._by_uid[kind]
        mine = held[uid] + nbytes
        if mine > self._per_uid[kind]:
            self.refused[kind] += 1
            raise OverBudget(kind, "uid", self._per_uid[kind])
        total = self.totals[kind] + nbytes
        if total > self._total[kind]:
            self.refused[kind] += 1
            raise OverBudget(kind, "total", self._total[kind])
        held[uid] = mine
        self.totals[kind] = total

    def give(self, kind: str, uid: int, nbytes: int) -> None:
        """Release ``nbytes`` ``uid`` held."""
        if nbytes <= 0:
            return
        held = self._by_uid[kind]
        left = held[uid] - nbytes
        self.totals[kind] -= min(nbytes, held[uid])
        if left > 0:
            held[uid] = left
        else:
            del held[uid]

    def held(self, kind: str, uid: int) -> int:
        """Bytes of ``kind`` ``uid`` holds now."""
        return self._by_uid[kind].get(uid, 0)

    def status(self) -> dict[str, dict[str, int]]:
        """Bytes held and refusals per kind (for ``status``)."""
        return {kind: {"held": self.totals[kind], "refused": self.refused[kind]} for kind in KINDS}
