"""The browser tools on a real daemon: the scripted model drives a real Chromium.

A web server on 127.0.0.1 (this test's, on ``sandbox.allowed_domains``) serves a page with a
link, a form whose input echoes what is typed, console messages, an uncaught error and images.
The daemon starts Debian's ``chromium`` inside its tool sandbox, its traffic through the egress
proxy. A stand-in browser provider plugin starts its own Chromium with a DevTools port on
127.0.0.1 and is selected with ``browser.cloud_provider``. Tests that need Chromium are skipped
where none is installed (scripts/bootstrap installs it); every Chromium started here ends with
its daemon or test.
"""

from __future__ import annotations

import http.server
import json
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hermesctl.client import Client
from tests.support.approvals import client_answering
from tests.support.daemon import DaemonProcess, short_tmpdir, start_daemon
from tests.support.modelserver import ScriptedModelServer, call_tools, reply, tool_call
from tests.support.plugin_factory import write_plugin
from tests.support.tool_turns import wait_completed

needs_chromium = pytest.mark.skipif(shutil.which("chromium") is None, reason="no chromium here")

MARK_CLOSE = "</untrusted-data>"
HOME = """<!DOCTYPE html><html><head><title>Shop front</title></head><body>
<h1>Welcome to the shop</h1>
<p>Everything here is handmade.</p>
<a href="/second">Second page</a>
<img src="/logo.png" alt="Shop logo" width="10" height="10">
<form onsubmit="event.preventDefault();
  document.getElementById('out').textContent = 'Hello, ' + this.who.value + '!';">
<label for="who">Your name</label> <input id="who" name="who" type="text">
<button type="submit">Greet</button></form>
<p id="out">nobody greeted yet</p>
<script>console.log("shop ready", 42); console.warn("stock is low");
setTimeout(() => { throw new Error("basket exploded"); }, 0);</script>
</body></html>"""
SECOND = """<!DOCTYPE html><html><head><title>Second page</title></head><body>
<h1>The second page</h1><p>Reached by a click.</p></body></html>"""
PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360f8cf000000030101005d1c3d8e0000000049454e44ae426082"
)


class _Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        pages = {
            "/": (HOME.encode(), "text/html"),
            "/second": (SECOND.encode(), "text/html"),
            "/logo.png": (PNG, "image/png"),
        }
        port = self.server.server_address[1]
        elsewhere = f'<img src="http://localhost:{port}/logo.png" alt="elsewhere">'
        pages["/elsewhere"] = (
            f"<html><body><h1>Mixed</h1>{elsewhere}</body></html>".encode(),
            "text/html",
        )
        noisy = "for (let n = 0; n < 400; n++) console.log('line ' + n + ' ' + 'x'.repeat(1000));"
        pages["/noisy"] = (
            f"<html><body><script>{noisy}</script></body></html>".encode(),
            "text/html",
        )
        body, kind = pages.get(self.path, (b"not found", "text/plain"))
        self.send_response(200 if self.path in pages else 404)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def site() -> Iterator[str]:
    """The test web server's base URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _config(model: ScriptedModelServer, extra: str = "") -> str:
    return (
        f"model:\n  base_url: {model.url}\n  default: scripted-model\n"
        "sandbox:\n  allowed_domains: ['127.0.0.1']\n" + extra
    )


@pytest.fixture(scope="module")
def daemon(model: ScriptedModelServer) -> Iterator[DaemonProcess]:
    process = start_daemon(short_tmpdir("brw-"), config=_config(model))
    yield process
    process.stop()


def _chromiums(marker: str) -> list[int]:
    """Pids of running Chromium processes whose command line names ``marker``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                line = f.read().decode(errors="replace")
        except OSError:
            continue
        if "chromium" in line and marker in line:
            found.append(int(entry))
    return found


def _turn(model: ScriptedModelServer, client: Client, sid: str, *steps: Any) -> str:
    """One turn of session ``sid`` (``client`` attached): the model makes one tool call
    (``steps[0]``), then takes the further ``steps``; the tool result it was sent back."""
    name, args = steps[0]
    model.push(call_tools(tool_call(name, args)), *steps[1:], reply("done"))
    seen = len(model.requests)
    turn_id = client.call("session.send", {"session_id": sid, "message": "browse"})["turn_id"]
    wait_completed(client, turn_id, timeout=90)
    last = model.requests[seen:][-1]
    return [str(m["content"]) for m in last["messages"] if m["role"] == "tool"][-1]


