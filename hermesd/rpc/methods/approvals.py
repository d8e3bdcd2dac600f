"""RPC declarations of the approvals.* methods (see hermesd.rpc.protocol)."""

from __future__ import annotations

from hermesd.rpc.protocol import Access, MethodSpec, Param, declare

declare(
    MethodSpec(
        "approvals.pending",
        "Tool calls waiting for a person's answer, oldest first.",
        (Param("session_id", "str", doc="only this session's"),),
        "{pending: [{id, session_id, tool, command, pattern_key, pattern_keys, description, "
        "choices, deadline}]}",
        access=Access.ANY,  # filtered to what the caller may see (its own requests)
    )
)
declare(
    MethodSpec(
        "approvals.respond",
        "Answer a pending approval (owner, root or approvals.approvers only).",
        (
            Param("id", "str", required=True, doc="the approval's id"),
            Param("choice", "str", required=True, doc="once, session, always or deny"),
            Param("reason", "str", doc="with deny: told to the model"),
        ),
        "{id, choice}",
        access=Access.PERSON,
    )
)
declare(
    MethodSpec(
        "approvals.list",
        'The remembered "always" rules.',
        (),
        "{rules: [{pattern_key, decision, decided_by, description, created_at}]}",
        access=Access.ANY,
    )
)
declare(
    MethodSpec(
        "approvals.revoke",
        'Forget an "always" rule (owner, root or approvals.approvers only).',
        (Param("pattern_key", "str", required=True, doc="the rule's pattern key"),),
        "{revoked: true, pattern_key}",
        access=Access.PERSON,
    )
)
declare(
    MethodSpec(
        "approvals.mode",
        "A session's approval mode: read it, or set it for that session (hermesd.approvals.modes).",
        (
            Param("session_id", "str", required=True, doc="the session"),
            Param("mode", "str", doc="manual, deny or off; absent: only read it"),
        ),
        "{session_id, mode, configured}",
        access=Access.OWNER,  # it can waive approvals: the owner's, as every widening call
        widens=lambda p: (
            [f"let session {p.get('session_id')} run dangerous commands without asking"]
            if p.get("mode") == "off"
            else []
        ),
    )
)
