"""``hermesctl acp`` driven by the ACP SDK's own client side, against a real hermesd.

Each test spawns ``python -m hermesctl --socket … acp`` with ``acp.spawn_agent_process`` (the
SDK's client connection) and talks to it as an editor would: initialize, new and loaded
sessions, streamed prompts with tool calls and a plan, permission requests answered in the
editor or elsewhere, cancel. The model is the scripted one.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import acp
import pytest
from acp import schema

from tests.support.approvals import wait_pending
from tests.support.daemon import (
    DaemonProcess,
    checkout_pythonpath,
    run_hermesctl,
    short_tmpdir,
    start_daemon,
)
from tests.support.modelserver import (
    ScriptedModelServer,
    call_tools,
    http_error,
    model_config,
    reply,
    tool_call,
)

PIXEL = (  # a 1x1 PNG
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)
PLAN = [
    {"id": "1", "content": "Read the failing test", "status": "completed"},
    {"id": "2", "content": "Fix the parser", "status": "in_progress"},
    {"id": "3", "content": "Drop the old code", "status": "cancelled"},
]


@pytest.fixture(scope="module")
def acpd(model: ScriptedModelServer) -> Iterator[DaemonProcess]:
    daemon = start_daemon(
        short_tmpdir(),
        config=model_config(model.url, timeout=30, max_retries=1, retry_max_wait=0.05)
        + "approvals:\n  timeout: 60\n",
    )
    yield daemon
    daemon.stop()


class Editor:
    """The editor's side: records updates; answers permission requests with ``answer``
    (None: waits until the request is withdrawn with ``$/cancel_request``)."""

    def __init__(self, answer: str | None = "once") -> None:
        self.answer = answer
        self.updates: list[tuple[str, Any]] = []
        self.permissions: list[schema.RequestPermissionRequest] = []
        self.received: list[dict[str, Any]] = []  # every raw JSON-RPC message from the agent
        self.withdrawn = asyncio.Event()
        self.seen = asyncio.Event()  # set on every update

    def observe(self, event: Any) -> None:
        if event.direction.value == "incoming":
            self.received.append(event.message)
            if event.message.get("method") == "$/cancel_request":
                self.withdrawn.set()

    async def request_permission(
        self, session_id: str, tool_call: Any, options: list[Any], **kwargs: Any
    ) -> schema.RequestPermissionResponse:
        self.permissions.append(
            schema.RequestPermissionRequest(
                session_id=session_id, tool_call=tool_call, options=options
            )
        )
        if self.answer is None:
            await self.withdrawn.wait()
            return schema.RequestPermissionResponse(
                outcome=schema.DeniedOutcome(outcome="cancelled")
            )
        return schema.RequestPermissionResponse(
            outcome=schema.AllowedOutcome(option_id=self.answer, outcome="selected")
        )

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append((session_id, update))
        self.seen.set()

    def of(self, kind: type) -> list[Any]:
        return [u for _, u in self.updates if isinstance(u, kind)]

    def text(self) -> str:
        return "".join(u.content.text for u in self.of(schema.AgentMessageChunk))


def _spawn(daemon: DaemonProcess, editor: Editor) -> Any:
    env = {"PYTHONPATH": checkout_pythonpath(None), "PATH": "/usr/bin:/bin"}
    return acp.spawn_agent_process(
        editor,  # type: ignore[arg-type]
        sys.executable,
        "-m",
        "hermesctl",
        "--socket",
        str(daemon.socket),
        "acp",
        env=env,
        observers=[editor.observe],
    )


async def _start(conn: Any) -> schema.InitializeResponse:
    return await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)  # type: ignore[no-any-return]


def prompt_once(
    daemon: DaemonProcess,
    editor: Editor,
    *blocks: Any,
    alongside: Callable[[], None] | None = None,
) -> tuple[str, schema.PromptResponse]:
    """Spawn the bridge, open a new session and send one prompt (``alongside`` runs on a
    thread meanwhile); the session id and the prompt's answer."""

    async def run() -> tuple[str, schema.PromptResponse]:
        async with _spawn(daemon, editor) as (conn, _):
            await _start(conn)
            session = await conn.new_session(cwd="/tmp", mcp_servers=[])
            other = asyncio.ensure_future(asyncio.to_thread(alongside or (lambda: None)))
            done = await conn.prompt(session_id=session.session_id, prompt=list(blocks))
            await other
            return session.session_id, done

    return asyncio.run(asyncio.wait_for(run(), 60))  # a request never withdrawn waits on