def _inside(result: str, tool: str) -> Any:
    """The JSON inside a result's untrusted-data marker."""
    assert result.startswith(f"[Untrusted data from {tool}: "), result[:200]
    assert result.count(MARK_CLOSE) == 1 and result.endswith(MARK_CLOSE), result[-300:]
    return json.loads(result.split(">\n", 1)[1].rsplit("\n" + MARK_CLOSE, 1)[0])


def _session(client: Client) -> str:
    sid = str(client.call("session.create")["id"])
    client.call("session.attach", {"session_id": sid})
    return sid


def _ref(snapshot: str, role: str, name: str) -> str:
    """The ref of the element ``role "name"`` in a snapshot."""
    for line in snapshot.splitlines():
        if f'- {role} "{name}"' in line and "[ref=" in line:
            return "@" + line.split("[ref=", 1)[1].split("]", 1)[0]
    raise AssertionError(f'no {role} "{name}" in:\n{snapshot}')


Browse = Callable[..., Any]


@pytest.fixture
def browse(
    model: ScriptedModelServer, daemon: DaemonProcess, site: str
) -> Iterator[tuple[Browse, str]]:
    """A function running one browser tool call in a session of its own, and that session."""
    with daemon.client() as client:
        sid = _session(client)

        def run(name: str, args: dict[str, Any], *steps: Any) -> Any:
            result = _turn(model, client, sid, (name, args), *steps)
            return _inside(result, name) if MARK_CLOSE in result else json.loads(result)

        yield run, sid
        client.call("session.delete", {"session_id": sid})


@needs_chromium
def test_navigate_answers_title_url_and_a_compact_snapshot_inside_the_marker(
    browse: tuple[Browse, str], site: str
) -> None:
    run, _ = browse
    page = run("browser_navigate", {"url": site + "/"})
    assert page["success"] is True and page["title"] == "Shop front"
    assert page["url"] == site + "/"
    assert 'heading "Welcome to the shop"' in page["snapshot"]
    assert _ref(page["snapshot"], "link", "Second page").startswith("@e")
    assert page["element_count"] >= 3


@needs_chromium
def test_clicking_a_link_by_its_ref_opens_the_linked_page(
    browse: tuple[Browse, str], site: str
) -> None:
    run, _ = browse
    link = _ref(run("browser_navigate", {"url": site + "/"})["snapshot"], "link", "Second page")
    assert run("browser_click", {"ref": link}) == {"success": True, "clicked": link}
    snapshot = run("browser_snapshot", {})["snapshot"]
    assert 'heading "The second page"' in snapshot
    assert run("browser_back", {})["url"] == site + "/"


@needs_chromium
def test_typing_into_an_input_and_pressing_enter_shows_the_pages_answer(
    browse: tuple[Browse, str], site: str
) -> None:
    run, _ = browse
    box = _ref(run("browser_navigate", {"url": site + "/"})["snapshot"], "textbox", "Your name")
    typed = run("browser_type", {"ref": box, "text": "Ada"})
    assert typed == {"success": True, "typed": "Ada", "element": box}
    assert run("browser_press", {"key": "Enter"}) == {"success": True, "pressed": "Enter"}
    full = run("browser_snapshot", {"full": True})["snapshot"]
    assert "Hello, Ada!" in full


@needs_chromium
def test_console_messages_and_uncaught_errors_are_read_and_cleared(
    browse: tuple[Browse, str], site: str
) -> None:
    run, _ = browse
    run("browser_navigate", {"url": site + "/"})
    console = run("browser_console", {"clear": True})
    texts = [(m["type"], m["text"]) for m in console["console_messages"]]
    assert ("log", "shop ready 42") in texts and ("warning", "stock is low") in texts
    assert any("basket exploded" in e["message"] for e in console["js_errors"])
    assert console["total_errors"] == len(console["js_errors"]) >= 1
    assert run("browser_console", {})["total_messages"] == 0
    evaluated = run("browser_console", {"expression": "document.title.length"})
    assert evaluated["result"] == len("Shop front") and evaluated["result_type"] == "int"


