"""Images on a real daemon: sent with ``session.send`` (bytes or data URLs) and from
``hermesctl chat --image`` and ``/image``, they reach the model request as OpenAI ``image_url``
parts, stay in the session (history, later turns, forks) without being searched, and bad ones are
refused whole; ``vision_analyze`` reads a workspace file, an attachment or a URL (through the
egress policy) with an auxiliary vision model, or the main one."""

from __future__ import annotations

import base64
import http.server
import json
import os
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from hermesd.rpc.protocol import Codes, RpcError
from tests.support.approvals import client_answering
from tests.support.daemon import (
    DaemonProcess,
    follow_turn,
    run_hermesctl,
    short_tmpdir,
    start_daemon,
)
from tests.support.modelserver import (
    ScriptedModelServer,
    call_tools,
    model_config,
    reply,
    tool_call,
)
from tests.support.terminal import Terminal

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + bytes(range(200))
JPEG = b"\xff\xd8\xff\xe0" + b"jpeg-body" * 20
PNG_URL = "data:image/png;base64," + base64.b64encode(PNG).decode()


@pytest.fixture(scope="module")
def daemon(model: ScriptedModelServer) -> Iterator[DaemonProcess]:
    process = start_daemon(short_tmpdir("img-"), config=model_config(model.url))
    yield process
    process.stop()


def _images_sent(request: dict[str, Any]) -> list[str]:
    """The image URLs of the request's last user message."""
    user = [m for m in request["messages"] if m["role"] == "user"][-1]
    content = user["content"]
    if isinstance(content, str):
        return []
    return [p["image_url"]["url"] for p in content if p.get("type") == "image_url"]


def _send(daemon: DaemonProcess, sid: str, message: str, images: Any) -> dict[str, Any]:
    with daemon.client() as c:
        c.call("session.attach", {"session_id": sid})
        params = {"session_id": sid, "message": message, "images": images}
        turn = c.call("session.send", params)["turn_id"]
        return {"events": follow_turn(c, turn)}


def test_images_reach_the_model_as_image_url_parts_and_stay_in_the_session(
    model: ScriptedModelServer, daemon: DaemonProcess
) -> None:
    seen = len(model.requests)
    model.push(reply("a red square"), reply("still the square"))
    sid = daemon.call("session.create", {"attach": False})["id"]
    # raw bytes, and a data URL that lies about its type: the bytes decide
    lying = "data:image/gif;base64," + base64.b64encode(JPEG).decode()
    sent = _send(daemon, sid, "what is this?", [{"data": PNG, "name": "a.png"}, lying])
    started = sent["events"][0]
    assert started["type"] == "turn.started"
    assert started["images"] == [
        {"mime": "image/png", "bytes": len(PNG)},
        {"mime": "image/jpeg", "bytes": len(JPEG)},
    ]
    first = model.requests[seen]
    user = [m for m in first["messages"] if m["role"] == "user"][-1]
    assert user["content"][0] == {"type": "text", "text": "what is this?"}
    jpeg_url = "data:image/jpeg;base64," + base64.b64encode(JPEG).decode()
    assert _images_sent(first) == [PNG_URL, jpeg_url]
    # the next turn's request still carries them (the history replayed)
    _send(daemon, sid, "and now?", None)
    later = model.requests[seen + 1]
    earlier_user = next(m for m in later["messages"] if m["role"] == "user")
    assert [p["image_url"]["url"] for p in earlier_user["content"][1:]] == [PNG_URL, jpeg_url]
    # history and export keep them; a fork copies them
    history = daemon.call("session.history", {"session_id": sid})["messages"]
    assert history[0]["images"] == [
        {"mime": "image/png", "bytes": len(PNG), "url": PNG_URL},
        {"mime": "image/jpeg", "bytes": len(JPEG), "url": jpeg_url},
    ]
    fork = daemon.call("session.fork", {"session_id": sid})
    forked = daemon.call("session.history", {"session_id": fork["id"]})["messages"]
    assert forked[0]["images"] == history[0]["images"]
    socket = ["--socket", str(daemon.socket)]
    exported = run_hermesctl([*socket, "sessions", "export", sid, "--format", "json"])
    assert exported.returncode == 0, exported.stderr
    assert json.loads(exported.stdout)["messages"][0]["images"][0]["url"] == PNG_URL
    markdown = run_hermesctl([*socket, "sessions", "export", sid]).stdout
    assert f"![image 1 (image/png, {len(PNG)} bytes)]({PNG_URL})" in markdown
    shown = run_hermesctl([*socket, "sessions", "show", sid]).stdout
    assert f"[user] 📎 image/png image, {len(PNG)} bytes" in shown
    # the bytes are not searched; the text is
    fragment = base64.b64encode(PNG).decode()[20:40]
    hits = daemon.call("session.search", {"query": f'"{fragment}"', "session_id": sid})["hits"]
    assert hits == []
    assert daemon.call("session.search", {"query": "what", "session_id": sid})["hits"]


