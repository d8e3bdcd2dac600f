"""RPC declarations of the memory.* methods (see hermesd.rpc.protocol)."""

from __future__ import annotations

from hermesd.rpc.protocol import Access, MethodSpec, Param, declare

_TARGET = Param("target", "str", doc="memory (MEMORY.md) or user (USER.md)")

declare(
    MethodSpec(
        "memory.show",
        "The entries of MEMORY.md and USER.md as they are on disk now (approvers only).",
        (_TARGET,),
        "{targets: [{target, path, entries, usage, limit, enabled, digest}], write_approval}",
        access=Access.ANY,
    )
)
declare(
    MethodSpec(
        "memory.write",
        "Add, replace or remove entries as a person: never staged (approvers only).",
        (
            Param("target", "str", required=True, doc="memory or user"),
            Param("action", "str", doc="add, replace or remove"),
            Param("content", "str", doc="the entry's text (add, replace)"),
            Param("old_text", "str", doc="a unique piece of the entry to change (replace, remove)"),
            Param("operations", "array", doc="[{action, content?, old_text?}], all or none"),
        ),
        "the memory tool's result: {success, ...}",
        access=Access.PERSON,
    )
)
declare(
    MethodSpec(
        "memory.set",
        "Replace every entry of one file at once (hermesctl memory edit; approvers only).",
        (
            Param("target", "str", required=True, doc="memory or user"),
            Param("entries", "array", required=True, doc="the new entries, in order"),
            Param("base", "str", doc="the digest memory.show gave; refused if the file changed"),
        ),
        "{success, ...}",
        access=Access.PERSON,
    )
)
declare(
    MethodSpec(
        "memory.pending",
        "Memory writes staged for approval, oldest first (approvers only).",
        (),
        "{pending: [{id, action, summary, origin, created_at, payload, session_id}]}",
        access=Access.ANY,
    )
)
declare(
    MethodSpec(
        "memory.approve",
        "Apply a staged memory write (approvers only).",
        (Param("id", "str", required=True, doc="the staged write's id"),),
        "{id, applied, success, ...}",
        access=Access.PERSON,
    )
)
declare(
    MethodSpec(
        "memory.reject",
        "Drop a staged memory write (approvers only).",
        (Param("id", "str", required=True, doc="the staged write's id"),),
        "{id, rejected: true}",
        access=Access.PERSON,
    )
)
declare(
    MethodSpec(
        "memory.setup_schema",
        "The settings a memory provider asks for (its get_config_schema()), owner only.",
        (Param("provider", "str", required=True, doc="the provider's name"),),
        "{provider, fields: [{key, description, secret, required, default, choices, url, "
        "env_var, is_set, current?}]}",
        access=Access.OWNER,
    )
)
declare(
    MethodSpec(
        "memory.setup",
        "Configure and select a memory provider: secrets to .env, the rest to config.yaml "
        "(memory.<provider>) and its save_config(); then reload (owner only).",
        (
            Param("provider", "str", required=True, doc="the provider's name"),
            Param("values", "map", doc="{key: value} for the provider's settings"),
        ),
        "{provider, config_keys, env_vars, save_config_error, reload}",
        access=Access.OWNER,
    )
)