@needs_chromium
def test_a_console_too_long_for_one_result_keeps_its_newest_lines_inside_the_marker(
    browse: tuple[Browse, str], site: str
) -> None:
    run, _ = browse
    run("browser_navigate", {"url": site + "/noisy"})
    console = run("browser_console", {})  # parsed inside a whole marker: nothing clipped it
    assert "oldest entries were left out" in console["truncated"]
    texts = [m["text"] for m in console["console_messages"]]
    assert 0 < len(texts) < 400 and texts[-1].startswith("line 399 ")


@needs_chromium
def test_images_of_the_page_are_listed_with_url_and_alt_text(
    browse: tuple[Browse, str], site: str
) -> None:
    run, _ = browse
    run("browser_navigate", {"url": site + "/"})
    images = run("browser_get_images", {})
    assert images["count"] == 1
    assert images["images"][0] | {} == {
        "src": site + "/logo.png",
        "alt": "Shop logo",
        "width": 1,
        "height": 1,
    }


@needs_chromium
def test_a_screenshot_goes_to_the_vision_model_with_the_question(
    browse: tuple[Browse, str], site: str, model: ScriptedModelServer
) -> None:
    run, _ = browse
    run("browser_navigate", {"url": site + "/"})
    seen = len(model.requests)
    looked = run("browser_vision", {"question": "Is there a form?"}, reply("A greeting form."))
    assert looked["success"] is True and "A greeting form." in looked["analysis"]
    assert Path(looked["screenshot_path"]).read_bytes().startswith(b"\x89PNG")
    asked = model.requests[seen + 1]["messages"][-1]["content"]
    assert "Is there a form?" in asked[0]["text"] and asked[1]["type"] == "image_url"


@needs_chromium
def test_a_ref_not_in_the_snapshot_is_a_clear_error(browse: tuple[Browse, str], site: str) -> None:
    run, _ = browse
    run("browser_navigate", {"url": site + "/"})
    missing = run("browser_click", {"ref": "@e999"})
    assert missing["success"] is False
    assert "no element @e999" in missing["error"] and "browser_snapshot" in missing["error"]


@needs_chromium
def test_arguments_the_model_got_wrong_are_refused_with_a_sentence(
    browse: tuple[Browse, str], site: str
) -> None:
    run, _ = browse
    local = run("browser_navigate", {"url": "file:///etc/passwd"})
    assert local == {"success": False, "error": local["error"]}
    assert "only http:// and https:// URLs" in local["error"]
    run("browser_navigate", {"url": site + "/"})
    scroll = run("browser_scroll", {"direction": "sideways"})
    assert scroll["success"] is False and "Use 'up' or 'down'" in scroll["error"]
    press = run("browser_press", {"key": "Hyper"})
    assert press["success"] is False and "unknown key 'Hyper'" in press["error"]
    assert run("browser_type", {"ref": "@e1"})["error"] == "'text' must be a string"


@needs_chromium
def test_a_navigation_to_a_host_the_person_denies_is_an_error_naming_it(
    model: ScriptedModelServer, daemon: DaemonProcess, site: str
) -> None:
    away = site.replace("127.0.0.1", "localhost") + "/"
    client, answers = client_answering(daemon, "deny")
    with client:
        sid = _session(client)
        result = json.loads(_turn(model, client, sid, ("browser_navigate", {"url": away})))
        client.call("session.delete", {"session_id": sid})
    assert result["success"] is False
    assert "network access to localhost was not approved" in result["error"]
    [asked] = answers.requests
    assert asked["pattern_key"] == "network:localhost"


