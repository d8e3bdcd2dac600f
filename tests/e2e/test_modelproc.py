"""The model client process (hermesd/modelproc.py, hermesd/modelchild.py): model requests sent
and read in a child process of a real daemon. Turns go through it, the API key reaches it only
through its socket, a killed process is replaced and its attempt retried, a cancelled turn stops
its stream, the process ends with the daemon, bad frames on either side close the link without
losing anything but the attempts in flight (which are retried), and bad settings are refused."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import pytest

from hermesctl.client import Client
from hermesd.model import client as llm
from hermesd.model import modelproc
from hermesd.model.client import ModelClient, ModelRequestFailed, ModelSettings
from hermesd.rpc.protocol import RpcError
from tests.support.daemon import (
    DaemonProcess,
    child_pids,
    follow_turn,
    run_hermesctl,
    send_and_follow,
)
from tests.support.modelserver import (
    ScriptedModelServer,
    calculator_rules,
    http_error,
    model_config,
    reply,
)

REPO = Path(__file__).resolve().parents[1]
SECRET = "sk-config-key-1b7f0e9a4c"


def model_process(d: DaemonProcess, timeout: float = 15) -> int:
    """The pid of the daemon's model client process (waits for it to start)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pid in child_pids(d.proc.pid):
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except FileNotFoundError:
                continue
            if b"hermesd.model.modelchild" in cmdline:
                return pid
        time.sleep(0.02)
    raise AssertionError(f"no model client process under {d.proc.pid}")