@pytest.mark.parametrize(
    ("images", "says"),
    [
        ([b"GIF8 not really"], "image 1 is not a PNG, JPEG, GIF or WebP image"),
        ([{"data": b"hello", "name": "notes.txt"}], "image 1 (notes.txt) is not a PNG"),
        ([PNG, b"\x89PNG\r\n\x1a\n" + b"x" * (4 * 1024 * 1024)], "image 2 is 4,194,312 bytes"),
        ([42], "image 1 must be bytes, a data: URL"),
        (["https://example.com/cat.png"], "image 1 is not a base64 data: URL"),
        (["data:image/png;base64,@@@@"], "image 1 is not valid base64"),
        ([PNG] * 9, "9 images; a message may have 8"),
        ([b""], "image 1 is empty"),
    ],
)
def test_bad_images_are_refused_and_nothing_is_stored(
    daemon: DaemonProcess, images: Any, says: str
) -> None:
    sid = daemon.call("session.create", {"attach": False})["id"]
    with daemon.client() as c, pytest.raises(RpcError) as caught:
        c.call("session.send", {"session_id": sid, "message": "look", "images": images})
    assert caught.value.code == Codes.INVALID_PARAMS
    assert says in caught.value.message, caught.value.message
    assert daemon.call("session.get", {"session_id": sid})["message_count"] == 0


def test_images_must_be_a_list(daemon: DaemonProcess) -> None:
    sid = daemon.call("session.create", {"attach": False})["id"]
    with daemon.client() as c, pytest.raises(RpcError) as caught:
        c.call("session.send", {"session_id": sid, "message": "look", "images": PNG_URL})
    assert caught.value.code == Codes.INVALID_PARAMS


# --- hermesctl chat --------------------------------------------------------------------------


def test_chat_image_option_sends_the_file(
    model: ScriptedModelServer, daemon: DaemonProcess, tmp_path: Any
) -> None:
    shot = tmp_path / "shot.png"
    shot.write_bytes(PNG)
    seen = len(model.requests)
    model.push(reply("I see it"))
    done = run_hermesctl(
        ["--socket", str(daemon.socket), "chat", "--image", str(shot), "-m", "describe"]
    )
    assert done.returncode == 0, done.stderr
    assert _images_sent(model.requests[seen]) == [PNG_URL]


def test_chat_image_option_refuses_what_it_cannot_send(
    daemon: DaemonProcess, tmp_path: Any
) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("not a picture")
    bad = run_hermesctl(
        ["--socket", str(daemon.socket), "chat", "--image", str(notes), "-m", "describe"]
    )
    assert bad.returncode != 0
    assert "image 1 (notes.txt) is not a PNG, JPEG, GIF or WebP image" in bad.stderr
    missing = run_hermesctl(
        ["--socket", str(daemon.socket), "chat", "--image", str(tmp_path / "no.png"), "-m", "x"]
    )
    assert missing.returncode != 0
    assert "--image: cannot read" in missing.stderr and "No such file" in missing.stderr


def test_slash_image_attaches_to_the_next_message(
    model: ScriptedModelServer, daemon: DaemonProcess, tmp_path: Any
) -> None:
    shot = tmp_path / "screen.png"
    shot.write_bytes(PNG)
    notes = tmp_path / "notes.txt"
    notes.write_text("words")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMES_")}
    env.update(HERMES_HOME=str(daemon.home), TERM="xterm")
    argv = [sys.executable, "-m", "hermesctl", "--socket", str(daemon.socket), "chat"]
    t = Terminal(argv, env)
    try:
        t.expect("› ")
        t.wait_reading()
        t.sendline(f"/image {shot}")
        t.expect(r"📎 screen.png \(\d+ bytes\) goes with your next message")
        t.wait_reading()
        seen = len(model.requests)
        model.push(reply("a screenshot"), reply("plain"), reply("again"))
        t.sendline("what is on my screen?")
        t.expect("a screenshot")
        t.expect("› ")
        t.wait_reading()
        t.sendline("and this?")  # the image went with the message before, not this one
        t.expect("plain")
        t.expect("› ")
        t.wait_reading()
        t.sendline(f"/image {notes}")  # a text file: the daemon refuses it, the text comes back
        t.wait_reading()
        t.sendline("look")
        t.expect(r"image 1 \(notes.txt\) is not a PNG")
        t.expect("your message is back")
        t.expect("› look")
        t.wait_reading()
        t.sendline("")
        t.expect("again")
        t.sendline("/quit")
        assert t.wait() == 0
    finally:
        t.close()
    assert _images_sent(model.requests[seen]) == [PNG_URL]
    assert _images_sent(model.requests[seen + 1]) == []
    assert _images_sent(model.requests[seen + 2]) == []


