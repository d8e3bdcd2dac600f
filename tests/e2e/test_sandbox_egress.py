"""``sandbox.network: allowlist | off | on`` on a real daemon, under bubblewrap and Landlock.

A page is served on 127.0.0.1 by this test; terminal commands fetch it through the daemon's
egress proxy (their ``http_proxy`` variables), are asked about by an approval on the calling
client when the host is not on ``sandbox.allowed_domains``, and cannot reach it directly.
Nothing here aims anywhere but the loopback.
"""

from __future__ import annotations

import base64
import http.server
import json
import socket
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.approvals import client_answering, terminal, tool
from tests.support.daemon import DaemonProcess, short_tmpdir
from tests.support.mcp_helpers import config as mcp_config
from tests.support.mcp_helpers import settle, stdio, unmarked

Start = Callable[..., DaemonProcess]
MECHANISMS = ["bwrap", "landlock"]
PAGE = b"egress-test-page\n"


class _Page(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def page_port() -> Iterator[int]:
    """A web server on 127.0.0.1 that serves `PAGE`; its port."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def _daemon(start: Start, mechanism: str, network: str, allowed: str = "[]") -> DaemonProcess:
    # approvals.mode off: commands are not asked about; hosts off the list still are
    config = (
        "approvals:\n  mode: 'off'\n"
        f"sandbox:\n  mechanism: {mechanism}\n  network: {network}\n"
        f"  allowed_domains: {allowed}\n"
    )
    return start(config=config)


def _curl(url: str, *options: str) -> str:
    # -w prints the status even when the proxy refuses; the body (or the error) comes first
    return f"curl -sS --max-time 20 {' '.join(options)} -w ' status=%{{http_code}}' {url} 2>&1"


def _run(client: Any, command: str, session_id: str | None = None) -> str:
    result = terminal(client, command, session_id=session_id, timeout=90)
    return str(result.get("output")) if isinstance(result, dict) else str(result)


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_an_allowed_host_is_reached_through_the_proxy(
    start: Start, mechanism: str, page_port: int
) -> None:
    d = _daemon(start, mechanism, "allowlist", "['127.0.0.1', localhost]")
    with d.client(timeout=90) as c:
        plain = _run(c, _curl(f"http://127.0.0.1:{page_port}/page"))
        by_name = _run(c, _curl(f"http://localhost:{page_port}/page"))
        tunnel = _run(c, _curl(f"http://127.0.0.1:{page_port}/page", "--proxytunnel"))
        python = _run(
            c,
            'python3 -c "import urllib.request; '
            f"print(urllib.request.urlopen('http://localhost:{page_port}/').read())\"",
        )
    assert PAGE.decode() in plain and "status=200" in plain, plain
    assert PAGE.decode() in by_name and "status=200" in by_name, by_name
    assert PAGE.decode() in tunnel and "status=200" in tunnel, tunnel
    assert "egress-test-page" in python, python


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_a_host_off_the_list_is_asked_about_and_fetched_once_approved(
    start: Start, mechanism: str, page_port: int
) -> None:
    d = _daemon(start, mechanism, "allowlist", "['*.example.org']")
    client, answers = client_answering(d, "once")
    with client:
        output = _run(client, _curl(f"http://localhost:{page_port}/"))
    assert PAGE.decode() in output and "status=200" in output, output
    [request] = answers.requests
    assert request["tool"] == "network" and "localhost" in request["description"]
    assert request["pattern_key"] == "network:localhost"


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_a_denied_host_gets_403_with_a_reason(start: Start, mechanism: str, page_port: int) -> None:
    d = _daemon(start, mechanism, "allowlist")
    client, answers = client_answering(d, "deny")
    with client:
        output = _run(client, f"{_curl(f'http://127.0.0.1:{page_port}/')} -i")
    assert "status=403" in output and PAGE.decode() not in output, output
    assert "network access to 127.0.0.1 was not approved" in output, output
    assert len(answers.requests) == 1


def test_one_question_per_host_per_command(start: Start, page_port: int) -> None:
    d = _daemon(start, "bwrap", "allowlist")
    client, answers = client_answering(d, "once")
    fetch = _curl(f"http://localhost:{page_port}/")
    with client:  # three fetches at once, then one more: one question, for the whole command
        output = _run(client, f"({fetch}) & ({fetch}) & ({fetch}) & wait; echo; {fetch}")
    assert output.count("status=200") == 4, output
    assert len(answers.requests) == 1


def test_approvals_deny_network_refuses_unlisted_hosts_without_asking(
    start: Start, page_port: int
) -> None:
    config = (
        "approvals:\n  mode: 'off'\n  deny: [network]\n"
        "sandbox:\n  mechanism: landlock\n  network: allowlist\n"
    )
    d = start(config=config)
    client, answers = client_answering(d, "once")
    with client:
        output = _run(client, _curl(f"http://localhost:{page_port}/"))
    assert "status=403" in output and "approvals.deny" in output, output
    assert answers.requests == []


def test_a_session_answer_is_remembered_for_the_session(start: Start, page_port: int) -> None:
    d = _daemon(start, "bwrap", "allowlist")
    session = d.call("session.create", {"attach": False})["id"]
    client, answers = client_answering(d, "session")
    with client:
        first = _run(client, _curl(f"http://localhost:{page_port}/"), session)
        second = _run(client, _curl(f"http://localhost:{page_port}/"), session)
    assert "status=200" in first and "status=200" in second, (first, second)
    assert len(answers.requests) == 1


def test_an_always_answer_is_kept_as_a_rule_for_every_session(start: Start, page_port: int) -> None:
    d = _daemon(start, "landlock", "allowlist")
    client, answers = client_answering(d, "always")
    with client:
        first = _run(client, _curl(f"http://localhost:{page_port}/"))
        other_session = d.call("session.create", {"attach": False})["id"]
        second = _run(client, _curl(f"http://localhost:{page_port}/"), other_session)
    assert "status=200" in first and "status=200" in second, (first, second)
    assert len(answers.requests) == 1
    rules = [r["pattern_key"] for r in d.call("approvals.list")["rules"]]
    assert "network:localhost" in rules
    d.call("approvals.revoke", {"pattern_key": "network:localhost"})
    refusing, asked = client_answering(d, "deny")
    with refusing:
        third = _run(refusing, _curl(f"http://localhost:{page_port}/"))
    assert "status=403" in third and len(asked.requests) == 1, third


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_a_direct_connection_that_ignores_the_proxy_fails(
    start: Start, mechanism: str, page_port: int
) -> None:
    d = _daemon(start, mechanism, "allowlist", "['127.0.0.1']")
    probe = (
        'python3 -c "import socket; '
        f"socket.create_connection(('127.0.0.1', {page_port}), 5); print('connected')\" 2>&1"
    )
    with d.client(timeout=90) as c:
        direct = _run(c, _curl(f"http://127.0.0.1:{page_port}/", "--noproxy '*'"))
        raw = _run(c, probe)
        proxied = _run(c, _curl(f"http://127.0.0.1:{page_port}/"))
    assert PAGE.decode() not in direct and "status=000" in direct, direct
    assert "connected" not in raw, raw
    assert "status=200" in proxied, proxied


def test_under_landlock_only_tcp_leaves_the_sandbox(start: Start) -> None:
    d = _daemon(start, "landlock", "allowlist")
    probe = (
        'python3 -c "import socket\nfor kind in (socket.SOCK_DGRAM, socket.SOCK_RAW):\n'
        "  try: socket.socket(socket.AF_INET, kind, 17 if kind == socket.SOCK_RAW else 0)\n"
        "  except OSError as e: print('refused', e.errno)\n"
        "  else: print('made')\" 2>&1"
    )
    with d.client(timeout=90) as c:
        output = _run(c, probe)
    assert output.count("refused 13") == 2 and "made" not in output, output


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_network_off_refuses_everything(start: Start, mechanism: str, page_port: int) -> None:
    d = _daemon(start, mechanism, "off")
    with d.client(timeout=90) as c:
        output = _run(c, _curl(f"http://127.0.0.1:{page_port}/"))
        env = _run(c, "env | grep -ci proxy || true")
    assert PAGE.decode() not in output and "status=000" in output, output
    assert env.strip() == "0", env
    assert d.call("status")["sandbox"]["network"] == "off"


@pytest.mark.parametrize("network", ["allowlist", "'off'", "'on'", "false", "true"])
def test_status_shows_the_network_mode(start: Start, network: str) -> None:
    d = _daemon(start, "landlock", network, "[pypi.org, '*.github.com']")
    shown = d.call("status")["sandbox"]
    expected = {"false": "off", "true": "on"}.get(network, network.strip("'"))
    assert shown["network"] == expected
    assert ("allowed_domains" in shown) is (expected == "allowlist")
    if expected == "allowlist":
        assert shown["allowed_domains"] == ["pypi.org", "*.github.com"]
        cli = subprocess.run(
            [sys.executable, "-m", "hermesctl", "--socket", str(d.socket), "status"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert "network: allowlist (2 domains)" in cli.stdout, cli.stdout
        [row] = [r for r in d.call("doctor")["checks"] if r["name"] == "sandbox"]
        assert "network: allowlist" in row["detail"], row


def test_a_bad_allowed_domains_entry_is_a_config_error(start: Start) -> None:
    home = short_tmpdir("sbe-")
    (home / "config.yaml").write_text(
        "sandbox:\n  network: allowlist\n  allowed_domains: ['exa*mple.com', 'a..b']\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "hermesd", "--check-config"],
        capture_output=True,
        text=True,
        timeout=30,
        env={"HERMES_HOME": str(home), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode != 0
    assert "sandbox.allowed_domains" in done.stderr + done.stdout
    assert "exa*mple.com" in done.stderr + done.stdout


BAD_INPUT = r"""
import base64, os, socket, urllib.parse
proxy = urllib.parse.urlsplit(os.environ["http_proxy"])
auth = base64.b64encode(f"{proxy.username}:{proxy.password}".encode()).decode()
AUTH = f"Proxy-Authorization: Basic {auth}\r\n"
GET = "GET http://127.0.0.1:PORT/ HTTP/1.1\r\n"
def ask(text):
    s = socket.create_connection((proxy.hostname, proxy.port), 60)
    s.sendall(text.encode())
    reply = b""
    while chunk := s.recv(65536):
        reply += chunk
    s.close()
    first, body = reply.split(b"\r\n", 1)[0], reply.rsplit(b"\r\n\r\n", 1)[-1]
    return (first + b" | " + body).decode()
print("garbage:", ask("\x16\x03\x01 hello there\r\n\r\n"))
print("huge:", ask(GET + "X: " + "a" * 70000 + "\r\n\r\n"))
print("port:", ask(f"CONNECT 127.0.0.1:70000 HTTP/1.1\r\n{AUTH}\r\n"))
print("zero:", ask(f"CONNECT 127.0.0.1:0 HTTP/1.1\r\n{AUTH}\r\n"))
print("nocreds:", ask(GET + "Proxy-Authorization: Basic Y2FsbC14Onk=\r\n\r\n"))
print("slow:", ask(GET + "X-Slow: 1"))
print("good:", ask(GET + "Host: x\r\n" + AUTH + "\r\n"))
"""


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_bad_input_to_the_proxy_gets_a_clear_error_and_others_are_served(
    start: Start, mechanism: str, page_port: int, tmp_path: Path
) -> None:
    d = _daemon(start, mechanism, "allowlist", "['127.0.0.1']")
    workspace = d.home / "workspace"
    workspace.mkdir(exist_ok=True)
    (workspace / "bad.py").write_text(BAD_INPUT.replace("PORT", str(page_port)))
    with d.client(timeout=120) as c:
        output = _run(c, "python3 bad.py 2>&1")
    lines = dict(line.split(": ", 1) for line in output.splitlines() if ": " in line)
    assert "good" in lines, output
    assert lines["garbage"].startswith("HTTP/1.1 400") and "not an HTTP/1.x" in output, output
    assert lines["huge"].startswith("HTTP/1.1 431"), output
    assert lines["port"].startswith("HTTP/1.1 400") and "1 to 65535" in lines["port"], output
    assert lines["zero"].startswith("HTTP/1.1 400"), output
    assert lines["nocreds"].startswith("HTTP/1.1 407"), output
    assert lines["slow"].startswith("HTTP/1.1 408"), output
    assert " 200 OK" in lines["good"] and PAGE.decode() in output, output
    assert json.dumps(d.call("ping")["pong"]) == "true"


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_an_mcp_server_gets_the_allow_list_and_is_not_asked_for_more(
    start: Start, mechanism: str, page_port: int
) -> None:
    sandbox = {"mechanism": mechanism, "network": "allowlist", "allowed_domains": ["127.0.0.1"]}
    d = start(config=mcp_config({"web": stdio("files")}, sandbox=sandbox))
    settle(d)
    client, answers = client_answering(d, "once")
    with client:
        allowed = tool(
            client, "mcp__web__fetch", {"url": f"http://127.0.0.1:{page_port}/"}, None, 90
        )
        other = tool(client, "mcp__web__fetch", {"url": f"http://localhost:{page_port}/"}, None, 90)
    allowed, other = unmarked(allowed), unmarked(other)
    assert allowed["result"] == PAGE.decode(), allowed
    assert other["result"].startswith("error 403") and "not a tool call" in other["result"], other
    assert answers.requests == []


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("network", ["allowlist", "'off'"])
def test_no_datagram_leaves_the_sandbox(start: Start, mechanism: str, network: str) -> None:
    # a stand-in for a DNS server on the loopback: a query from the sandbox must not reach it
    listener = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    listener.bind(("127.0.0.1", 0))
    listener.setblocking(False)
    port = listener.getsockname()[1]
    d = _daemon(start, mechanism, network)
    probe = (
        'python3 -c "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); '
        f"s.sendto(b'query', ('127.0.0.1', {port})); print('sent')\" 2>&1"
    )
    with d.client(timeout=90) as c:
        output = _run(c, probe)
    try:
        # loopback delivery happens inside sendto: had it left, it would be queued already
        with pytest.raises(BlockingIOError):
            listener.recv(100)
    finally:
        listener.close()
    assert ("sent" in output) is (mechanism == "bwrap"), output  # Landlock: refused outright


def test_a_calls_credentials_end_with_the_call(start: Start) -> None:
    d = _daemon(start, "landlock", "allowlist", "['127.0.0.1']")
    with d.client(timeout=90) as c:
        proxy = urllib.parse.urlsplit(_run(c, "echo $http_proxy").strip())
    assert proxy.hostname == "127.0.0.1" and proxy.username and proxy.password
    auth = base64.b64encode(f"{proxy.username}:{proxy.password}".encode()).decode()
    assert proxy.port is not None
    with socket.create_connection(("127.0.0.1", proxy.port), 30) as s:
        s.sendall(
            f"CONNECT 127.0.0.1:9 HTTP/1.1\r\nProxy-Authorization: Basic {auth}\r\n\r\n".encode()
        )
        reply = s.recv(4096)
    assert reply.startswith(b"HTTP/1.1 407"), reply


def test_a_reload_to_allowlist_starts_the_proxy(start: Start, page_port: int) -> None:
    d = _daemon(start, "bwrap", "'on'")
    d.home.joinpath("config.yaml").write_text(
        "approvals:\n  mode: 'off'\n"
        "sandbox:\n  mechanism: bwrap\n  network: allowlist\n  allowed_domains: ['127.0.0.1']\n"
    )
    with d.client(timeout=90) as c:
        c.call("config.reload")
        assert c.call("status")["sandbox"]["network"] == "allowlist"
        proxied = _run(c, _curl(f"http://127.0.0.1:{page_port}/"))
        direct = _run(c, _curl(f"http://127.0.0.1:{page_port}/", "--noproxy '*'"))
    assert "status=200" in proxied, proxied
    assert "status=000" in direct, direct
