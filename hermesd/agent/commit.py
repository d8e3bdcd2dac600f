"""The commit of what a turn produced: each message with the usage of the request behind it, and
the close of a turn that stopped before its end.

Owns the write of one message and its request's usage row (and the counters of its session and
of the sessions that delegated to it) in one transaction on the store's thread, awaited before
the turn goes on, so messages are stored in the order they happened; and, for a cancelled or
failed turn, the usage of a completion whose message was never stored plus error results for its
unanswered tool calls (shielded: a second cancel must not leave them behind). Store access goes
through `SessionStore`'s public methods.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from hermesd.agent.budget import UsageMeter
from hermesd.store.dbfile import SessionNotFound
from hermesd.store.facade import SessionStore
from hermesd.store.messages import MessageRecord
from hermesd.store.usage import RequestUsage

log = logging.getLogger(__name__)


async def commit_message(
    store: SessionStore,
    meter: UsageMeter,
    ids: tuple[str, str],
    role: str,
    content: str | None,
    usage: RequestUsage | None = None,
    **fields: Any,
) -> tuple[MessageRecord, float | None]:
    """Store one message of turn ``ids`` (session, turn) with ``usage``; the record and the
    request's cost (None: not priced, or no usage)."""
    session_id, turn_id = ids
    above = meter.lineage(session_id) if usage is not None else []

    def write() -> tuple[MessageRecord, float | None]:
        record = store.messages.append(
            session_id,
            role,
            content,
            turn_id=turn_id,
            usage=usage.counters() if usage else None,
            **fields,
        )
        cost = None
        if usage is not None:
            cost = meter.record(session_id, turn_id, usage)
            _count_above(store, above, usage)
        return record, cost

    record, cost = await store.run(store.run_in_transaction, write)
    return record, cost


async def close_unfinished(
    store: SessionStore,
    meter: UsageMeter,
    ids: tuple[str, str],
    reason: str,
    usage: RequestUsage | None,
) -> float | None:
    """A turn stopped early: store ``usage`` (a completion whose message never was) and answer
    its tool calls left without a result with ``reason``; the cost of that usage."""
    session_id, turn_id = ids
    above = meter.lineage(session_id) if usage is not None else []

    def close() -> float | None:
        cost = None
        if usage is not None:
            store.sessions.add_usage(session_id, *usage.counters())
            cost = meter.record(session_id, turn_id, usage)
            _count_above(store, above, usage)
        store.messages.close_dangling_tool_calls(session_id, reason, turn_id)
        return cost

    try:
        cost: float | None = await asyncio.shield(store.run(close))
    except Exception:
        log.exception("could not close tool calls of session %s", session_id)
        return None
    return cost


def _count_above(store: SessionStore, sessions: list[str], usage: RequestUsage) -> None:
    """A sub-agent's request counts in the counters of every session that delegated to it,
    as it is spent (what their ``budget.session_tokens`` compares); one deleted meanwhile is
    skipped."""
    for sid in sessions:
        with contextlib.suppress(SessionNotFound):
            store.sessions.add_usage(sid, *usage.counters())
