"""RPC declarations of the process.* methods: background processes (see docs/tools.md)."""

from __future__ import annotations

from hermesd.rpc.protocol import Access, MethodSpec, Param, declare

declare(
    MethodSpec(
        "process.list",
        "Background processes started by terminal(background=true): one session's, or every "
        "session's the caller may use.",
        (Param("session_id", "str", doc="only this session (a unique prefix will do)"),),
        "{processes: [{id, session_id, command, cwd, pid, status, started_at, exit_code, "
        "completion_reason, termination_source, output_tail}]}",
        access=Access.SESSION,
    )
)
declare(
    MethodSpec(
        "process.kill",
        "Kill one of a session's background processes.",
        (
            Param("session_id", "str", required=True, doc="the process's session"),
            Param("id", "str", required=True, doc="the process id (proc_…)"),
        ),
        "{id, status, exit_code, completion_reason, termination_source}",
        access=Access.SESSION,
    )
)