def _victim(daemon: DaemonProcess) -> Path:
    workspace = daemon.home / "workspace"  # the sandbox lets a command delete only there
    workspace.mkdir(exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="victim-", dir=workspace))


def clean_up(
    daemon: DaemonProcess,
    model: ScriptedModelServer,
    editor: Editor,
    alongside: Callable[[], None] | None = None,
) -> tuple[Path, schema.PromptResponse]:
    """A prompt whose turn runs ``rm -r`` on a fresh directory (asking for approval)."""
    victim = _victim(daemon)
    model.push(call_tools(tool_call("terminal", {"command": f"rm -r {victim}"})), reply("Done."))
    _, done = prompt_once(daemon, editor, acp.text_block("clean up"), alongside=alongside)
    return victim, done


def test_initialize_says_what_the_bridge_does(acpd: DaemonProcess) -> None:
    async def run() -> schema.InitializeResponse:
        async with _spawn(acpd, Editor()) as (conn, _):
            return await _start(conn)

    init = asyncio.run(run())
    caps = init.agent_capabilities
    assert init.protocol_version == acp.PROTOCOL_VERSION
    assert caps is not None and caps.load_session is True
    assert caps.prompt_capabilities is not None
    assert caps.prompt_capabilities.image is True  # session.send takes images
    assert caps.prompt_capabilities.audio is False
    assert caps.prompt_capabilities.embedded_context is True
    sessions = caps.session_capabilities
    assert sessions is not None and sessions.list is not None and sessions.fork is not None
    assert sessions.resume is not None and sessions.close is not None
    assert init.agent_info is not None and init.agent_info.name == "hermesd"


def test_a_prompt_streams_text_a_tool_call_and_the_plan_then_load_replays_it(
    acpd: DaemonProcess, model: ScriptedModelServer
) -> None:
    model.push(call_tools(tool_call("todo", {"todos": PLAN})), reply("Planned the work."))
    editor = Editor()
    sid, done = prompt_once(acpd, editor, acp.text_block("make a plan"))
    assert done.stop_reason == "end_turn"
    assert done.usage is not None and done.usage.total_tokens > 0
    turn = acpd.call("session.get", {"session_id": sid})
    assert done.usage.total_tokens == turn["total_tokens"]  # its only turn
    assert editor.text() == "Planned the work."
    [started] = editor.of(schema.ToolCallStart)
    assert started.title.startswith("todo") and started.status == "in_progress"
    assert started.raw_input == {"todos": PLAN}
    [finished] = editor.of(schema.ToolCallProgress)
    assert finished.tool_call_id == started.tool_call_id and finished.status == "completed"
    [plan] = editor.of(schema.AgentPlanUpdate)
    assert [(e.content, e.status) for e in plan.entries] == [
        ("Read the failing test", "completed"),
        ("Fix the parser", "in_progress"),
        ("(cancelled) Drop the old code", "completed"),
    ]
    assert not editor.of(schema.UserMessageChunk)  # the editor shows its own prompt

    # another editor window loads the session: its history comes back as updates
    second = Editor()

    async def load() -> list[schema.SessionInfo]:
        async with _spawn(acpd, second) as (conn, _):
            await _start(conn)
            await conn.load_session(cwd="/tmp", session_id=sid, mcp_servers=[])
            listed = await conn.list_sessions()
            return list(listed.sessions)

    listed = asyncio.run(load())
    assert [u.content.text for u in second.of(schema.UserMessageChunk)] == ["make a plan"]
    assert second.text() == "Planned the work."
    [replayed] = second.of(schema.ToolCallStart)
    assert replayed.tool_call_id == started.tool_call_id and replayed.raw_input == {"todos": PLAN}
    assert [u.status for u in second.of(schema.ToolCallProgress)] == ["completed"]
    assert sid in [s.session_id for s in listed]


