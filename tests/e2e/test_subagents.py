"""``delegate_task`` on a real daemon: children are sessions with a parent, run concurrently
within the limits, report to the parent's clients, ask them for approval, can be cancelled,
fail alone, and are recorded as interrupted when the daemon is killed under them.

The scripted model answers by rule: a parent whose message is ``DELEGATE {json}`` calls
``delegate_task`` with that JSON; a child (its first message is the delegation brief) answers
by its goal: ``fail`` is a model error, ``slow`` takes long, ``run: CMD`` runs a command,
``delegate: GOAL`` delegates again, anything else is summarised at once.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hermesctl.client import Client
from tests.support import corpus
from tests.support.approvals import client_answering
from tests.support.daemon import (
    DaemonProcess,
    checkout_pythonpath,
    follow_turn,
    run_hermesctl,
    short_tmpdir,
    start_daemon,
)
from tests.support.modelserver import ScriptedModelServer, Step, call_tools, http_error, reply
from tests.support.modelserver import tool_call as call
from tests.support.plugin_factory import write_plugin

BRIEF = re.compile(r"Task:\n(.*?)(?:\n\n|$)", re.S)


def _child_goal(request: dict[str, Any]) -> str | None:
    users = [m for m in request["messages"] if m["role"] == "user"]
    first = str(users[0]["content"]) if users else ""
    if "You are a sub-agent" not in first:
        return None
    found = BRIEF.search(first)
    return found.group(1).strip() if found else ""


def rules(request: dict[str, Any]) -> Step:
    """The scripted parent and children (see the module docstring)."""
    last = request["messages"][-1]
    goal = _child_goal(request)
    if goal is None:  # a parent
        content = str(last.get("content") or "")
        if last["role"] == "user" and "DELEGATE " in content:
            # the last one: a scheduled run's message names its job (the prompt) first
            args = json.JSONDecoder().raw_decode(content.rsplit("DELEGATE ", 1)[1])[0]
            if args.get("goal") == "spend in rounds":  # the parent spends 40,000 itself
                return call_tools(call("delegate_task", args), usage=_tokens(40_000))
            return call_tools(call("delegate_task", args))
        if last["role"] == "user" and "Background delegation finished" in content:
            return reply("background results read")
        if last["role"] == "user" and content.endswith("take your time"):
            return reply("the long answer", delay=4)
        return reply("parent done")
    if last["role"] == "tool":
        return reply(f"summary of {goal}: {str(last['content'])[:300]}")
    if goal == "fail":
        return http_error(400, "the child's request was refused")
    if goal == "slow":
        return reply("slow done", delay=60)
    if goal.startswith("run: "):
        return call_tools(call("terminal", {"command": goal[5:]}))
    if goal == "pause":
        return reply("paused", delay=2)
    if goal == "spend in rounds":  # 15,000 tokens a round, a tool call each time
        return call_tools(call("todo", {"todos": []}), usage=_tokens(15_000))
    if goal == "expensive":
        usage = {"prompt_tokens": 100_000, "completion_tokens": 1, "total_tokens": 100_001}
        return reply("spent a lot", usage=usage)
    if goal.startswith("delegate: "):
        return call_tools(call("delegate_task", {"goal": goal[10:]}))
    return reply(f"summary of {goal}")


def _tokens(total: int) -> dict[str, int]:
    return {"prompt_tokens": total - 1, "completion_tokens": 1, "total_tokens": total}


@pytest.fixture
def model() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer(rules=rules) as server:
        yield server


def _config(model: ScriptedModelServer, **delegation: Any) -> str:
    lines = [
        f"model:\n  base_url: {model.url}\n  default: scripted-model",
        "terminal:\n  cwd: /tmp",
    ]
    if delegation:
        lines.append("delegation:")
        lines += [f"  {k}: {json.dumps(v)}" for k, v in delegation.items()]
    return "\n".join(lines) + "\n"


@pytest.fixture
def daemon(start: Any, model: ScriptedModelServer) -> DaemonProcess:
    return start(config=_config(model))  # type: ignore[no-any-return]


def _delegate(client: Client, sid: str, args: dict[str, Any]) -> list[dict[str, Any]]:
    turn = client.call(
        "session.send", {"session_id": sid, "message": "DELEGATE " + json.dumps(args)}
    )
    return follow_turn(client, turn["turn_id"], timeout=60)


def _result(model: ScriptedModelServer, sid: str) -> Any:
    """The delegate_task result the parent's model was sent last."""
    for request in reversed(model.requests):
        if _child_goal(request) is None:
            tools = [m for m in request["messages"] if m["role"] == "tool"]
            if tools:
                return json.loads(tools[-1]["content"])
    raise AssertionError("the parent was never sent a delegate_task result")


