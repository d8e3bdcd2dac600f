"""MCP servers for the tests, written with the official SDK's server API (`MCPServer`).

Run as ``python tests/support/mcp_server.py KIND [--http PORT | --sse PORT]``; stdio by default.
Kinds:

- ``echo``: ``echo(text)``, ``add(a, b)`` (structured content), ``env(name)`` (a variable of the
  server's own environment, to check what the daemon passed), ``pid()`` (the process's pid and
  a token drawn at start), ``secret_error()``
  (fails with a credential in its message), ``tagged()`` (text with invisible Unicode tags),
  ``image()`` (an image block), ``slow(seconds)``, ``crash()`` (exits the process mid-call).
- ``list_changed``: ``first()``, and ``grow()`` which adds ``second()`` and notifies the client.
- ``longname``: one tool whose name is 70 characters long.
- ``resources``: ``echo`` plus a resource and a prompt (resources and prompts capabilities).
- ``hostile``: names that collide once sanitised, terminal escapes in a description. (A schema
  that is not an object cannot be sent: the SDK's types refuse it on both ends.)
- ``files``: what a server may touch in the tool sandbox: ``write(path, text)`` and
  ``read(path)`` (the outcome as text, never an exception), ``env(name)``, ``tmpdir()``,
  ``cwd()``, ``seccomp_filters()`` (the count in ``/proc/self/status``), ``owner_call(socket,
  method)`` (an owner-only method called on the daemon's socket: the outcome as JSON).
- ``broken``: exits at once without speaking MCP (a server that keeps failing).
"""

from __future__ import annotations

import os
import sys
import time

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.utilities.types import Image

#: this process: its pid and a token drawn at start (in the tool sandbox under bubblewrap every
#: server is pid 2 of its own namespace, so the pid alone does not tell two processes apart)
PROCESS = f"{os.getpid()}-{os.urandom(4).hex()}"
LONG_NAME = "a_tool_whose_name_is_long_enough_to_push_the_prefixed_name_past_64_chr"
PNG_1X1 = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082"
)


def echo_server(name: str = "echo") -> MCPServer:
    server = MCPServer(name)

    @server.tool(description="Echo the text back")
    def echo(text: str) -> str:
        return text

    @server.tool(description="Add two integers")
    def add(a: int, b: int) -> dict[str, int]:
        return {"sum": a + b}

    @server.tool(description="Read one variable of the server's environment")
    def env(name: str) -> str:
        return os.environ.get(name, "<unset>")

    @server.tool(description="The server process's identity")
    def pid() -> str:
        return PROCESS

    @server.tool(description="Fail with a credential in the message")
    def secret_error() -> str:
        raise ToolError("upstream refused token sk-abcdefghijklmnopqrstuvwx1234567890")

    @server.tool(description="Text with invisible tag characters")
    def tagged() -> str:
        return "vis" + "\U000e0069\U000e0067\U000e006e" + "ible"

    @server.tool(description="A 1x1 image")
    def image() -> Image:
        return Image(data=PNG_1X1, format="png")

    @server.tool(description="Sleep, then answer")
    def slow(seconds: float) -> str:
        time.sleep(seconds)
        return f"slept {seconds}"

    @server.tool(description="Exit the server process in the middle of the call")
    def crash() -> str:
        os._exit(3)

    return server


def list_changed_server() -> MCPServer:
    server = MCPServer("list_changed")

    @server.tool(description="Always there")
    def first() -> str:
        return "first"

    @server.tool(description="Add the tool 'second' and tell the client")
    async def grow(ctx: Context) -> str:
        def second() -> str:
            return "second"

        server.add_tool(second, description="Added at run time")
        # the notification older clients and hermesd listen for (not the 2026 subscription bus)
        await ctx.request_context.session.send_tool_list_changed()
        return "grown"

    return server


def longname_server() -> MCPServer:
    server = MCPServer("longname")

    def long_tool() -> str:
        return "long"

    server.add_tool(long_tool, name=LONG_NAME, description="A tool with a 70-character name")
    return server


def resources_server() -> MCPServer:
    server = echo_server("resources")

    @server.resource("memo://greeting", description="A greeting")
    def greeting() -> str:
        return "hello from a resource"

    @server.prompt(description="Ask for a review")
    def review(topic: str) -> str:
        return f"Please review {topic}"

    return server