def test_resume_fork_and_close(acpd: DaemonProcess, model: ScriptedModelServer) -> None:
    model.push(reply("First answer."))
    sid, _ = prompt_once(acpd, Editor(), acp.text_block("first"))
    editor = Editor()

    async def run() -> tuple[str, int]:
        async with _spawn(acpd, editor) as (conn, _):
            await _start(conn)
            await conn.resume_session(cwd="/tmp", session_id=sid, mcp_servers=[])
            forked = await conn.fork_session(cwd="/tmp", session_id=sid, mcp_servers=[])
            attached = acpd.call("session.get", {"session_id": forked.session_id})["attached"]
            await conn.close_session(session_id=forked.session_id)
            return forked.session_id, attached

    fork, attached_before = asyncio.run(run())
    assert editor.of(schema.AgentMessageChunk) == editor.of(schema.UserMessageChunk) == []
    assert len(editor.of(schema.AvailableCommandsUpdate)) == 2  # resume replays nothing
    assert fork != sid and acpd.call("session.get", {"session_id": fork})["parent_id"] == sid
    history = acpd.call("session.history", {"session_id": fork})["messages"]
    assert [m["content"] for m in history] == ["first", "First answer."]
    assert attached_before == 1
    assert acpd.call("session.get", {"session_id": fork})["attached"] == 0


def test_slash_commands_are_advertised_and_run_in_the_daemon(
    acpd: DaemonProcess, model: ScriptedModelServer
) -> None:
    model.push(reply("Answer one."), reply("Answer two."))
    editor = Editor()

    async def run() -> tuple[str, list[Any]]:
        async with _spawn(acpd, editor) as (conn, _):
            await _start(conn)
            session = await conn.new_session(cwd="/tmp", mcp_servers=[])
            sid, answers = session.session_id, []
            for line in ("hello", "/title Shipping plan", "/retry", "/new", "/tmp is full"):
                answers.append(await conn.prompt(session_id=sid, prompt=[acp.text_block(line)]))
            return sid, answers

    model.push(reply("Disk advice."))
    sid, answers = asyncio.run(asyncio.wait_for(run(), 60))
    assert [a.stop_reason for a in answers] == ["end_turn"] * 5
    [advertised] = editor.of(schema.AvailableCommandsUpdate)
    names = {c.name for c in advertised.available_commands}
    assert {"title", "retry", "undo", "compress"} <= names and not names & {"new", "quit"}
    assert acpd.call("session.get", {"session_id": sid})["title"] == "Shipping plan"
    text = editor.text()
    assert "Answer one." in text and "Answer two." in text  # /retry's turn was followed
    assert "/new does not apply here: start a new thread in the editor." in text
    assert text.endswith("Disk advice.")  # a path is not a command: it went to the model
    assert acpd.call("session.list", {})["sessions"][0]["id"] == sid  # /new made none


def test_a_permission_request_answered_in_the_editor_is_the_daemons_answer(
    acpd: DaemonProcess, model: ScriptedModelServer
) -> None:
    editor = Editor(answer="once")
    victim, done = clean_up(acpd, model, editor)
    assert done.stop_reason == "end_turn"
    assert not victim.exists()
    [asked] = editor.permissions
    assert [(o.option_id, o.kind) for o in asked.options] == [
        ("once", "allow_once"),
        ("session", "allow_always"),
        ("always", "allow_always"),
        ("deny", "reject_once"),
    ]
    [started] = editor.of(schema.ToolCallStart)
    assert asked.tool_call.tool_call_id == started.tool_call_id
    assert asked.tool_call.status == "pending" and f"rm -r {victim}" in str(
        asked.tool_call.raw_input
    )
    assert editor.of(schema.ToolCallProgress)[-1].status == "completed"


def test_allow_for_this_session_is_hermesds_session_choice(
    acpd: DaemonProcess, model: ScriptedModelServer
) -> None:
    first, second = _victim(acpd), _victim(acpd)
    model.push(
        call_tools(tool_call("terminal", {"command": f"rm -r {first}"})),
        call_tools(tool_call("terminal", {"command": f"rm -r {second}"})),
        reply("Both gone."),
    )
    editor = Editor(answer="session")
    assert prompt_once(acpd, editor, acp.text_block("clean up"))[1].stop_reason == "end_turn"
    assert not first.exists() and not second.exists()
    assert len(editor.permissions) == 1  # the second rm -r was allowed by the session rule