@needs_chromium
def test_what_the_page_loads_goes_through_the_egress_policy_too(
    model: ScriptedModelServer, daemon: DaemonProcess, site: str
) -> None:
    client, answers = client_answering(daemon, "deny")
    with client:
        sid = _session(client)
        _turn(model, client, sid, ("browser_navigate", {"url": site + "/elsewhere"}))
        images = _inside(
            _turn(model, client, sid, ("browser_get_images", {})), "browser_get_images"
        )
        client.call("session.delete", {"session_id": sid})
    [image] = images["images"]
    assert image["alt"] == "elsewhere" and image["width"] == 0  # refused: never loaded
    assert [a["pattern_key"] for a in answers.requests] == ["network:localhost"]


@needs_chromium
def test_the_sessions_chromium_runs_sandboxed_and_is_gone_after_the_session_is_deleted(
    model: ScriptedModelServer, daemon: DaemonProcess, site: str
) -> None:
    marker = f"--user-data-dir={daemon.home}/sandbox-tmp"
    before = set(_chromiums(marker))
    with daemon.client() as client:
        sid = _session(client)
        _turn(model, client, sid, ("browser_navigate", {"url": site + "/"}))
        started = set(_chromiums(marker)) - before
        assert started, "no Chromium of this daemon is running"
        assert daemon.call("status")["browser"]["backend"] == "local"
        client.call("session.delete", {"session_id": sid})
    assert _gone(started, marker)


def _gone(pids: set[int], marker: str) -> bool:
    """Whether every one of ``pids`` has ended within 20 seconds."""
    deadline = time.monotonic() + 20
    while set(_chromiums(marker)) & pids and time.monotonic() < deadline:
        time.sleep(0.2)
    return not set(_chromiums(marker)) & pids


def _browsing_daemon(
    model: ScriptedModelServer, site: str, extra: str = ""
) -> tuple[Any, set[int]]:
    """A daemon of its own whose session has opened a page, and its Chromium's pids."""
    process = start_daemon(short_tmpdir("brw-"), config=_config(model, extra))
    try:
        with process.client() as client:
            _turn(model, client, _session(client), ("browser_navigate", {"url": site + "/"}))
    except BaseException:
        process.stop()
        raise
    return process, set(_chromiums(f"--user-data-dir={process.home}/sandbox-tmp"))


@needs_chromium
def test_an_idle_browser_is_closed_after_the_inactivity_timeout(
    model: ScriptedModelServer, site: str
) -> None:
    process, pids = _browsing_daemon(model, site, "browser:\n  inactivity_timeout: 1\n")
    try:
        assert pids and _gone(pids, f"--user-data-dir={process.home}/sandbox-tmp")
    finally:
        process.stop()


@needs_chromium
def test_every_browser_is_closed_when_the_daemon_stops(
    model: ScriptedModelServer, site: str
) -> None:
    process, pids = _browsing_daemon(model, site)
    assert process.stop() == 0
    assert pids and _gone(pids, f"--user-data-dir={process.home}/sandbox-tmp")


@needs_chromium
def test_under_landlock_the_browser_runs_as_under_bubblewrap(
    model: ScriptedModelServer, site: str
) -> None:
    process = start_daemon(short_tmpdir("brw-"), config=_config(model, "  mechanism: landlock\n"))
    try:
        if process.call("status")["sandbox"]["mechanism"] != "landlock":
            pytest.skip("this kernel has no Landlock ABI 6")
        with process.client() as client:
            sid = _session(client)
            result = _turn(model, client, sid, ("browser_navigate", {"url": site + "/"}))
            client.call("session.delete", {"session_id": sid})
    finally:
        process.stop()
    assert _inside(result, "browser_navigate")["title"] == "Shop front"


def test_without_chromium_the_tools_are_unavailable_and_say_why(
    model: ScriptedModelServer,
) -> None:
    config = _config(model, "browser:\n  chromium: /nonexistent/chromium\n")
    process = start_daemon(short_tmpdir("brw-"), config=config)
    try:
        tools = {t["name"]: t for t in process.call("tools.list")["tools"]}
    finally:
        process.stop()
    assert tools["browser_navigate"]["available"] is False
    assert "no Chromium found" in tools["browser_navigate"]["reason"]