# --- vision_analyze ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def vision_model() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer(model="vision-model") as server:
        yield server


@pytest.fixture(scope="module")
def visiond(
    model: ScriptedModelServer, vision_model: ScriptedModelServer
) -> Iterator[DaemonProcess]:
    config = model_config(model.url) + (
        f"auxiliary:\n  vision:\n    base_url: {vision_model.url}\n    model: vision-model\n"
        "approvals:\n  timeout: 20\n"
    )
    process = start_daemon(short_tmpdir("vis-"), config=config)
    (process.home / "workspace").mkdir(exist_ok=True)
    yield process
    process.stop()


def _analyse(
    model: ScriptedModelServer, daemon: DaemonProcess, args: dict[str, Any], images: Any = None
) -> dict[str, Any]:
    """One turn whose model calls vision_analyze with ``args``: the tool's parsed result."""
    seen = len(model.requests)
    model.push(call_tools(tool_call("vision_analyze", args)), reply("done"))
    sid = daemon.call("session.create", {"attach": False})["id"]
    with daemon.client() as c:
        params: dict[str, Any] = {"session_id": sid, "message": "look", "wait": True}
        if images:
            params["images"] = images
        assert c.call("session.send", params)["status"] == "completed"
    last = model.requests[seen:][-1]
    result: dict[str, Any] = json.loads(
        [m["content"] for m in last["messages"] if m["role"] == "tool"][-1]
    )
    return result


def test_vision_analyze_reads_a_workspace_file_with_the_auxiliary_model(
    model: ScriptedModelServer, vision_model: ScriptedModelServer, visiond: DaemonProcess
) -> None:
    (visiond.home / "workspace" / "chart.png").write_bytes(PNG)
    seen = len(vision_model.requests)
    vision_model.push(reply("A bar chart with three bars."))
    result = _analyse(model, visiond, {"image_url": "chart.png", "question": "How many bars?"})
    assert result["success"] is True
    assert result["analysis"].startswith("[Untrusted data from image:chart.png")
    assert "\nA bar chart with three bars.\n</untrusted-data>" in result["analysis"]
    asked = vision_model.requests[seen]
    assert asked["model"] == "vision-model"
    parts = asked["messages"][0]["content"]
    assert parts[0]["type"] == "text" and parts[0]["text"].endswith("How many bars?")
    assert parts[1] == {"type": "image_url", "image_url": {"url": PNG_URL}}


def test_vision_analyze_reads_an_image_attached_to_the_conversation(
    model: ScriptedModelServer, vision_model: ScriptedModelServer, visiond: DaemonProcess
) -> None:
    seen = len(vision_model.requests)
    vision_model.push(reply("A JPEG photo."))
    result = _analyse(
        model, visiond, {"image_url": "attachment:last", "question": "What?"}, images=[JPEG]
    )
    assert result == {"success": True, "analysis": "A JPEG photo."}  # the person's own image
    url = vision_model.requests[seen]["messages"][0]["content"][1]["image_url"]["url"]
    assert url == "data:image/jpeg;base64," + base64.b64encode(JPEG).decode()


class _Image(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = PNG if self.path == "/cat.png" else b"<html>not an image</html>"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def image_server() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Image)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_vision_analyze_fetches_a_url(
    model: ScriptedModelServer,
    vision_model: ScriptedModelServer,
    visiond: DaemonProcess,
    image_server: str,
) -> None:
    seen = len(vision_model.requests)
    vision_model.push(reply("A cat."))
    result = _analyse(model, visiond, {"image_url": f"{image_server}/cat.png", "question": "?"})
    assert result["success"] is True and "\nA cat.\n</untrusted-data>" in result["analysis"]
    assert vision_model.requests[seen]["messages"][0]["content"][1]["image_url"]["url"] == PNG_URL
    page = _analyse(model, visiond, {"image_url": f"{image_server}/page", "question": "?"})
    assert page["success"] is False and "is not a PNG, JPEG, GIF or WebP image" in page["error"]