def gone(pid: int, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return True
        if state == "Z":
            return True
        time.sleep(0.02)
    return False


def turn(c: Client, sid: str, message: str, timeout: float = 30) -> list[dict[str, Any]]:
    return send_and_follow(c, sid, message, timeout)


def start_streaming(c: Client, sid: str) -> str:
    """Start a turn and return its id once its answer has begun to stream."""
    turn_id: str = c.call("session.send", {"session_id": sid, "message": "hi"})["turn_id"]
    while True:
        note = c.next_notification(timeout=15)
        assert note is not None, "the answer never started"
        if note.params[0].get("type") == "text.delta":
            return turn_id


def test_turns_run_in_the_model_client_process_which_gets_the_key_only_by_socket(
    start: Callable[..., DaemonProcess],
) -> None:
    with (
        ScriptedModelServer(rules=calculator_rules) as a,
        ScriptedModelServer(rules=lambda r: reply("from B")) as b,
    ):
        d = start(config=model_config(a.url, process="separate", api_key=SECRET))
        with d.client() as c:
            sid = c.call("session.create")["id"]
            events = turn(c, sid, "What is 15 * 23?")
            assert events[-1]["status"] == "completed"
            assert (
                events[-1]["final_text"]
                == 'The result is: {"expression": "15 * 23", "result": 345}'
            )
            assert [e["type"] for e in events].count("tool.started") == 1
            helper = model_process(d)
            cmdline = Path(f"/proc/{helper}/cmdline").read_bytes()
            environ = Path(f"/proc/{helper}/environ").read_bytes()
            assert b"-m\0hermesd.modelchild\0" in cmdline
            assert SECRET.encode() not in cmdline + environ
            assert a.request_headers[-1]["authorization"] == f"Bearer {SECRET}"
            # a reloaded endpoint reaches the running process
            (d.home / "config.yaml").write_text(model_config(b.url, process="separate"))
            c.call("config.reload")
            assert turn(c, sid, "hi again")[-1]["final_text"] == "from B"
            assert model_process(d) == helper
            shown = run_hermesctl(["status"], env={"HERMES_SOCKET": str(d.socket)})
            assert f"model process: pid {helper} (ready; model.process: separate)" in shown.stdout
    assert SECRET not in d.log()


def test_inline_sends_from_the_daemon_itself(start: Callable[..., DaemonProcess]) -> None:
    with ScriptedModelServer(rules=calculator_rules) as model:
        d = start(config=model_config(model.url, process="inline"))
        with d.client() as c:
            sid = c.call("session.create")["id"]
            assert turn(c, sid, "What is 15 * 23?")[-1]["status"] == "completed"
        assert child_pids(d.proc.pid) == []


def test_a_killed_process_is_replaced_and_its_attempt_retried(
    start: Callable[..., DaemonProcess],
) -> None:
    slow = reply("one two three four five six seven eight", chunk_chars=4, chunk_delay=0.3)
    with ScriptedModelServer([slow, reply("after the restart")]) as model:
        d = start(config=model_config(model.url, process="separate", retry_max_wait=0.05))
        with d.client() as c:
            sid = c.call("session.create")["id"]
            helper = model_process(d)
            turn_id = start_streaming(c, sid)
            os.kill(helper, signal.SIGKILL)
            events = follow_turn(c, turn_id, 30)
            assert events[-1]["status"] == "completed"
            assert events[-1]["final_text"] == "after the restart"
            assert any(e["type"] == "model.retry" for e in events), events
            replacement = model_process(d)
            assert replacement != helper
            assert gone(helper)
            other = c.call("session.create")["id"]
            model.push(reply("still serving"))
            assert turn(c, other, "and now?")[-1]["final_text"] == "still serving"
            history = d.call("session.history", {"session_id": sid})["messages"]
            assert [m["content"] for m in history] == ["hi", "after the restart"]
        assert "model client process stopped" in d.log()


@pytest.mark.parametrize("process", ["separate", "inline"])
def test_a_cancelled_turn_stops_its_stream_in_the_process(
    start: Callable[..., DaemonProcess], process: str
) -> None:
    slow = reply("slow words " * 100, chunk_chars=6, chunk_delay=0.05)  # ~10 s
    with ScriptedModelServer([slow, reply("next turn")]) as model:
        d = start(config=model_config(model.url, process=process))
        with d.client() as c:
            sid = c.call("session.create")["id"]
            turn_id = start_streaming(c, sid)
            began = time.monotonic()
            c.call("session.cancel", {"session_id": sid})
            events = follow_turn(c, turn_id, 15)
            assert events[-1]["status"] == "cancelled"
            assert time.monotonic() - began < 5
            # the stream's connection was closed, not read to its end
            deadline = time.monotonic() + 5
            while not model.hung_up and time.monotonic() < deadline:
                time.sleep(0.02)
            assert model.hung_up == 1
            assert turn(c, sid, "again")[-1]["final_text"] == "next turn"


def test_errors_keep_their_kind_across_the_process(start: Callable[..., DaemonProcess]) -> None:
    with ScriptedModelServer(
        [http_error(401, "bad key"), http_error(503, "busy"), reply("recovered")]
    ) as model:
        d = start(config=model_config(model.url, process="separate", retry_max_wait=0.05))
        with d.client() as c:
            sid = c.call("session.create")["id"]
            failed = turn(c, sid, "first")[-1]
            assert failed["status"] == "failed"
            assert "HTTP 401: bad key" in failed["error"]
            assert failed["error_type"] == "ModelRequestFailed"
            assert len(model.requests) == 1  # a 401 is not retried
            ok = turn(c, sid, "second")
            assert ok[-1]["final_text"] == "recovered"  # the 503 was retried
            assert any(e["type"] == "model.retry" and "HTTP 503: busy" in e["error"] for e in ok), (
                ok
            )


def test_the_process_ends_with_the_daemon(start: Callable[..., DaemonProcess]) -> None:
    with ScriptedModelServer(rules=lambda r: reply("ok")) as model:
        stopped = start(config=model_config(model.url, process="separate"))
        killed = start(config=model_config(model.url, process="separate"))
        helpers = [model_process(stopped), model_process(killed)]
        assert stopped.stop() == 0
        killed.signal(signal.SIGKILL)
        killed.proc.wait(10)
        assert gone(helpers[0]), "the model client process outlived a stopped daemon"
        assert gone(helpers[1]), "the model client process outlived a killed daemon"


# --- the child's side, spoken to directly ------------------------------------------------------


def spawn_child() -> tuple[subprocess.Popen[bytes], socket.socket]:
    parent, child = socket.socketpair()
    with child:
        proc = subprocess.Popen(
            [sys.executable, "-m", "hermesd.model.modelchild", str(child.fileno())],
            pass_fds=(child.fileno(),),
            cwd=str(REPO),
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
    parent.settimeout(30)
    return proc, parent


def frames(sock: socket.socket, until: Callable[[list[Any]], bool]) -> list[list[Any]]:
    unpacker = msgpack.Unpacker(raw=False)
    seen: list[list[Any]] = []
    while True:
        data = sock.recv(65536)
        assert data, f"the child closed its socket; frames so far: {seen}"
        unpacker.feed(data)
        for frame in unpacker:
            seen.append(frame)
            if until(frame):
                return seen


def settings_frame(url: str) -> bytes:
    fields = {
        "base_url": url,
        "model": "scripted-model",
        "api_key": None,
        "provider": "custom",
        "timeout": 10.0,
        "max_retries": 0,
        "retry_max_wait": 1.0,
        "backoff_base": 0.1,
        "transport": "hermesd",
        "process": "inline",
    }
    return msgpack.packb([modelproc.CONFIGURE, fields, 20])


def test_child_streams_an_answer_and_reports_errors_by_kind() -> None:
    with ScriptedModelServer(
        [reply("hello there"), http_error(429, "slow down", retry_after=2)]
    ) as model:
        proc, sock = spawn_child()
        try:
            # a request before any settings: a clear error, and the child keeps serving
            sock.sendall(msgpack.packb([modelproc.REQUEST, 1, b"{}"]))
            first = frames(sock, lambda f: f[0] == modelproc.ERROR)[-1]
            assert first[1:4] == [1, "config", "the model client process got no settings"]
            body = (
                b'{"model":"scripted-model","stream":true,'
                b'"messages":[{"role":"user","content":"hi"}]}'
            )
            sock.sendall(settings_frame(model.url) + msgpack.packb([modelproc.REQUEST, 2, body]))
            got = frames(sock, lambda f: f[0] in (modelproc.DONE, modelproc.ERROR))
            text = "".join(f[2]["text"] for f in got if f[0] == modelproc.EVENT)
            assert text == "hello there"
            assert got[-1][:4] == [
                modelproc.DONE,
                2,
                {"role": "assistant", "content": "hello there"},
                "stop",
            ]
            sock.sendall(msgpack.packb([modelproc.REQUEST, 3, body]))
            error = frames(sock, lambda f: f[0] == modelproc.ERROR)[-1]
            assert error[1:] == [3, "failed", "slow down", 429, True, 2.0]
            # garbage: the child closes its end and exits
            sock.sendall(b"\xc1\xc1\xc1")
            assert sock.recv(65536) == b""
            assert proc.wait(10) == 0
        finally:
            sock.close()
            if proc.poll() is None:
                proc.kill()
            proc.wait(10)


def test_child_without_a_socket_says_how_it_is_run() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "hermesd.model.modelchild"],
        check=False,
        capture_output=True,
        text=True,
        cwd=str(REPO),
        timeout=30,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 2
    assert "started by hermesd" in done.stderr


def test_child_answers_a_burst_in_one_write_and_drops_a_request_cancelled_before_it_began() -> None:
    def echo(request: dict[str, Any]) -> Any:
        return reply("echo " + request["messages"][-1]["content"])

    def request(rid: int) -> bytes:
        body = (
            b'{"model":"scripted-model","stream":true,'
            b'"messages":[{"role":"user","content":"m%d"}]}' % rid
        )
        return msgpack.packb([modelproc.REQUEST, rid, body])

    with ScriptedModelServer(rules=echo) as model:
        proc, sock = spawn_child()
        try:
            burst = [settings_frame(model.url), *(request(rid) for rid in range(1, 13))]
            # read in the same pass as the requests: request 12 has not begun yet
            burst.append(msgpack.packb([modelproc.CANCEL, 12]))
            sock.sendall(b"".join(burst))
            ends: dict[int, Any] = {}
            frames(
                sock,
                lambda f: (
                    f[0] in (modelproc.DONE, modelproc.ERROR)
                    and bool(ends.setdefault(f[1], f))
                    and len(ends) == 11
                ),
            )
            assert sorted(ends) == list(range(1, 12))
            for rid, frame in ends.items():
                assert frame[:3] == [
                    modelproc.DONE,
                    rid,
                    {"role": "assistant", "content": f"echo m{rid}"},
                ]
            # a cancelled request never reached the model, and the child still serves
            sock.sendall(request(13))
            last = frames(sock, lambda f: f[0] in (modelproc.DONE, modelproc.ERROR))[-1]
            assert last[:2] == [modelproc.DONE, 13]
            sent = sorted(r["messages"][-1]["content"] for r in model.requests)
            assert sent == sorted(f"m{rid}" for rid in (*range(1, 12), 13))
        finally:
            sock.close()
            proc.wait(10)


def test_requests_that_arrive_together_start_one_per_pass_first_come_first_served() -> None:
    from hermesd.model import modelchild

    async def scenario() -> list[list[int]]:
        started: list[int] = []

        class Attempts:  # ModelClient.attempt's shape: records the order requests begin in
            async def attempt(self, body: bytes, on_event: Any) -> llm.Completion:
                started.append(int(body))
                await asyncio.sleep(0.01)
                return llm.Completion({"role": "assistant", "content": ""}, "stop", None)

        server = modelchild._Server()
        server.client = Attempts()  # type: ignore[assignment]
        sent: list[list[Any]] = []
        server.link.send = sent.append  # type: ignore[method-assign]
        for rid in range(1, 6):
            server.on_frame([modelproc.REQUEST, rid, b"%d" % rid])
        server.on_frame([modelproc.CANCEL, 4])  # still waiting: never begins
        seen = []
        for _ in range(12):
            await asyncio.sleep(0)  # one pass of the loop
            seen.append(list(started))
        await asyncio.wait(list(server.tasks.values()))
        assert [f[:2] for f in sent] == [[modelproc.DONE, rid] for rid in (1, 2, 3, 5)]
        return seen

    seen = asyncio.run(scenario())
    assert seen[-1] == [1, 2, 3, 5]  # in the order they came
    growth = [len(b) - len(a) for a, b in zip([[]] + seen, seen, strict=False)]
    assert max(growth) == 1, seen  # never two in one pass


# --- the daemon's side, against a real child -------------------------------------------------


def test_a_bad_frame_from_the_child_fails_what_is_in_flight_and_a_new_child_serves() -> None:
    slow = reply("a b c d e f", chunk_chars=2, chunk_delay=0.3)

    async def scenario(model: ScriptedModelServer) -> None:
        url = model.url
        client = ModelClient(
            ModelSettings(url, "scripted-model", process="separate", max_retries=0)
        )
        try:
            first = asyncio.ensure_future(
                client.stream_completion([{"role": "user", "content": "hi"}])
            )
            process = client._separate()
            while not process._pending:
                await asyncio.sleep(0.01)
            pid = process.pid
            while not model.requests:  # the child is reading the slow stream
                await asyncio.sleep(0.01)
            assert process._link is not None
            process._link.data_received(b"\xc1")  # as if the child had sent it
            with pytest.raises(ModelRequestFailed) as failed:
                await first
            assert failed.value.retryable
            assert "undecodable frame" in str(failed.value)
            done = await client.stream_completion([{"role": "user", "content": "again"}])
            assert done.content == "next"
            assert process.pid not in (None, pid)
        finally:
            await client.aclose()

    with ScriptedModelServer([slow, reply("next")]) as model:
        asyncio.run(scenario(model))


# --- model.process: auto --------------------------------------------------------------------


def burst(c: Client, count: int) -> None:
    """``count`` one-turn sessions at once; every turn must complete."""
    sids = [c.call("session.create")["id"] for _ in range(count)]
    turns = {
        c.call("session.send", {"session_id": sid, "message": "What is 2 * 21?"})["turn_id"]
        for sid in sids
    }
    deadline = time.monotonic() + 60
    while turns:
        note = c.next_notification(timeout=max(0.1, deadline - time.monotonic()))
        assert note is not None, f"turns {turns} did not finish"
        event = note.params[0]
        if event.get("type") == "turn.finished":
            assert event["status"] == "completed", event
            turns.discard(event["turn_id"])


def sockets_of(pid: int) -> int:
    return sum(
        os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
        for fd in os.listdir(f"/proc/{pid}/fd")
    )


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="auto offloads with 2+ CPUs")
def test_auto_sends_from_the_loop_until_load_and_then_from_the_process(
    start: Callable[..., DaemonProcess],
) -> None:
    count = 2 * llm.OFFLOAD_AFTER
    with ScriptedModelServer(rules=calculator_rules, latency=0.2) as model:
        d = start(config=model_config(model.url))  # model.process: auto, the default
        with d.client() as c:
            sid = c.call("session.create")["id"]
            assert turn(c, sid, "What is 15 * 23?")[-1]["status"] == "completed"
            assert c.call("status")["model_process"] == {
                "mode": "auto",
                "pid": None,
                "ready": False,
            }
            assert child_pids(d.proc.pid) == []  # one turn at a time: sent from the loop
            burst(c, count)  # more than OFFLOAD_AFTER at once: the process starts
            helper = model_process(d)
            deadline = time.monotonic() + 30
            while not c.call("status")["model_process"]["ready"]:
                assert time.monotonic() < deadline, "the model client process never got ready"
                time.sleep(0.05)
            assert c.call("status")["model_process"]["pid"] == helper
            before = len(model.requests)
            burst(c, count)  # now the turns beyond OFFLOAD_AFTER go through it
            assert len(model.requests) - before == 2 * count
            # its kept-alive model connections: it sent some of those requests itself
            assert sockets_of(helper) > 1