def test_a_denial_in_the_editor_fails_the_tool_call(
    acpd: DaemonProcess, model: ScriptedModelServer
) -> None:
    editor = Editor(answer="deny")
    victim, done = clean_up(acpd, model, editor)
    assert done.stop_reason == "end_turn"
    assert victim.exists()
    assert editor.of(schema.ToolCallProgress)[-1].status == "failed"


def test_an_approval_answered_elsewhere_withdraws_the_editors_request(
    acpd: DaemonProcess, model: ScriptedModelServer
) -> None:
    editor = Editor(answer=None)

    def answer_from_another_client() -> None:
        [pending] = wait_pending(acpd)
        acpd.call("approvals.respond", {"id": pending["id"], "choice": "once"})

    victim, done = clean_up(acpd, model, editor, alongside=answer_from_another_client)
    assert done.stop_reason == "end_turn" and not victim.exists()
    [request] = [m for m in editor.received if m.get("method") == "session/request_permission"]
    [withdrawal] = [m for m in editor.received if m.get("method") == "$/cancel_request"]
    assert withdrawal["params"] == {"requestId": request["id"]}
    statuses = [u.status for u in editor.of(schema.ToolCallProgress)]
    assert statuses == ["in_progress", "completed"]  # allowed elsewhere, then it ran


def test_cancel_stops_the_turn_and_the_prompt_says_cancelled(
    acpd: DaemonProcess, model: ScriptedModelServer
) -> None:
    model.push(reply("too late", delay=20))
    editor = Editor()

    def running(sid: str) -> None:
        deadline = time.monotonic() + 15
        while not acpd.call("session.get", {"session_id": sid}).get("running"):
            assert time.monotonic() < deadline, "the turn never started"
            time.sleep(0.05)

    async def run() -> Any:
        async with _spawn(acpd, editor) as (conn, _):
            await _start(conn)
            session = await conn.new_session(cwd="/tmp", mcp_servers=[])
            sid = session.session_id
            prompting = asyncio.create_task(
                conn.prompt(session_id=sid, prompt=[acp.text_block("take your time")])
            )
            await asyncio.to_thread(running, sid)
            await conn.cancel(session_id=sid)
            return await prompting

    assert asyncio.run(run()).stop_reason == "cancelled"
    assert "too late" not in editor.text()


def test_a_file_write_is_shown_as_a_diff(acpd: DaemonProcess, model: ScriptedModelServer) -> None:
    target = _victim(acpd) / "notes.txt"
    args = {"path": str(target), "content": "first line\n"}
    model.push(call_tools(tool_call("write_file", args)), reply("Written."))
    editor = Editor()
    assert prompt_once(acpd, editor, acp.text_block("write it"))[1].stop_reason == "end_turn"
    assert target.read_text() == "first line\n"
    [started] = editor.of(schema.ToolCallStart)
    assert started.kind == "edit" and [loc.path for loc in started.locations] == [str(target)]
    [diff] = started.content
    assert (diff.path, diff.old_text, diff.new_text) == (str(target), None, "first line\n")
    [finished] = editor.of(schema.ToolCallProgress)
    assert finished.status == "completed" and finished.content is None  # the diff stays


def test_a_turn_sent_from_another_client_streams_to_the_editor(
    acpd: DaemonProcess, model: ScriptedModelServer
) -> None:
    model.push(reply("Hello from the model."))
    editor = Editor()

    def chat_elsewhere(sid: str) -> None:
        chat = ["--socket", str(acpd.socket), "chat", "--session", sid, "-m", "hello from chat"]
        done = run_hermesctl(chat)
        assert done.returncode == 0 and "Hello from the model." in done.stdout, done.stderr

    async def run() -> None:
        async with _spawn(acpd, editor) as (conn, _):
            await _start(conn)
            session = await conn.new_session(cwd="/tmp", mcp_servers=[])
            await asyncio.to_thread(chat_elsewhere, session.session_id)
            while True:  # the daemon's events reach the editor after send_and_follow's
                editor.seen.clear()
                if editor.text() == "Hello from the model.":
                    break
                await asyncio.wait_for(editor.seen.wait(), 15)

    asyncio.run(run())
    assert [u.content.text for u in editor.of(schema.UserMessageChunk)] == ["hello from chat"]
    assert editor.text() == "Hello from the model."


