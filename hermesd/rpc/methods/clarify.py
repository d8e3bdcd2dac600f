"""RPC declarations of the clarify.* methods: the model's questions to the person (see
hermesd.tools.clarify)."""

from __future__ import annotations

from hermesd.rpc.protocol import Access, MethodSpec, Param, declare

declare(
    MethodSpec(
        "clarify.pending",
        "The questions the model is waiting on the person to answer in a session, oldest first.",
        (Param("session_id", "str", required=True, doc="the session"),),
        "{pending: [{id, session_id, question, choices, deadline}]}",
        access=Access.SESSION,
    )
)
declare(
    MethodSpec(
        "clarify.respond",
        "Answer the model's question: a choice by its number, or text of one's own.",
        (
            Param("session_id", "str", required=True, doc="the question's session"),
            Param("id", "str", required=True, doc="the question's id"),
            Param("response", "str", doc="the answer, as text"),
            Param("choice", "int", doc="the number (from 1) of an offered choice"),
        ),
        "{id, response}",
        access=Access.SESSION,
    )
)
