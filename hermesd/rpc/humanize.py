"""How a span of time and a usage report read to a person: the same in ``hermesctl status``
and ``/status``, in ``hermesctl usage`` and ``/usage``.

Lives beside the protocol because both sides of the socket show what it carries (``uptime_s``,
``usage.get``'s report); standard library only (hermesctl imports it on its start-up path).
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing stays off the client's start-up path
    from typing import Any


def duration(seconds: float) -> str:
    """``42s``, ``3m 5s``, ``2h 10m``, ``4d 1h``: the two largest units."""
    seconds = int(seconds)
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes}m"
    if minutes:
        return f"{minutes}m {secs}s"
    return f"{secs}s"


def money(cost: float | None) -> str:
    """``$0.0042``, ``$1.25``; ``cost unknown`` for None."""
    if cost is None:
        return "cost unknown"
    return f"${cost:.4f}" if cost < 1 else f"${cost:,.2f}"


def usage_line(t: dict[str, Any]) -> str:
    """One window's totals: requests, tokens by bucket, cost (and what it leaves out)."""
    requests = int(t.get("requests") or 0)
    if not requests:
        return "no model requests"
    parts = [f"{int(t.get('input_tokens') or 0):,} in"]
    for key, word in (
        ("cache_read_tokens", "cache read"),
        ("cache_write_tokens", "cache write"),
    ):
        if t.get(key):
            parts.append(f"{int(t[key]):,} {word}")
    parts.append(f"{int(t.get('output_tokens') or 0):,} out")
    if t.get("reasoning_tokens"):
        parts.append(f"of which {int(t['reasoning_tokens']):,} reasoning")
    cost = t.get("cost_usd")
    unpriced = int(t.get("unpriced_requests") or 0)
    if cost is None:
        price = "cost unknown (no price for its model)"
    else:
        price = money(cost) + (
            f" + {unpriced} unpriced request{'s' if unpriced != 1 else ''}" if unpriced else ""
        )
    return (
        f"{requests:,} request{'s' if requests != 1 else ''} · "
        f"{int(t.get('total_tokens') or 0):,} tokens ({', '.join(parts)}) · {price}"
    )


def usage_report(r: dict[str, Any], heading: str = "") -> str:
    """``usage.get``'s answer as lines: the window, by model, by session, today, the month,
    the budgets."""
    lines = [f"{heading or 'Usage'}: {usage_line(r.get('totals') or {})}"]
    models = r.get("by_model") or []
    if len(models) > 1 or (models and not r.get("session_id")):
        lines += [f"  {m.get('model') or '?'}: {usage_line(m)}" for m in models]
    for s in r.get("by_session") or []:
        name = s.get("session_id") or "(no session)"
        note = " (deleted)" if s.get("deleted") else f" “{s['title']}”" if s.get("title") else ""
        lines.append(f"  session {name}{note}: {usage_line(s)}")
    lines.append(f"Today: {usage_line(r.get('today') or {})}")
    lines.append(f"This month: {usage_line(r.get('month') or {})}")
    budget = r.get("budget") or {}
    limits = []
    if budget.get("session_tokens"):
        limits.append(f"session_tokens {int(budget['session_tokens']):,}")
    for key in ("daily_usd", "monthly_usd"):
        if budget.get(key):
            limits.append(f"{key} ${budget[key]:g}")
    if limits:
        lines.append(f"Budgets ({budget.get('action', 'warn')}): {', '.join(limits)}")
    return "\n".join(lines)