def _attached(daemon: DaemonProcess) -> tuple[Client, str]:
    client = daemon.client()
    sid = client.call("session.create")["id"]
    client.call("session.attach", {"session_id": sid})
    return client, sid


def _progress(events: list[dict[str, Any]]) -> list[tuple[int, str]]:
    return [(e["task_index"], e["state"]) for e in events if e["type"] == "subagent.progress"]


def test_single_delegation_answers_with_the_childs_summary_from_a_child_session(
    daemon: DaemonProcess, model: ScriptedModelServer
) -> None:
    client, sid = _attached(daemon)
    with client:
        events = _delegate(client, sid, {"goal": "count the files", "context": "in /srv"})
        assert events[-1]["status"] == "completed"
        assert _progress(events) == [(0, "started"), (0, "done")]
        result = _result(model, sid)
        (entry,) = result["results"]
        assert entry["status"] == "completed"
        assert entry["summary"] == "summary of count the files"
        assert entry["exit_reason"] == "completed"
        assert entry["api_calls"] == 1
        child = client.call("session.get", {"session_id": entry["session_id"]})
        assert child["parent_id"] == sid
        assert child["platform"] == "subagent"
        history = client.call("session.history", {"session_id": child["id"]})["messages"]
        assert "in /srv" in history[0]["content"]
        assert history[-1]["content"] == "summary of count the files"
        hits = client.call("session.search", {"query": "summary"})
        assert child["id"] in json.dumps(hits)
    listing = run_hermesctl(["--socket", str(daemon.socket), "sessions", "list"])
    lines = listing.stdout.splitlines()
    parent_line = next(i for i, line in enumerate(lines) if line.startswith(sid))
    assert lines[parent_line + 1].lstrip().startswith("└ " + child["id"])


def test_a_batch_runs_every_task_and_children_lack_the_blocked_toolsets(
    daemon: DaemonProcess, model: ScriptedModelServer
) -> None:
    client, sid = _attached(daemon)
    with client:
        tasks = [{"goal": f"task {i}"} for i in range(3)]
        events = _delegate(client, sid, {"tasks": tasks})
        assert events[-1]["status"] == "completed"
        results = _result(model, sid)["results"]
        assert [r["task_index"] for r in results] == [0, 1, 2]
        assert [r["summary"] for r in results] == [f"summary of task {i}" for i in range(3)]
        assert len({r["session_id"] for r in results}) == 3
        assert sorted(_progress(events)) == sorted(
            [(i, s) for i in range(3) for s in ("started", "done")]
        )
    child_requests = [r for r in model.requests if _child_goal(r) is not None]
    offered = {t["function"]["name"] for t in child_requests[0].get("tools", [])}
    assert "terminal" in offered
    assert not offered & {"delegate_task", "memory", "cronjob", "clarify"}
    parent = next(r for r in model.requests if _child_goal(r) is None)
    assert "delegate_task" in {t["function"]["name"] for t in parent["tools"]}


def test_more_tasks_than_max_concurrent_children_are_refused_whole(
    start: Any, model: ScriptedModelServer
) -> None:
    daemon = start(config=_config(model, max_concurrent_children=2))
    client, sid = _attached(daemon)
    with client:
        _delegate(client, sid, {"tasks": [{"goal": "a"}, {"goal": "b"}, {"goal": "c"}]})
        result = _result(model, sid)
        assert "max_concurrent_children is 2" in result["error"]
        sessions = client.call("session.list")["sessions"]
        assert [s["id"] for s in sessions] == [sid]


