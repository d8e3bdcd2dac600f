"""RPC declarations of the usage.* methods (see hermesd.rpc.protocol)."""

from __future__ import annotations

from hermesd.rpc.protocol import Access, MethodSpec, Param, declare

declare(
    MethodSpec(
        "usage.get",
        "Tokens and estimated cost of model requests: a window's totals, by model and by "
        "session, today's and this month's, and the budgets.",
        (
            Param("session_id", "str", doc="only this session (a unique prefix will do)"),
            Param("since", "number", doc="only requests from this time on (Unix seconds)"),
            Param("until", "number", doc="only requests before this time (Unix seconds)"),
            Param("limit", "int", doc="most sessions and models listed, 1-1000 (default 20)"),
        ),
        "{totals, by_model, by_session, today, month, session?, budget}",
        access=Access.SESSION,
    )
)