def test_auto_on_one_cpu_never_starts_the_process(start: Callable[..., DaemonProcess]) -> None:
    with ScriptedModelServer(rules=calculator_rules, latency=0.2) as model:
        d = start(config=model_config(model.url), argv_prefix=["taskset", "-c", "0"])
        with d.client() as c:
            burst(c, 2 * llm.OFFLOAD_AFTER)
            assert c.call("status")["model_process"]["pid"] is None
        assert child_pids(d.proc.pid) == []


def test_a_stuck_process_is_killed_and_replaced(start: Callable[..., DaemonProcess]) -> None:
    slow = reply("slow words " * 40, chunk_chars=6, chunk_delay=0.05)
    with ScriptedModelServer([slow, reply("from the new process")]) as model:
        d = start(
            config=model_config(model.url, process="separate", timeout=1, retry_max_wait=0.05)
        )
        with d.client() as c:
            sid = c.call("session.create")["id"]
            helper = model_process(d)
            turn_id = start_streaming(c, sid)
            os.kill(helper, signal.SIGSTOP)  # alive, silent: as if deadlocked
            began = time.monotonic()
            events = follow_turn(c, turn_id, 30)
            waited = time.monotonic() - began
            assert events[-1]["final_text"] == "from the new process", events[-1]
            # model.timeout (1 s) + SILENCE_MARGIN, checked once a second
            assert modelproc.SILENCE_MARGIN < waited < modelproc.SILENCE_MARGIN + 5
            assert gone(helper)
            assert model_process(d) != helper
            assert d.alive()
        assert "sent nothing for" in d.log()