def test_a_failing_child_is_reported_failed_and_its_siblings_complete(
    daemon: DaemonProcess, model: ScriptedModelServer
) -> None:
    client, sid = _attached(daemon)
    with client:
        events = _delegate(client, sid, {"tasks": [{"goal": "fail"}, {"goal": "fine"}]})
        assert events[-1]["status"] == "completed"
        failed, fine = _result(model, sid)["results"]
        assert failed["status"] == "failed"
        assert "refused" in failed["error"]
        assert fine["status"] == "completed"
        assert (0, "failed") in _progress(events)
        history = client.call("session.history", {"session_id": failed["session_id"]})
        assert history["messages"][-1]["content"].startswith("[sub-agent failed:")


def test_background_delegation_returns_at_once_and_its_result_starts_a_parent_turn(
    daemon: DaemonProcess, model: ScriptedModelServer
) -> None:
    client, sid = _attached(daemon)
    with client:
        events = _delegate(client, sid, {"goal": "look around", "background": True})
        assert events[-1]["final_text"] == "parent done"
        dispatched = _result(model, sid)
        assert dispatched["status"] == "dispatched"
        assert dispatched["mode"] == "background"
        # the child's result arrives as a message that starts a turn of the idle parent
        deadline = time.monotonic() + 60
        started = None
        while started is None and time.monotonic() < deadline:
            note = client.next_notification(timeout=1)
            if note is None or note.method != "session.event":
                continue
            event = note.params[0]
            if event["type"] == "turn.started" and event["session_id"] == sid:
                started = event
        assert started is not None
        assert "summary of look around" in started["user_message"]
        finished = follow_turn(client, started["turn_id"], timeout=60)
        assert finished[-1]["final_text"] == "background results read"


def _next_turn_started(client: Client, sid: str) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        note = client.next_notification(timeout=1)
        if note is None or note.method != "session.event":
            continue
        event: dict[str, Any] = note.params[0]
        if event["type"] == "turn.started" and event["session_id"] == sid:
            return event
    raise AssertionError("no turn started")


def test_a_background_result_reaching_a_busy_parent_starts_a_turn_after_the_running_one(
    daemon: DaemonProcess, model: ScriptedModelServer
) -> None:
    client, sid = _attached(daemon)
    with client:
        _delegate(client, sid, {"goal": "pause", "background": True})  # 2 s of work
        busy = client.call("session.send", {"session_id": sid, "message": "take your time"})
        long = follow_turn(client, busy["turn_id"], timeout=60)  # 4 s: the child ends meanwhile
        assert long[-1]["final_text"] == "the long answer"
        started = _next_turn_started(client, sid)
        assert started["user_message"].startswith("[Background delegation finished")
        finished = follow_turn(client, started["turn_id"], timeout=60)
        assert finished[-1]["final_text"] == "background results read"


def test_a_childs_approval_is_asked_of_the_client_attached_to_the_parent(
    start: Any, model: ScriptedModelServer
) -> None:
    daemon = start(config=_config(model))
    work = short_tmpdir("sub-")
    target = work / "doomed"
    (target / "sub").mkdir(parents=True)
    client, asked = client_answering(daemon, "once")
    with client:
        sid = client.call("session.create")["id"]
        client.call("session.attach", {"session_id": sid})
        events = _delegate(client, sid, {"goal": f"run: rm -r {target}"})
        assert events[-1]["status"] == "completed"
    assert not target.exists()
    (request,) = asked.requests
    assert request["pattern_key"] == "recursive_delete"
    entry = _result(model, sid)["results"][0]
    assert request["session_id"] == entry["session_id"]
    assert entry["status"] == "completed"


