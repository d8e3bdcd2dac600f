"""RPC declarations of the mcp.* methods (see hermesd.rpc.protocol and docs/mcp.md)."""

from __future__ import annotations

from hermesd.rpc.protocol import Access, MethodSpec, Param, declare

_NAME = Param("name", "str", required=True, doc="the server's name in mcp_servers")

declare(
    MethodSpec(
        "mcp.list",
        "Every configured MCP server: its state, last error and tool counts.",
        (),
        "{servers: [{name, kind, enabled, state, error, server, tools, registered, rejected, "
        "toolset, connects, failures, stderr_tail, exit, session_id}]}",
        access=Access.ANY,
    )
)
declare(
    MethodSpec(
        "mcp.tools",
        "One server's tools: the model-facing name, and registered, filtered or rejected.",
        (_NAME,),
        "{server, tools: [{tool, name, status, description, approval}]}",
        access=Access.ANY,
    )
)
declare(
    MethodSpec(
        "mcp.restart",
        "Reconnect one server now (a stdio server gets a new process).",
        (_NAME,),
        "{server, state, error}",
        access=Access.OWNER,
    )
)
declare(
    MethodSpec(
        "mcp.reload",
        "Re-read mcp_servers from config.yaml: add, remove and restart only changed servers.",
        (),
        "{added: [name], removed: [name], restarted: [name]}",
        access=Access.OWNER,
    )
)
declare(
    MethodSpec(
        "mcp.logs",
        "The end of what a server wrote to stderr (kept in memory, bounded).",
        (_NAME, Param("tail", "int", doc="at most this many bytes (default 64 KiB)")),
        "{server, text}",
        access=Access.OWNER,
    )
)
declare(
    MethodSpec(
        "mcp.session_add",
        "Start MCP servers whose tools only one session gets (an editor's); they stop when "
        "this connection closes.",
        (
            Param("session_id", "str", required=True, doc="the session the tools are for"),
            Param("servers", "map", required=True, doc="name -> an mcp_servers entry"),
        ),
        "{servers: [<mcp.list row>]}",
        access=Access.OWNER,
        widens=lambda p: [
            f"start MCP server {name!r} for session {p.get('session_id')}: "
            + (
                f"it runs {entry.get('command')!r}"
                if isinstance(entry, dict) and entry.get("command")
                else "it connects to a URL"
            )
            for name, entry in (p["servers"] if isinstance(p.get("servers"), dict) else {}).items()
        ],
    )
)
