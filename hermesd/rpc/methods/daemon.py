"""RPC declarations of the day-two methods: config.*, reload, logs.tail and doctor (see
hermesd.rpc.protocol; served by hermesd.daemon's config_service, reloads, logring, doctor)."""

from __future__ import annotations

from hermesd.rpc.protocol import Access, MethodSpec, Param, declare, widening_key

_KEY = Param("key", "str", required=True, doc="dotted setting name, e.g. model.default")

declare(
    MethodSpec(
        "config.show",
        "config.yaml as written (redacted) and every setting's running value.",
        (),
        "{path, exists, text, settings: {dotted: value}, problems}",
        access=Access.ANY,
    )
)
declare(
    MethodSpec(
        "config.get",
        "One setting's running value (a section: all of its settings).",
        (_KEY,),
        "{key, value, default, doc}",
        access=Access.ANY,
    )
)
declare(
    MethodSpec(
        "config.set",
        "Set one setting in config.yaml, comments kept, validated, then reload (owner only).",
        (_KEY, Param("value", "str", required=True, doc="the value, as YAML (3, true, [a, b])")),
        "{key, value, path, reload: <reload result>, restart_needed}",
        access=Access.OWNER,
        widens=lambda p: (
            [f"set {p.get('key')} to {p.get('value')!r}: it decides what tools may do"]
            if widening_key(str(p.get("key") or ""))
            else []
        ),
    )
)
declare(
    MethodSpec(
        "config.check",
        "Validate config.yaml as it is now; every problem, not the first.",
        (),
        "{path, ok, problems, warnings}",
        access=Access.ANY,
    )
)
declare(
    MethodSpec(
        "reload",
        "Reload config.yaml, .env and every plugin; the outcome is kept for status (owner only).",
        (),
        "{time, source, ok, config_problems, config_warnings, plugins, plugins_failed}",
        access=Access.OWNER,
    )
)
declare(
    MethodSpec(
        "logs.tail",
        "The daemon's recent log records (redacted); follow sends new ones (owner only).",
        (
            Param("lines", "int", doc="how many recent records (default 100)"),
            Param("follow", "bool", doc="then send each new record as a log.record notification"),
        ),
        "{records: [{seq, time, level, logger, message}], capacity}",
        access=Access.OWNER,
    )
)
declare(
    MethodSpec(
        "doctor",
        "Check config, model endpoint, plugins, sandbox, systemd, socket and versions.",
        (),
        "{ok, checks: [{name, status: ok|warn|fail, detail}]}",
        access=Access.ANY,
    )
)
