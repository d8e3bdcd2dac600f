"""RPC declarations of the gateway.* methods: chat platforms (see hermesd.gateway)."""

from __future__ import annotations

from hermesd.rpc.protocol import Access, MethodSpec, Param, declare

declare(
    MethodSpec(
        "gateway.status",
        "Each configured chat platform's state, the chats seen, paired users and pairing "
        "requests waiting (never their codes).",
        (),
        "{platforms: [{name, state}], chats, paired: {platform: [user_id]}, "
        "pairing_pending: [{platform, user_id, user_name}]}",
        access=Access.OWNER,
    )
)
declare(
    MethodSpec(
        "gateway.platforms",
        "The chat platforms hermesd could run: built-in and from plugins (register_platform).",
        (),
        "{platforms: [{name, label, source, configured, state}]}",
        access=Access.PERSON,
    )
)
declare(
    MethodSpec(
        "gateway.pair",
        "Admit the chat user who was given a pairing code; they act as a member from then on.",
        (Param("code", "str", required=True, doc="the 8-character code the user was sent"),),
        "{platform, user_id, user_name}",
        access=Access.OWNER,
    )
)