def test_reloading_model_process_switches_where_requests_go(
    start: Callable[..., DaemonProcess],
) -> None:
    with ScriptedModelServer(rules=lambda r: reply("ok")) as model:
        d = start(config=model_config(model.url, process="separate"))
        with d.client() as c:
            sid = c.call("session.create")["id"]
            assert turn(c, sid, "one")[-1]["final_text"] == "ok"
            helper = model_process(d)
            (d.home / "config.yaml").write_text(model_config(model.url, process="inline"))
            c.call("config.reload")
            assert gone(helper)
            assert turn(c, sid, "two")[-1]["final_text"] == "ok"
            assert child_pids(d.proc.pid) == []
            assert c.call("status")["model_process"] == {
                "mode": "inline",
                "pid": None,
                "ready": False,
            }
            (d.home / "config.yaml").write_text(model_config(model.url, process="separate"))
            c.call("config.reload")
            assert turn(c, sid, "three")[-1]["final_text"] == "ok"
            assert model_process(d) != helper


def test_the_child_gets_the_import_path_but_not_systemds_hand_over(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    extra = tmp_path / "wrapped-site-packages"
    extra.mkdir()
    monkeypatch.setattr(sys, "path", [*sys.path, str(extra)])
    for name in ("NOTIFY_SOCKET", "LISTEN_FDS", "LISTEN_PID", "WATCHDOG_USEC"):
        monkeypatch.setenv(name, "1")
    env = modelproc._child_env()
    assert str(extra) in env["PYTHONPATH"].split(os.pathsep)
    assert str(REPO) == env["PYTHONPATH"].split(os.pathsep)[0]
    assert not {"NOTIFY_SOCKET", "LISTEN_FDS", "LISTEN_PID", "WATCHDOG_USEC"} & set(env)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="auto offloads with 2+ CPUs")