def test_an_embedded_file_reaches_the_model_inside_the_message(
    acpd: DaemonProcess, model: ScriptedModelServer
) -> None:
    model.push(reply("Read it."))
    big = "print('hello')\n" + "# padding\n" * 10_000  # over 64 KiB, asyncio's default line
    resource = acp.embedded_text_resource("file:///src/app.py", big)

    blocks = [acp.text_block("what does this do?"), acp.resource_block(resource)]
    assert prompt_once(acpd, Editor(), *blocks)[1].stop_reason == "end_turn"
    sent = json.dumps(model.last_request["messages"][-1])
    assert "what does this do?" in sent and "file:///src/app.py" in sent
    assert "print('hello')" in sent and sent.count("# padding") == 10_000


def test_a_failed_turn_is_an_error_carrying_the_daemons_reason(
    acpd: DaemonProcess, model: ScriptedModelServer
) -> None:
    model.push(http_error(500, "upstream exploded"), http_error(500, "upstream exploded"))
    with pytest.raises(acp.RequestError) as failed:
        prompt_once(acpd, Editor(), acp.text_block("hello"))
    assert failed.value.code == -32603 and "upstream exploded" in json.dumps(failed.value.data)


# --- bad input ---------------------------------------------------------------------------------


def test_an_unknown_session_is_a_clear_error(acpd: DaemonProcess) -> None:
    async def run() -> tuple[acp.RequestError, acp.RequestError]:
        async with _spawn(acpd, Editor()) as (conn, _):
            await _start(conn)
            with pytest.raises(acp.RequestError) as loading:
                await conn.load_session(cwd="/tmp", session_id="sess_nope", mcp_servers=[])
            with pytest.raises(acp.RequestError) as prompting:
                await conn.prompt(session_id="sess_nope", prompt=[acp.text_block("hi")])
            return loading.value, prompting.value

    loading, prompting = asyncio.run(run())
    for err in (loading, prompting):
        assert "sess_nope" in str(err) and "Traceback" not in str(err)


def test_an_image_reaches_the_model_and_comes_back_with_the_history(
    acpd: DaemonProcess, model: ScriptedModelServer
) -> None:
    model.push(reply("A single pixel."))
    look = [acp.text_block("what is this?"), acp.image_block(PIXEL, "image/png")]
    sid, done = prompt_once(acpd, Editor(), *look)
    assert done.stop_reason == "end_turn"
    parts = model.last_request["messages"][-1]["content"]
    assert {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PIXEL}"}} in parts
    second = Editor()

    async def load() -> None:
        async with _spawn(acpd, second) as (conn, _):
            await _start(conn)
            await conn.load_session(cwd="/tmp", session_id=sid, mcp_servers=[])

    asyncio.run(load())
    shown = [u.content for u in second.of(schema.UserMessageChunk)]
    assert [type(c) for c in shown] == [schema.TextContentBlock, schema.ImageContentBlock]
    assert (shown[1].data, shown[1].mime_type) == (PIXEL, "image/png")


def test_what_the_daemon_cannot_take_is_refused_saying_why(acpd: DaemonProcess) -> None:
    async def run() -> list[acp.RequestError]:
        refused = []
        async with _spawn(acpd, Editor()) as (conn, _):
            await _start(conn)
            session = await conn.new_session(cwd="/tmp", mcp_servers=[])
            for block in (
                acp.image_block("aGk=", "image/png"),
                acp.audio_block("aGk=", "audio/wav"),
            ):
                with pytest.raises(acp.RequestError) as error:
                    await conn.prompt(
                        session_id=session.session_id, prompt=[acp.text_block("look"), block]
                    )
                refused.append(error.value)
        return refused

    not_png, audio = asyncio.run(run())
    assert not_png.code == -32602 and "is not a PNG, JPEG, GIF or WebP" in json.dumps(not_png.data)
    assert audio.code == -32602 and "audio content is not supported" in json.dumps(audio.data)