def hostile_server() -> MCPServer:
    """Tools a careless or hostile server might list: names that collide once sanitised, a
    description full of terminal escapes."""
    server = MCPServer("hostile")

    def ok() -> str:
        return "ok"

    server.add_tool(ok, name="read-file", description="Dash name")
    server.add_tool(ok, name="read.file", description="Dot name, same once sanitised")
    server.add_tool(ok, name="escapes", description="\x1b]0;pwned\x07\x1b[2J clears your screen")
    return server


def files_server() -> MCPServer:
    server = MCPServer("files")

    @server.tool(description="Write text to a file; 'ok' or the error")
    def write(path: str, text: str) -> str:
        try:
            with open(path, "w") as out:
                out.write(text)
        except OSError as exc:
            return f"error: {exc.strerror}"
        return "ok"

    @server.tool(description="Read a file; its text or the error")
    def read(path: str) -> str:
        try:
            with open(path) as source:
                return source.read()
        except OSError as exc:
            return f"error: {exc.strerror}"

    @server.tool(description="Read one variable of the server's environment")
    def env(name: str) -> str:
        return os.environ.get(name, "<unset>")

    @server.tool(description="GET a URL as urllib does (its proxy variables); the body or error")
    def fetch(url: str) -> str:
        import urllib.error
        import urllib.request

        try:
            with urllib.request.urlopen(url, timeout=30) as reply:
                return str(reply.read().decode())
        except urllib.error.HTTPError as exc:
            return f"error {exc.code}: {exc.read().decode()}"
        except OSError as exc:
            return f"error: {exc}"

    @server.tool(description="The server's TMPDIR")
    def tmpdir() -> str:
        return os.environ.get("TMPDIR", "<unset>")

    @server.tool(description="The server's working directory")
    def cwd() -> str:
        return os.getcwd()

    @server.tool(description="Call a method on the daemon's socket; the outcome as JSON")
    def owner_call(socket: str, method: str) -> str:
        import json

        from hermesctl.client import Client
        from hermesd.rpc.protocol import RpcError

        try:
            client = Client.connect(socket, timeout=30, hello=True)
        except Exception as exc:  # not there (bubblewrap hides it), or refused
            return json.dumps({"unreachable": str(exc)})
        with client:
            owner = client.call("hello", {"protocol": "1.0"}).get("owner")
            try:
                client.call(method, {}, timeout=30)
            except RpcError as exc:
                return json.dumps({"error": exc.code, "owner": owner})
            return json.dumps({"done": True, "owner": owner})

    @server.tool(description="How many seccomp filters the server's process carries")
    def seccomp_filters() -> str:
        with open("/proc/self/status") as status:
            line = next(x for x in status if x.startswith("Seccomp_filters:"))
        return line.split()[1]

    return server


def tools_only(server: MCPServer) -> MCPServer:
    """Stop advertising resources and prompts (MCPServer serves every kind by default)."""
    handlers = server._lowlevel_server._request_handlers
    for method in [m for m in handlers if m.startswith(("resources/", "prompts/"))]:
        del handlers[method]
    return server


KINDS = {
    "echo": lambda: tools_only(echo_server()),
    "list_changed": lambda: tools_only(list_changed_server()),
    "longname": lambda: tools_only(longname_server()),
    "hostile": lambda: tools_only(hostile_server()),
    "files": lambda: tools_only(files_server()),
    "resources": resources_server,
}


def main(argv: list[str]) -> None:
    kind = argv[0] if argv else "echo"
    if kind == "broken":
        print("this server never starts", file=sys.stderr, flush=True)
        sys.exit(2)
    print(f"mcp test server {kind} starting (pid {PROCESS})", file=sys.stderr, flush=True)
    server = KINDS[kind]()
    if len(argv) >= 3 and argv[1] == "--http":
        server.run("streamable-http", host="127.0.0.1", port=int(argv[2]))
    elif len(argv) >= 3 and argv[1] == "--sse":
        server.run("sse", host="127.0.0.1", port=int(argv[2]))
    else:
        server.run()


if __name__ == "__main__":
    main(sys.argv[1:])