def test_an_idle_process_started_by_auto_exits_and_load_starts_another(
    start: Callable[..., DaemonProcess],
) -> None:
    with ScriptedModelServer(rules=calculator_rules, latency=0.2) as model:
        d = start(config=model_config(model.url, process_idle_exit=1))
        with d.client() as c:
            burst(c, 2 * llm.OFFLOAD_AFTER)
            helper = model_process(d)
            assert gone(helper, timeout=15), "the idle model client process did not exit"
            assert c.call("status")["model_process"]["pid"] is None
            burst(c, 2 * llm.OFFLOAD_AFTER)  # load again: a new one
            assert model_process(d) != helper
        log = d.log()
        assert "idle for" in log and "model client process stopped" not in log


def test_a_bad_model_process_setting_is_refused_and_the_running_one_stays(
    start: Callable[..., DaemonProcess],
) -> None:
    with ScriptedModelServer(rules=lambda r: reply("ok")) as model:
        d = start(config=model_config(model.url, process="separate"))
        with d.client() as c:
            helper = model_process(d)
            for bad in ("process: sideways", "process_idle_exit: -5", "process_idle_exit: soon"):
                (d.home / "config.yaml").write_text(model_config(model.url) + f"  {bad}\n")
                with pytest.raises(RpcError) as refused:
                    c.call("config.reload")
                assert bad.split(":")[0] in str(refused.value)
            sid = c.call("session.create")["id"]
            assert turn(c, sid, "still here")[-1]["final_text"] == "ok"
            assert c.call("status")["model_process"] == {
                "mode": "separate",
                "pid": helper,
                "ready": True,
            }