def test_under_an_allowlist_a_url_goes_through_the_egress_proxy_and_is_asked(
    model: ScriptedModelServer,
    vision_model: ScriptedModelServer,
    image_server: str,
    start: Any,
) -> None:
    config = model_config(model.url) + (
        f"auxiliary:\n  vision:\n    base_url: {vision_model.url}\n    model: vision-model\n"
        "sandbox:\n  network: allowlist\n"
    )
    d = start(short_tmpdir("vis-"), config=config)
    seen = len(model.requests)
    model.push(
        call_tools(
            tool_call("vision_analyze", {"image_url": f"{image_server}/cat.png", "question": "?"})
        ),
        reply("done"),
    )
    client, answering = client_answering(d, "deny")
    sid = client.call("session.create")["id"]
    finished = client.call("session.send", {"session_id": sid, "message": "look", "wait": True})
    assert finished["status"] == "completed"
    assert answering.requests and answering.requests[0]["tool"] == "network"
    assert "127.0.0.1" in answering.requests[0]["description"]
    result = json.loads(
        [m["content"] for m in model.requests[seen:][-1]["messages"] if m["role"] == "tool"][-1]
    )
    assert result["success"] is False and "HTTP 403" in result["error"]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ({"image_url": "/etc/hostname", "question": "?"}, "is outside the workspace"),
        ({"image_url": "../../etc/passwd", "question": "?"}, "is outside the workspace"),
        ({"image_url": "notes.txt", "question": "?"}, "notes.txt is not a PNG"),
        ({"image_url": "missing.png", "question": "?"}, "cannot read"),
        ({"image_url": "big.png", "question": "?"}, "larger than 10 MiB"),
        ({"image_url": 7, "question": "?"}, "image_url must be a non-empty string"),
        ({"image_url": "chart.png", "question": ["?"]}, "question must be a string"),
        ({"image_url": "attachment:3", "question": "?"}, "no image has been attached"),
        ({"image_url": "ftp://example.com/x.png", "question": "?"}, "only http(s) and data:"),
        ({"image_url": "data:image/png;base64,%%%", "question": "?"}, "not valid base64"),
    ],
)
def test_vision_analyze_refuses_bad_input(
    model: ScriptedModelServer, visiond: DaemonProcess, args: dict[str, Any], says: str
) -> None:
    workspace = visiond.home / "workspace"
    (workspace / "notes.txt").write_text("words")
    (workspace / "chart.png").write_bytes(PNG)
    big = workspace / "big.png"
    if not big.exists():
        big.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * (10 * 1024 * 1024 + 1))
    result = _analyse(model, visiond, args)
    assert result["success"] is False
    assert says in result["error"], result


def test_vision_analyze_uses_the_main_model_without_an_auxiliary_one(
    model: ScriptedModelServer, daemon: DaemonProcess
) -> None:
    seen = len(model.requests)
    model.push(
        call_tools(tool_call("vision_analyze", {"image_url": PNG_URL, "question": "Colour?"})),
        reply("It is red."),  # the vision request, to the main model
        reply("done"),
    )
    sid = daemon.call("session.create", {"attach": False})["id"]
    with daemon.client() as c:
        c.call("session.send", {"session_id": sid, "message": "look", "wait": True})
    vision_request = model.requests[seen + 1]
    assert vision_request["messages"][0]["content"][1]["image_url"]["url"] == PNG_URL
    final = model.requests[seen + 2]
    result = json.loads([m["content"] for m in final["messages"] if m["role"] == "tool"][-1])
    assert result["success"] is True and "\nIt is red.\n</untrusted-data>" in result["analysis"]
    usage = daemon.call("usage.get", {"session_id": sid})
    assert usage["totals"]["requests"] >= 3, usage  # the vision request is counted too


def test_retry_sends_the_images_again(model: ScriptedModelServer, daemon: DaemonProcess) -> None:
    seen = len(model.requests)
    model.push(reply("first try"), reply("second try"))
    sid = daemon.call("session.create", {"attach": False})["id"]
    _send(daemon, sid, "what is this?", [PNG])
    with daemon.client() as c:
        c.call("session.attach", {"session_id": sid})
        result = c.call("command.run", {"line": "/retry", "session_id": sid})
        follow_turn(c, result["turn_id"])
    assert _images_sent(model.requests[seen + 1]) == [PNG_URL]


def test_a_config_reload_moves_vision_analyze_to_the_auxiliary_model(
    model: ScriptedModelServer, vision_model: ScriptedModelServer, start: Any
) -> None:
    d = start(short_tmpdir("vis-"), config=model_config(model.url))
    before = len(vision_model.requests)
    (d.home / "config.yaml").write_text(
        model_config(model.url)
        + f"auxiliary:\n  vision:\n    base_url: {vision_model.url}\n    model: vision-model\n"
    )
    d.call("config.reload")
    vision_model.push(reply("Seen by the auxiliary model."))
    result = _analyse(model, d, {"image_url": PNG_URL, "question": "?"})
    assert result["success"] is True and "Seen by the auxiliary model." in result["analysis"]
    assert len(vision_model.requests) == before + 1