def test_a_malformed_line_gets_a_parse_error_and_the_bridge_keeps_serving(
    acpd: DaemonProcess,
) -> None:
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": 1},
    }
    proc = subprocess.run(
        [sys.executable, "-m", "hermesctl", "--socket", str(acpd.socket), "acp"],
        input="{not json\n[1, 2]\n" + json.dumps(initialize) + "\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    replies = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [(r["id"], r["error"]) for r in replies[:2]] == [
        (None, {"code": -32700, "message": "Parse error: the line is not JSON"}),
        (None, {"code": -32600, "message": "Invalid Request: not a JSON-RPC object"}),
    ]
    assert replies[2]["id"] == 1 and replies[2]["result"]["agentCapabilities"]["loadSession"]
    assert proc.returncode == 0  # stdin closed: the editor went away


def test_without_a_daemon_it_exits_3_saying_so(tmp_path: Path) -> None:
    done = run_hermesctl(["--socket", str(tmp_path / "none.sock"), "acp"], input="")
    assert done.returncode == 3
    assert "hermesd is not running" in done.stderr and "Traceback" not in done.stderr
    assert done.stdout == ""


def test_the_daemon_going_away_ends_the_bridge_with_status_1(start: Any) -> None:
    daemon = start()

    async def run() -> tuple[int, bytes]:
        async with _spawn(daemon, Editor()) as (conn, process):
            await _start(conn)
            await asyncio.to_thread(daemon.stop)
            status = await asyncio.wait_for(process.wait(), 30)
            assert process.stderr is not None
            return status, await process.stderr.read()

    status, stderr = asyncio.run(run())
    assert status == 1 and b"hermesd closed the connection" in stderr


def _with_mode(
    daemon: DaemonProcess, model: ScriptedModelServer, editor: Editor, mode: str
) -> tuple[Path, schema.SessionModeState | None, str]:
    """A new session switched to ``mode``, then a prompt whose turn runs ``rm -r``: the
    victim, the modes new_session advertised, and the session's mode as the daemon has it."""
    victim = _victim(daemon)
    model.push(call_tools(tool_call("terminal", {"command": f"rm -r {victim}"})), reply("Done."))

    async def run() -> tuple[schema.SessionModeState | None, str]:
        async with _spawn(daemon, editor) as (conn, _):
            await _start(conn)
            session = await conn.new_session(cwd="/tmp", mcp_servers=[])
            await conn.set_session_mode(session_id=session.session_id, mode_id=mode)
            await conn.prompt(session_id=session.session_id, prompt=[acp.text_block("go")])
            return session.modes, session.session_id

    modes, sid = asyncio.run(asyncio.wait_for(run(), 60))
    now = daemon.call("approvals.mode", {"session_id": sid})["mode"]
    return victim, modes, now


def test_session_modes_are_approval_modes_and_deny_refuses_without_asking(
    acpd: DaemonProcess, model: ScriptedModelServer
) -> None:
    editor = Editor(answer="once")
    victim, modes, now = _with_mode(acpd, model, editor, "deny")
    assert modes is not None and modes.current_mode_id == "manual"
    assert [m.id for m in modes.available_modes] == ["manual", "deny", "off"]
    assert [u.current_mode_id for u in editor.of(schema.CurrentModeUpdate)] == ["deny"]
    assert now == "deny"
    assert editor.permissions == []  # refused without asking
    assert victim.exists()
    [finished] = [u for u in editor.of(schema.ToolCallProgress) if u.status == "failed"]
    assert finished is not None


def test_the_dont_ask_mode_runs_a_dangerous_command_unasked(
    acpd: DaemonProcess, model: ScriptedModelServer
) -> None:
    # the test daemons run with HERMESD_CONFIRM_WIDENING=off: no terminal to confirm on
    editor = Editor(answer="deny")
    victim, _, now = _with_mode(acpd, model, editor, "off")
    assert now == "off"
    assert editor.permissions == []
    assert not victim.exists()


def test_an_unknown_mode_is_refused_saying_which_there_are(acpd: DaemonProcess) -> None:
    async def run() -> None:
        async with _spawn(acpd, Editor()) as (conn, _):
            await _start(conn)
            session = await conn.new_session(cwd="/tmp", mcp_servers=[])
            with pytest.raises(acp.RequestError) as refused:
                await conn.set_session_mode(session_id=session.session_id, mode_id="yolo")
            assert "manual, deny, off" in refused.value.data["details"]

    asyncio.run(asyncio.wait_for(run(), 60))


def _session_servers(daemon: DaemonProcess) -> list[dict[str, Any]]:
    return [r for r in daemon.call("mcp.list", {})["servers"] if r.get("session_id")]