PROVIDER = """
import json, os, pathlib, shutil, subprocess, tempfile, time

HERE = pathlib.Path(__file__).parent


class StandIn:
    name = "standin"

    def __init__(self):
        self.running = {}

    def is_available(self):
        return True

    def is_configured(self):
        return True

    def create_session(self, task_id):
        profile = tempfile.mkdtemp(prefix="standin-")
        proc = subprocess.Popen(
            [shutil.which("chromium"), "--headless", "--no-sandbox", "--disable-gpu",
             "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
             f"--user-data-dir={profile}", "--no-first-run", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port_file = pathlib.Path(profile) / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not port_file.exists() or len(port_file.read_text().split()) < 2:
            if time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError("chromium did not start")
            time.sleep(0.05)
        port, path = port_file.read_text().split()[:2]
        self.running[profile] = proc
        with open(HERE / "calls.jsonl", "a") as f:
            f.write(json.dumps({"create": task_id, "pid": proc.pid}) + "\\n")
        return {"session_name": profile, "bb_session_id": profile,
                "cdp_url": f"ws://127.0.0.1:{port}{path}", "features": {}}

    def close_session(self, session_id):
        proc = self.running.pop(session_id)
        proc.kill()
        proc.wait()
        shutil.rmtree(session_id, ignore_errors=True)
        with open(HERE / "calls.jsonl", "a") as f:
            f.write(json.dumps({"close": session_id}) + "\\n")
        return True

    def emergency_cleanup(self, session_id):
        self.close_session(session_id)


def register(ctx):
    ctx.register_browser_provider(StandIn())
"""


@needs_chromium
def test_a_selected_plugin_browser_provider_is_listed_and_drives_the_tools(
    model: ScriptedModelServer, site: str
) -> None:
    home = short_tmpdir("brw-")
    write_plugin(home / "plugins", "standin", PROVIDER)
    config = _config(model, "browser:\n  cloud_provider: standin\n")
    config += "plugins:\n  enabled: [standin]\n"
    process = start_daemon(home, config=config)
    try:
        [listed] = process.call("plugins.info", {"name": "standin"})["providers"]
        assert listed["kind"] == "browser" and listed["status"].startswith("in use: ")
        assert process.call("status")["browser"] == {"backend": "standin", "open": 0}
        with process.client() as client:
            sid = _session(client)
            result = _turn(model, client, sid, ("browser_navigate", {"url": site + "/"}))
            assert _inside(result, "browser_navigate")["title"] == "Shop front"
            assert process.call("status")["browser"] == {"backend": "standin", "open": 1}
            client.call("session.delete", {"session_id": sid})
        calls_file = home / "plugins" / "standin" / "calls.jsonl"
        deadline = time.monotonic() + 20
        while "close" not in calls_file.read_text() and time.monotonic() < deadline:
            time.sleep(0.2)
        calls = [json.loads(line) for line in calls_file.read_text().splitlines()]
        assert [next(iter(c)) for c in calls] == ["create", "close"]
        assert calls[0]["create"] == sid
    finally:
        process.stop()
        for line in (home / "plugins" / "standin" / "calls.jsonl").read_text().splitlines():
            pid = json.loads(line).get("pid")
            if pid:
                with __import__("contextlib").suppress(ProcessLookupError):
                    os.kill(pid, 9)


BROKEN = """
class Broken:
    name = "broken"

    def is_available(self):
        return True

    def create_session(self, task_id):
        raise RuntimeError("the cloud is down")

    def close_session(self, session_id):
        return True

    def emergency_cleanup(self, session_id):
        pass


def register(ctx):
    ctx.register_browser_provider(Broken())
"""


def test_a_provider_that_cannot_create_a_session_is_a_clear_error(
    model: ScriptedModelServer, site: str
) -> None:
    home = short_tmpdir("brw-")
    write_plugin(home / "plugins", "broken", BROKEN)
    process = start_daemon(home, config=_config(model, "browser:\n  cloud_provider: broken\n"))
    try:
        with process.client() as client:
            sid = _session(client)
            result = _turn(model, client, sid, ("browser_navigate", {"url": site + "/"}))
        assert json.loads(result) == {
            "success": False,
            "error": "browser provider 'broken' could not create a session: the cloud is down",
        }
        assert process.call("ping") is not None  # and the daemon serves on
    finally:
        process.stop()