def _wait_started(client: Client) -> str:
    """The child session id of the first ``subagent.progress`` started event."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        note = client.next_notification(timeout=1)
        if note is None or note.method != "session.event":
            continue
        event = note.params[0]
        if event["type"] == "subagent.progress" and event["state"] == "started":
            return str(event["child_session_id"])
    raise AssertionError("no sub-agent started")


def test_cancelling_a_child_with_hermesctl_interrupts_it_and_the_parent_goes_on(
    daemon: DaemonProcess, model: ScriptedModelServer
) -> None:
    client, sid = _attached(daemon)
    with client:
        args = json.dumps({"goal": "slow"})
        turn = client.call("session.send", {"session_id": sid, "message": "DELEGATE " + args})
        child = _wait_started(client)
        while not any(_child_goal(r) == "slow" for r in model.requests):
            time.sleep(0.05)
        watcher = daemon.client()  # anyone may attach to a running child and see its turn
        attached = watcher.call("session.attach", {"session_id": child, "after_seq": 0})
        assert attached["running"] is True
        assert attached["parent_id"] == sid
        assert [e["type"] for e in attached["missed"]][:1] == ["turn.started"]
        out = run_hermesctl(["--socket", str(daemon.socket), "sessions", "cancel", child])
        assert out.returncode == 0, out.stderr
        assert "Cancelled turn" in out.stdout
        events = follow_turn(client, turn["turn_id"], timeout=60)
        assert events[-1]["final_text"] == "parent done"
        entry = _result(model, sid)["results"][0]
        assert entry["status"] == "interrupted"
        assert entry["session_id"] == child
        with watcher:
            seen = follow_turn(watcher, attached["turn_id"], timeout=30)
        assert seen[-1]["status"] == "cancelled"


def test_a_leaf_child_cannot_delegate_and_depth_two_lets_an_orchestrator(
    start: Any, model: ScriptedModelServer
) -> None:
    daemon = start(config=_config(model))
    client, sid = _attached(daemon)
    with client:
        _delegate(client, sid, {"goal": "delegate: deeper", "role": "orchestrator"})
        entry = _result(model, sid)["results"][0]
        assert "delegate_task" in entry["summary"]  # the child's call was refused
        sessions = client.call("session.list")["sessions"]
        assert len(sessions) == 2  # parent and child: no grandchild
    daemon.stop()
    deep = start(config=_config(model, max_spawn_depth=2))
    client, sid = _attached(deep)
    with client:
        _delegate(client, sid, {"goal": "delegate: deeper", "role": "orchestrator"})
        entry = _result(model, sid)["results"][0]
        assert entry["status"] == "completed"
        assert "summary of deeper" in entry["summary"]
        sessions = {s["id"]: s for s in client.call("session.list")["sessions"]}
        grandchild = next(s for s in sessions.values() if s["title"] == "↳ deeper")
        assert sessions[grandchild["parent_id"]]["parent_id"] == sid


def test_kill_9_with_a_child_in_flight_records_it_interrupted_in_child_and_parent(
    model: ScriptedModelServer,
) -> None:
    home: Path = short_tmpdir("subk-")
    daemon = start_daemon(home, config=_config(model))
    try:
        client, sid = _attached(daemon)
        with client:
            args = json.dumps({"goal": "slow"})
            client.call("session.send", {"session_id": sid, "message": "DELEGATE " + args})
            child = _wait_started(client)
            while not any(_child_goal(r) == "slow" for r in model.requests):
                time.sleep(0.05)
        os.kill(daemon.proc.pid, signal.SIGKILL)
        daemon.proc.wait(10)
    finally:
        if daemon.alive():
            daemon.stop()
    again = start_daemon(home, config=_config(model))
    try:
        with again.client() as client:
            child_history = client.call("session.history", {"session_id": child})["messages"]
            assert "interrupted" in child_history[-1]["content"]
            parent_history = client.call("session.history", {"session_id": sid})["messages"]
            assert parent_history[-1]["role"] == "tool"
            assert "interrupted" in parent_history[-1]["content"]
            assert child in parent_history[-1]["content"]
    finally:
        again.stop()


HOOK_PLUGIN = """
import json, os

