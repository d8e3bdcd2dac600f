"""MCP servers as toolsets: one shared pool of Model Context Protocol servers per daemon.

settings.py (``mcp_servers.<name>``: checking, ``${VAR}`` expansion), naming.py (the names the
model sees), results.py (an MCP result as a tool result string), connection.py (one server, its
supervisor, transport and stderr log), pool.py (every server, their tools in the registry),
service.py (mcp.* RPC, ``/reload-mcp``, reloads). docs/mcp.md describes it for users.
"""