def test_the_editors_mcp_server_serves_its_session_only_and_stops_with_the_bridge(
    acpd: DaemonProcess, model: ScriptedModelServer
) -> None:
    from tests.support.mcp_helpers import SERVER

    editor = Editor(answer="once")
    server = schema.McpServerStdio(name="ed", command=sys.executable, args=[SERVER, "echo"], env=[])

    async def run() -> tuple[str, list[str], list[str], dict[str, Any]]:
        async with _spawn(acpd, editor) as (conn, _):
            init = await _start(conn)
            assert init.agent_capabilities is not None
            assert init.agent_capabilities.mcp_capabilities is not None
            session = await conn.new_session(cwd="/tmp", mcp_servers=[server])
            sid = session.session_id
            [row] = [r for r in _session_servers(acpd) if r["session_id"] == sid]
            tool = "mcp__" + row["name"].replace(".", "_") + "__echo"
            model.push(call_tools(tool_call(tool, {"text": "from the editor"})), reply("Echoed."))
            await conn.prompt(session_id=sid, prompt=[acp.text_block("echo it")])
            here = [t["function"]["name"] for t in model.last_request.get("tools") or []]
            other = acpd.call("session.create", {"attach": False})["id"]
            model.push(reply("no tool here"))
            acpd.call("session.send", {"session_id": other, "message": "hi", "wait": True})
            there = [t["function"]["name"] for t in model.last_request.get("tools") or []]
            return tool, here, there, row

    tool, here, there, row = asyncio.run(asyncio.wait_for(run(), 90))
    assert row["state"] == "ready", row
    assert tool in here
    assert tool not in there  # another session is not offered the editor's tools
    assert len(editor.permissions) == 1  # an editor's server asks, as configured ones do
    results = [u for u in editor.of(schema.ToolCallProgress) if u.status == "completed"]
    assert any("from the editor" in json.dumps(u.model_dump(mode="json")) for u in results)
    for _ in range(300):  # the bridge is gone: its servers stop
        if not _session_servers(acpd):
            break
        time.sleep(0.1)
    assert _session_servers(acpd) == []


def test_without_a_terminal_to_confirm_on_the_editors_mcp_servers_are_refused_saying_so(
    start: Any, model: ScriptedModelServer
) -> None:
    from tests.support.mcp_helpers import SERVER

    daemon = start(config=model_config(model.url), env={"HERMESD_CONFIRM_WIDENING": "on"})
    editor = Editor()
    server = schema.McpServerStdio(name="ed", command=sys.executable, args=[SERVER, "echo"], env=[])
    model.push(reply("still here"))

    async def run() -> tuple[str, bytes]:
        async with _spawn(daemon, editor) as (conn, process):
            await _start(conn)
            session = await conn.new_session(cwd="/tmp", mcp_servers=[server])
            await conn.prompt(session_id=session.session_id, prompt=[acp.text_block("hi")])
            stderr = process.stderr
        return editor.text(), await stderr.read()

    text, stderr = asyncio.run(asyncio.wait_for(run(), 60))
    assert text == "still here"  # the session works without them
    assert _session_servers(daemon) == []
    assert b"MCP servers (ed) are not connected" in stderr
    assert b"confirm it on a terminal" in stderr


def test_without_a_terminal_to_confirm_on_dont_ask_is_refused_saying_why(
    start: Any, model: ScriptedModelServer
) -> None:
    daemon = start(config=model_config(model.url), env={"HERMESD_CONFIRM_WIDENING": "on"})

    async def run() -> tuple[str, Any]:
        async with _spawn(daemon, Editor()) as (conn, _):
            await _start(conn)
            session = await conn.new_session(cwd="/tmp", mcp_servers=[])
            with pytest.raises(acp.RequestError) as refused:
                await conn.set_session_mode(session_id=session.session_id, mode_id="off")
            await conn.set_session_mode(session_id=session.session_id, mode_id="deny")
            return session.session_id, refused.value

    sid, refused = asyncio.run(asyncio.wait_for(run(), 60))
    assert "confirm it on a terminal" in str(refused)
    assert daemon.call("approvals.mode", {"session_id": sid})["mode"] == "deny"  # narrowing