def register(ctx):
    path = os.path.join(os.environ["HERMES_HOME"], "subagent-hooks.jsonl")

    def record(name):
        def hook(**kwargs):
            live = [[s["session_id"], s["parent_session_id"], s["goal"], s["status"]]
                    for s in ctx.subagent_lifecycle.list()]
            with open(path, "a") as f:
                f.write(json.dumps({"hook": name, "live": live, **kwargs}) + "\\n")
        return hook

    ctx.register_hook("subagent_start", record("subagent_start"))
    ctx.register_hook("subagent_stop", record("subagent_stop"))
"""


def test_subagent_start_and_stop_hooks_get_the_reference_kwargs(
    start: Any, model: ScriptedModelServer
) -> None:
    home = short_tmpdir("subh-")
    write_plugin(home / "plugins", "watcher", HOOK_PLUGIN)
    daemon = start(home, config=_config(model))
    client, sid = _attached(daemon)
    with client:
        _delegate(client, sid, {"goal": "hooked", "role": "leaf"})
        entry = _result(model, sid)["results"][0]
    lines = (home / "subagent-hooks.jsonl").read_text().splitlines()
    begin, end = (json.loads(line) for line in lines)
    # ctx.subagent_lifecycle sees the child while it runs
    assert begin.pop("live") == [[entry["session_id"], sid, "hooked", "running"]]
    end.pop("live")
    assert begin == {
        "hook": "subagent_start",
        "parent_session_id": sid,
        "parent_turn_id": begin["parent_turn_id"],
        "parent_subagent_id": None,
        "child_session_id": entry["session_id"],
        "child_subagent_id": entry["session_id"],
        "child_role": "leaf",
        "child_goal": "hooked",
    }
    assert begin["parent_turn_id"].startswith("turn_")
    assert end["hook"] == "subagent_stop"
    assert end["child_session_id"] == entry["session_id"]
    assert end["child_status"] == "completed"
    assert end["child_summary"] == "summary of hooked"
    assert end["parent_turn_id"] == begin["parent_turn_id"]
    assert isinstance(end["duration_ms"], int)


def test_hermes_delegate_routing_routes_each_task_to_its_model(
    start: Any, model: ScriptedModelServer
) -> None:
    """hermes-delegate-routing 0.1.3 (PyPI) patches tools.delegate_tool and is obeyed."""
    try:
        target = corpus.install({"dist": "hermes-delegate-routing", "version": "0.1.3"})
    except corpus.Unreachable as exc:
        pytest.skip(f"package registry unreachable: {exc}")
    root = short_tmpdir("subr-")
    home = root / ".hermes"
    home.mkdir()
    env = {"PYTHONPATH": checkout_pythonpath(str(target)), "HOME": str(root)}
    config = _config(model) + "plugins:\n  enabled: [delegate_routing]\n"
    daemon = start(home, config=config, env=env)
    deadline = time.monotonic() + 30  # plugins load once the daemon is ready
    while "delegate-routing: active" not in daemon.log() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "delegate-routing: active" in daemon.log()
    client, sid = _attached(daemon)
    with client:
        tasks = [{"goal": "routed", "model": "small-model"}, {"goal": "plain"}]
        _delegate(client, sid, {"tasks": tasks})
        routed, plain = _result(model, sid)["results"]
        assert routed["status"] == plain["status"] == "completed"
        _delegate(client, sid, {"tasks": [{"goal": "elsewhere", "provider": "anthropic"}]})
        refused = _result(model, sid)
        assert "delegate_task routing" in refused["error"]
        assert "one model endpoint" in refused["error"]
    models = {_child_goal(r): r["model"] for r in model.requests if _child_goal(r)}
    assert models == {"routed": "small-model", "plain": "scripted-model"}


def test_slash_stop_in_the_parent_stops_its_running_sub_agents(
    daemon: DaemonProcess, model: ScriptedModelServer
) -> None:
    client, sid = _attached(daemon)
    with client:
        args = json.dumps({"tasks": [{"goal": "slow"}, {"goal": "slow"}]})
        turn = client.call("session.send", {"session_id": sid, "message": "DELEGATE " + args})
        _wait_started(client)
        while sum(_child_goal(r) == "slow" for r in model.requests) < 2:
            time.sleep(0.05)
        with daemon.client() as other:
            out = other.call("command.run", {"line": "/stop", "session_id": sid})
        assert out["output"].startswith("Stopped 2 sub-agent(s)")
        follow_turn(client, turn["turn_id"], timeout=60)
        assert [r["status"] for r in _result(model, sid)["results"]] == ["interrupted"] * 2


def test_hermesctl_chat_prints_each_childs_progress(daemon: DaemonProcess) -> None:
    message = "DELEGATE " + json.dumps({"goal": "run: echo hi"})
    out = run_hermesctl(["--socket", str(daemon.socket), "chat", "-m", message])
    assert out.returncode == 0, out.stderr
    shown = out.stdout + out.stderr
    assert re.search(r"↳ \[0\] \S+ started: run: echo hi", shown), shown
    assert re.search(r"↳ \[0\] \S+ ⚙ terminal", shown), shown
    assert re.search(r"↳ \[0\] \S+ done", shown), shown
    assert "parent done" in out.stdout


def test_a_child_past_max_concurrent_children_waits_for_a_slot(
    start: Any, model: ScriptedModelServer
) -> None:
    daemon = start(config=_config(model, max_concurrent_children=1))
    client, sid = _attached(daemon)
    with client:
        _delegate(client, sid, {"goal": "slow", "background": True})
        while not any(_child_goal(r) == "slow" for r in model.requests):
            time.sleep(0.05)
        slow = next(
            s["id"] for s in client.call("session.list")["sessions"] if s["title"] == "↳ slow"
        )
        turn = client.call(
            "session.send",
            {"session_id": sid, "message": "DELEGATE " + json.dumps({"goal": "queued"})},
        )
        queued = _wait_started(client)
        assert queued != slow
        # the slow child holds the only slot: the queued one has no turn yet
        assert client.call("session.get", {"session_id": queued})["running"] is False
        assert client.call("session.get", {"session_id": slow})["running"] is True
        client.call("command.run", {"line": f"/stop {slow}", "session_id": sid})
        events = follow_turn(client, turn["turn_id"], timeout=60)
        assert events[-1]["status"] == "completed"
        entry = _result(model, sid)["results"][0]
        assert (entry["session_id"], entry["status"]) == (queued, "completed")


def test_a_childs_tokens_count_against_the_parents_session_budget(
    start: Any, model: ScriptedModelServer
) -> None:
    config = _config(model) + "budget:\n  session_tokens: 50000\n  action: stop\n"
    daemon = start(config=config)
    client, sid = _attached(daemon)
    with client:
        events = _delegate(client, sid, {"goal": "expensive"})
        # the parent's own requests are small: the child's tokens stop it
        assert events[-1]["status"] == "failed"
        assert events[-1]["error_type"] == "BudgetExceeded"
        parent = client.call("session.get", {"session_id": sid})
        assert parent["total_tokens"] > 100_001


def test_a_child_is_stopped_midway_when_its_parents_session_budget_runs_out(
    start: Any, model: ScriptedModelServer
) -> None:
    """The parent spent 40,000 of its 50,000 tokens; its child spends 15,000 a round. The
    child's own counter would allow three rounds; the parent's stops it after one."""
    config = _config(model) + "budget:\n  session_tokens: 50000\n  action: stop\n"
    daemon = start(config=config)
    client, sid = _attached(daemon)
    with client:
        events = _delegate(client, sid, {"goal": "spend in rounds"})
        parent = client.call("session.get", {"session_id": sid})
        history = client.call("session.history", {"session_id": sid})["messages"]
    assert events[-1]["error_type"] == "BudgetExceeded"  # the parent stops too, after it
    [stored] = [m for m in history if m["role"] == "tool"]
    entry = json.loads(stored["content"])["results"][0]
    assert entry["status"] == "failed"
    assert f"Session {sid}, which delegated this one, has used 55,000 tokens" in entry["error"]
    child_requests = [r for r in model.requests if _child_goal(r) == "spend in rounds"]
    assert len(child_requests) == 1
    assert parent["total_tokens"] == 55_000  # counted as spent, once


def test_a_scheduled_runs_children_follow_the_cron_approvals_mode(
    start: Any, model: ScriptedModelServer
) -> None:
    daemon = start(config=_config(model) + "approvals:\n  cron_mode: deny\n")
    target = short_tmpdir("subc-") / "kept"
    (target / "sub").mkdir(parents=True)
    prompt = "DELEGATE " + json.dumps({"goal": f"run: rm -r {target}"})
    job = daemon.call("cron.create", {"schedule": "every 1h", "prompt": prompt})
    daemon.call("cron.run", {"job_id": job["id"]})
    deadline = time.monotonic() + 60
    runs: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        runs = daemon.call("cron.runs", {"job_id": job["id"]})["runs"]
        if runs and runs[0]["status"] != "running":
            break
        time.sleep(0.1)
    assert runs and runs[0]["status"] == "ok", runs
    assert target.exists()
    results = [
        m["content"]
        for r in model.requests
        if _child_goal(r) is not None
        for m in r["messages"]
        if m["role"] == "tool"
    ]
    assert any("approvals.cron_mode: deny" in text for text in results), results


def test_cancelling_the_parents_turn_cancels_its_children(
    daemon: DaemonProcess, model: ScriptedModelServer
) -> None:
    client, sid = _attached(daemon)
    with client:
        args = json.dumps({"goal": "slow"})
        turn = client.call("session.send", {"session_id": sid, "message": "DELEGATE " + args})
        child = _wait_started(client)
        while not any(_child_goal(r) == "slow" for r in model.requests):
            time.sleep(0.05)
        client.call("session.cancel", {"session_id": sid})
        events = follow_turn(client, turn["turn_id"], timeout=60)
        assert events[-1]["status"] == "cancelled"
        assert client.call("session.get", {"session_id": child})["running"] is False
        history = client.call("session.history", {"session_id": child})["messages"]
        assert history[-1]["content"] == "[sub-agent interrupted: its parent stopped]"


def test_a_foreground_delegation_is_not_cut_by_tools_timeout(
    start: Any, model: ScriptedModelServer
) -> None:
    daemon = start(config=_config(model) + "tools:\n  timeout: 1\n")
    client, sid = _attached(daemon)
    with client:
        _delegate(client, sid, {"goal": "pause"})
        entry = _result(model, sid)["results"][0]
        assert (entry["status"], entry["summary"]) == ("completed", "paused")


def test_children_run_on_delegation_base_url_with_its_key_and_model(
    start: Any, model: ScriptedModelServer
) -> None:
    """``delegation.base_url``: the children's requests go to their own endpoint (another
    scripted server here), with ``delegation.model`` and ``delegation.api_key``; the parent's
    stay on the daemon's."""
    with ScriptedModelServer(rules=rules) as children:
        own = {"base_url": children.url, "model": "child-model", "api_key": "child-key"}
        config = (
            _config(model)
            + "delegation:\n"
            + "".join(f"  {k}: {json.dumps(v)}\n" for k, v in own.items())
        )
        daemon = start(config=config)
        client, sid = _attached(daemon)
        with client:
            events = _delegate(client, sid, {"goal": "count the files"})
            assert events[-1]["status"] == "completed"
            (entry,) = _result(model, sid)["results"]
        assert entry["summary"] == "summary of count the files"
        assert [r["model"] for r in children.requests] == ["child-model"]
        assert children.request_headers[-1].get("authorization") == "Bearer child-key"
        assert not [r for r in model.requests if _child_goal(r) is not None]
