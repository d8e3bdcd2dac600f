"""Hostile and broken plugins against a real hermesd: the daemon keeps serving, the bad call gets a
bounded error, and other plugins and sessions are unaffected.

One daemon (module scope) holds a ``hostile`` plugin whose tools raise, hang, return non-strings
or 50 MB, print, call ``sys.exit()``, spawn threads and change ``os.environ``; whose hooks raise,
hang or return the wrong types (each only for its trigger tool, so the rest of the module stays
fast); a command that hangs; three plugins whose ``register()`` raises, hangs forever or takes
10 s; and a well-behaved ``good`` plugin. During every bad call a probe on its own connection
pings the daemon every 10 ms and the latencies are checked (and, with
``HERMES_RELIABILITY_FIGURES=path``, written out as JSON for docs/reliability.md).
"""

from __future__ import annotations

import json
import os
import statistics
import textwrap
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.support.daemon import DaemonProcess, send_and_follow, short_tmpdir, start_daemon
from tests.support.modelserver import (
    ScriptedModelServer,
    call_tools,
    model_config,
    reply,
    tool_call,
)
from tests.support.plugin_factory import schema, write_plugin
from tests.support.waiting import wait_until

LOAD_TIMEOUT = 1.0
TOOL_TIMEOUT = 2.0
HOOK_TIMEOUT = 1.0
PING_BOUND = 0.8  # no ping may take this long while plugin code misbehaves (a hook hangs 1 s)

HOSTILE = f"""
    import json, os, sys, threading, time

    RELEASE = threading.Event()  # never set: hanging code waits forever

    def hang(args):
        RELEASE.wait()

    def raise_it(args):
        raise RuntimeError("tool raised on purpose")

    def non_string(args):
        return {{"kind": args.get("kind")}}.get("kind") == "set" and {{1, 2}} or 42

    def fifty_mb(args):
        return "x" * (50 * 1024 * 1024)

    def half_pair(args):  # half a surrogate pair: no UTF-8 encoder takes it
        if args.get("kind") == "dict":
            return {{"text": "bad " + chr(0xD800)}}
        return "bad " + chr(0xD800) + " result"

    def chatty(args):
        for _ in range(1000):
            print("HOSTILE-STDOUT-LINE " * 10)
        sys.stdout.flush()
        return json.dumps({{"printed": 1000}})

    def exits(args):
        sys.exit(3)

    def spawns(args):
        for i in range(20):
            threading.Thread(target=time.sleep, args=(30,), daemon=True,
                             name=f"hostile-spawned-{{i}}").start()
        return json.dumps({{"spawned": 20}})

    def env_set(args):
        os.environ["HOSTILE_MARK"] = "set-by-plugin"
        os.environ.pop("HOSTILE_VICTIM", None)
        return json.dumps({{"ok": True}})

    def env_read(args):
        return json.dumps({{"mark": os.environ.get("HOSTILE_MARK"),
                           "victim": os.environ.get("HOSTILE_VICTIM")}})

    def plain(args):
        return json.dumps({{"ok": True}})

    def pre_tool(tool_name, **kw):
        if tool_name == "trigger_pre_raise":
            raise ValueError("pre_tool_call raised on purpose")
        if tool_name == "trigger_pre_hang":
            RELEASE.wait()
        if tool_name == "trigger_pre_wrong":
            return ["not", "a", "verdict"]
        return None

    def post_tool(tool_name, **kw):
        if tool_name == "trigger_post_raise":
            raise ValueError("post_tool_call raised on purpose")
        if tool_name == "trigger_post_hang":
            RELEASE.wait()

    def transform(tool_name, **kw):
        if tool_name == "trigger_transform_wrong":
            return 12345
        return None

    def pre_llm(user_message, **kw):
        if "hostile hooks" in user_message:
            return 3.14

    def llm_hang(user_message, **kw):
        if "hostile hooks" in user_message:
            RELEASE.wait()

    def register(ctx):
        tools = {{"hang_forever": hang, "raise_always": raise_it, "non_string": non_string,
                 "fifty_mb": fifty_mb, "half_pair": half_pair, "print_stdout": chatty,
                 "call_sys_exit": exits,
                 "spawn_threads": spawns, "env_set": env_set, "env_read": env_read}}
        for name in ("trigger_pre_raise", "trigger_pre_hang", "trigger_pre_wrong",
                     "trigger_post_raise", "trigger_post_hang", "trigger_transform_wrong"):
            tools[name] = plain
        for name, fn in tools.items():
            sch = {schema("NAME")!r}
            sch["name"] = name
            sch["parameters"] = {{"type": "object", "properties": {{
                "kind": {{"type": "string", "description": "variant"}}}}}}
            ctx.register_tool(name, "hostile", sch, fn)
        ctx.register_hook("pre_tool_call", pre_tool)
        ctx.register_hook("post_tool_call", post_tool)
        ctx.register_hook("transform_tool_result", transform)
        ctx.register_hook("pre_llm_call", pre_llm)
        ctx.register_hook("post_llm_call", llm_hang)
        ctx.register_command("hang", lambda raw: RELEASE.wait(), description="never returns")
"""

GOOD = f"""
    import json

    def register(ctx):
        ctx.register_tool("good_echo", "good", {schema("good_echo", text="string")!r},
                          lambda args: json.dumps({{"echo": args["text"]}}))
        ctx.register_command("hello", lambda raw: "hello " + raw, description="greets")
"""

REGISTER_RAISES = "def register(ctx):\n    raise RuntimeError('register raised on purpose')\n"
REGISTER_HANGS = "import threading\n\ndef register(ctx):\n    threading.Event().wait()\n"
REGISTER_SLOW = "import time\n\ndef register(ctx):\n    time.sleep(10)\n"

FIGURES: dict[str, dict[str, float]] = {}


@pytest.fixture(scope="module")
def hostile(model: ScriptedModelServer) -> Iterator[DaemonProcess]:
    home = short_tmpdir()
    for folder, source in (
        ("hostile", HOSTILE),
        ("good", GOOD),
        ("reg_raises", REGISTER_RAISES),
        ("reg_hangs", REGISTER_HANGS),
        ("reg_slow", REGISTER_SLOW),
    ):
        write_plugin(home / "plugins", folder, source)
    config = (
        f"plugins:\n  load_timeout: {LOAD_TIMEOUT}\n"
        f"tools:\n  timeout: {TOOL_TIMEOUT}\n  hook_timeout: {HOOK_TIMEOUT}\n"
        "  result_budget: 5000\ncommands:\n  timeout: 1\n"
        f"model:\n  base_url: {model.url}\n  default: scripted\n  timeout: 5\n"
        "  max_retries: 0\n"
    )
    began = time.monotonic()
    daemon = start_daemon(home, config=config, env={"HOSTILE_VICTIM": "present"})
    daemon.ready_after = time.monotonic() - began  # type: ignore[attr-defined]
    yield daemon
    daemon.stop()
    out = os.environ.get("HERMES_RELIABILITY_FIGURES")
    if out:
        with open(out, "w") as f:
            json.dump(FIGURES, f, indent=1, sort_keys=True)


class PingProbe:
    """Pings the daemon every 10 ms from its own connection while a bad call runs."""

    def __init__(self, daemon: DaemonProcess, label: str) -> None:
        self.daemon, self.label = daemon, label
        self.latencies: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.failure: BaseException | None = None

    def _run(self) -> None:
        try:
            with self.daemon.client(timeout=5) as c:
                while not self._stop.is_set():
                    began = time.perf_counter()
                    assert c.call("ping") is not None
                    self.latencies.append(time.perf_counter() - began)
                    self._stop.wait(0.01)
        except BaseException as exc:
            self.failure = exc

    def __enter__(self) -> PingProbe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        deadline = time.monotonic() + 2  # a fast bad call: keep probing a moment after it
        while len(self.latencies) < 5 and time.monotonic() < deadline and self.failure is None:
            time.sleep(0.01)
        self._stop.set()
        self._thread.join(10)
        assert self.failure is None, f"ping failed during {self.label}: {self.failure!r}"
        assert len(self.latencies) >= 3, f"too few pings during {self.label}"
        worst = max(self.latencies)
        FIGURES[self.label] = {
            "pings": len(self.latencies),
            "p50_ms": round(statistics.median(self.latencies) * 1000, 2),
            "max_ms": round(worst * 1000, 2),
        }
        assert worst < PING_BOUND, f"ping took {worst:.3f}s during {self.label}"


def call_tool(
    d: DaemonProcess, name: str, args: dict[str, Any] | None = None, timeout: float = 30
) -> Any:
    with d.client(timeout=timeout) as c:
        return json.loads(c.call("tools.call", {"name": name, "args": args or {}})["result"])


def timed_tool(
    d: DaemonProcess, label: str, name: str, args: dict[str, Any] | None = None
) -> tuple[Any, float]:
    with PingProbe(d, label):
        began = time.monotonic()
        result = call_tool(d, name, args)
        took = time.monotonic() - began
    return result, took


def others_unaffected(d: DaemonProcess) -> None:
    assert d.alive()
    assert call_tool(d, "good_echo", {"text": "still here"}) == {"echo": "still here"}
    assert call_tool(d, "calculate", {"expression": "6*7"})["result"] == 42


def listed(d: DaemonProcess, key: str) -> dict[str, Any]:
    return next(p for p in d.call("plugins.list")["plugins"] if p["key"] == key)


# --- register() -------------------------------------------------------------------------------


def test_ready_arrives_in_bounded_time_despite_register_that_raises_hangs_or_takes_10s(
    hostile: DaemonProcess,
) -> None:
    # three bad register()s, each abandoned after plugins.load_timeout (1 s)
    assert hostile.ready_after < 3 * LOAD_TIMEOUT + 8  # type: ignore[attr-defined]
    assert listed(hostile, "reg_raises")["state"] == "error"
    for key in ("reg_hangs", "reg_slow"):
        entry = listed(hostile, key)
        assert entry["state"] == "error" and "did not finish within 1s" in entry["reason"]
    assert listed(hostile, "good")["state"] == "loaded"
    others_unaffected(hostile)


# --- tools ------------------------------------------------------------------------------------


def test_raising_tool_gets_an_error_result_and_ping_stays_fast(hostile: DaemonProcess) -> None:
    result, _ = timed_tool(hostile, "tool raises", "raise_always")
    assert result == {"error": "Tool execution failed: RuntimeError: tool raised on purpose"}
    others_unaffected(hostile)


def test_hanging_tool_times_out_at_tools_timeout_and_ping_stays_fast(
    hostile: DaemonProcess,
) -> None:
    result, took = timed_tool(hostile, "tool hangs forever", "hang_forever")
    assert result == {"error": f"Tool 'hang_forever' timed out after {TOOL_TIMEOUT:g}s"}
    assert TOOL_TIMEOUT - 0.1 <= took < TOOL_TIMEOUT + 3
    others_unaffected(hostile)


@pytest.mark.parametrize(("kind", "type_name"), [("int", "int"), ("set", "set")])
def test_tool_returning_a_non_string_gets_a_contract_error(
    hostile: DaemonProcess, kind: str, type_name: str
) -> None:
    result, _ = timed_tool(hostile, "tool returns non-string", "non_string", {"kind": kind})
    assert result == {"error": f"Tool 'non_string' returned {type_name}, not a JSON string"}
    others_unaffected(hostile)


@pytest.mark.parametrize(
    ("kind", "expected"), [("str", "bad \ufffd result"), ("dict", '{"text": "bad \ufffd"}')]
)
def test_tool_returning_half_a_surrogate_pair_gets_a_replacement_character(
    hostile: DaemonProcess, kind: str, expected: str
) -> None:
    # It used to be "internal error in encoding the result" (msgpack, SQLite: UTF-8 only).
    with hostile.client(timeout=30) as c:
        result = c.call("tools.call", {"name": "half_pair", "args": {"kind": kind}})["result"]
    assert result == expected
    others_unaffected(hostile)


def test_tool_returning_50_mb_is_cut_to_the_budget(hostile: DaemonProcess) -> None:
    with PingProbe(hostile, "tool returns 50 MB"), hostile.client(timeout=30) as c:
        result = c.call("tools.call", {"name": "fifty_mb"})["result"]
    assert result.startswith("x" * 5000 + "\n\n[truncated: ")
    assert len(result) < 6000
    others_unaffected(hostile)


def test_tool_printing_to_stdout_goes_to_the_daemon_log_not_the_protocol(
    hostile: DaemonProcess,
) -> None:
    result, _ = timed_tool(hostile, "tool prints to stdout", "print_stdout")
    assert result == {"printed": 1000}
    deadline = time.monotonic() + 5
    while "HOSTILE-STDOUT-LINE" not in hostile.log():  # stdout is the daemon's log stream
        assert time.monotonic() < deadline
        time.sleep(0.05)
    others_unaffected(hostile)


def test_tool_calling_sys_exit_is_an_error_result_and_the_daemon_lives(
    hostile: DaemonProcess,
) -> None:
    result, _ = timed_tool(hostile, "tool calls sys.exit()", "call_sys_exit")
    assert result == {"error": "Tool execution failed: PluginAbort: SystemExit: 3"}
    others_unaffected(hostile)


def test_tool_spawning_threads_returns_and_the_daemon_keeps_serving(hostile: DaemonProcess) -> None:
    result, _ = timed_tool(hostile, "tool spawns 20 threads", "spawn_threads")
    assert result == {"spawned": 20}
    others_unaffected(hostile)


def test_tool_changing_os_environ_is_not_contained_and_the_daemon_keeps_serving(
    hostile: DaemonProcess,
) -> None:
    # Documented limit (docs/plugins.md): os.environ is the process's; a plugin changing it
    # changes it for every plugin. This test pins that behaviour down.
    assert call_tool(hostile, "env_read") == {"mark": None, "victim": "present"}
    result, _ = timed_tool(hostile, "tool modifies os.environ", "env_set")
    assert result == {"ok": True}
    assert call_tool(hostile, "env_read") == {"mark": "set-by-plugin", "victim": None}
    others_unaffected(hostile)


def test_forty_hanging_tool_calls_do_not_starve_ping_or_a_normal_tool_call(
    hostile: DaemonProcess,
) -> None:
    # 40 concurrent calls stuck in plugin code: more than the worker pool's 32 threads. The
    # pool's per-plugin share (16 threads) leaves room for everyone else.
    with PingProbe(hostile, "40 hanging tool calls"), ThreadPoolExecutor(40) as pool:
        stuck = [pool.submit(call_tool, hostile, "hang_forever") for _ in range(40)]
        wait_until(
            lambda: hostile.call("status")["requests_in_flight"] >= 40, 10, "40 calls in flight"
        )
        began = time.monotonic()
        assert call_tool(hostile, "good_echo", {"text": "through"}) == {"echo": "through"}
        assert call_tool(hostile, "calculate", {"expression": "2**10"})["result"] == 1024
        normal = time.monotonic() - began
        # starved, they would have waited for stuck calls to time out and free a thread
        in_flight = sum(not f.done() for f in stuck)
        results = [f.result(timeout=30) for f in stuck]
    assert in_flight == 40, f"normal tool calls took {normal:.2f}s behind 40 stuck ones"
    assert all("timed out after" in r["error"] for r in results)
    FIGURES["40 hanging tool calls"]["normal_calls_ms"] = round(normal * 1000, 1)
    others_unaffected(hostile)


def test_after_hanging_calls_time_out_the_plugin_itself_gets_threads_again(
    hostile: DaemonProcess,
) -> None:
    # Stuck threads are abandoned and replaced, so the hostile plugin's own fine tools work.
    with ThreadPoolExecutor(20) as pool:
        for f in [pool.submit(call_tool, hostile, "hang_forever") for _ in range(20)]:
            assert "timed out" in f.result(timeout=30)["error"]
    # with no thread for it, the call would end as a timeout error instead
    assert call_tool(hostile, "env_read")["victim"] in (None, "present")


# --- hooks ------------------------------------------------------------------------------------


def test_raising_pre_tool_call_hook_does_not_block_the_call(hostile: DaemonProcess) -> None:
    result, _ = timed_tool(hostile, "pre_tool_call raises", "trigger_pre_raise")
    assert result == {"ok": True}
    assert "pre_tool_call raised on purpose" in hostile.log()


def test_hanging_pre_tool_call_hook_blocks_the_call_after_hook_timeout(
    hostile: DaemonProcess,
) -> None:
    result, took = timed_tool(hostile, "pre_tool_call hangs", "trigger_pre_hang")
    assert "did not answer within 1s" in result["error"]
    assert took < HOOK_TIMEOUT + 3
    others_unaffected(hostile)


def test_pre_tool_call_hook_returning_a_wrong_type_is_ignored(hostile: DaemonProcess) -> None:
    result, _ = timed_tool(hostile, "pre_tool_call wrong type", "trigger_pre_wrong")
    assert result == {"ok": True}


def test_raising_post_tool_call_hook_keeps_the_result(hostile: DaemonProcess) -> None:
    result, _ = timed_tool(hostile, "post_tool_call raises", "trigger_post_raise")
    assert result == {"ok": True}


def test_hanging_post_tool_call_hook_keeps_the_result_after_hook_timeout(
    hostile: DaemonProcess,
) -> None:
    result, took = timed_tool(hostile, "post_tool_call hangs", "trigger_post_hang")
    assert result == {"ok": True}
    assert HOOK_TIMEOUT - 0.1 <= took < HOOK_TIMEOUT + 3


def test_transform_hook_returning_a_non_string_leaves_the_result(hostile: DaemonProcess) -> None:
    result, _ = timed_tool(hostile, "transform_tool_result wrong type", "trigger_transform_wrong")
    assert result == {"ok": True}


def test_turn_with_wrong_typed_and_hanging_llm_hooks_completes_and_session_stays_usable(
    hostile: DaemonProcess, model: ScriptedModelServer
) -> None:
    model.push(
        call_tools(tool_call("raise_always", {})), reply("done despite hooks"), reply("second turn")
    )
    with (
        PingProbe(hostile, "turn with hostile hooks and a raising tool"),
        hostile.client(timeout=30) as c,
    ):
        sid = c.call("session.create")["id"]
        events = send_and_follow(c, sid, "hostile hooks please")
        assert events[-1]["status"] == "completed", events[-1]
        assert events[-1]["final_text"] == "done despite hooks"
        assert send_and_follow(c, sid, "plain")[-1]["final_text"] == "second turn"
    sent = model.requests[-2]["messages"]
    assert "3.14" not in json.dumps(sent)  # a float from pre_llm_call is not context


# --- commands ---------------------------------------------------------------------------------


def test_hanging_command_is_bounded_and_other_commands_still_run(hostile: DaemonProcess) -> None:
    with PingProbe(hostile, "command hangs"):
        began = time.monotonic()
        result = hostile.call("command.run", {"line": "/hang"})
        took = time.monotonic() - began
    assert result["ok"] is False and "did not finish within 1s" in result["output"]
    assert took < 4
    assert hostile.call("command.run", {"line": "/hello you"})["output"] == "hello you"


def test_daemon_survived_the_whole_module(hostile: DaemonProcess) -> None:
    assert hostile.alive() and hostile.call("ping") is not None
    others_unaffected(hostile)


# --- the worker pool's rules, on their own ------------------------------------------------------


def test_pool_per_key_share_leaves_threads_for_other_keys() -> None:
    from hermesd.runtime.workers import WorkerPool, WorkTimeout

    pool = WorkerPool(max_workers=4, per_key=2)
    release = threading.Event()
    try:
        stuck = [pool.submit(release.wait, key="tool:bad") for _ in range(6)]
        wait_until(
            lambda: sum(f.running() for f in stuck) == 2, 10, "the key's two threads to start"
        )
        # behind the stuck key this call would wait for ever: it gets a thread of its own
        assert pool.call(lambda: "fine", timeout=5, key="tool:good") == "fine"
        assert sum(f.running() for f in stuck) == 2  # the rest wait in their own line
        with pytest.raises(WorkTimeout):
            pool.call(lambda: "never", timeout=0.2, key="tool:bad")
    finally:
        release.set()


def test_pool_replaces_abandoned_threads_up_to_the_cap() -> None:
    from hermesd.runtime.workers import WorkerPool, WorkTimeout

    pool = WorkerPool(max_workers=2, per_key=2, max_abandoned=2)
    release = threading.Event()
    try:
        for _ in range(2):
            with pytest.raises(WorkTimeout):
                pool.call(release.wait, timeout=0.1, key="k")
        assert pool.abandoned_count == 2
        assert pool.call(lambda: 7, timeout=2, key="k") == 7  # replacements serve the key
        for _ in range(2):
            with pytest.raises(WorkTimeout):
                pool.call(release.wait, timeout=0.1, key="k")
        assert pool.abandoned_count == 2  # the cap: these two keep their slots
        with pytest.raises(WorkTimeout):
            pool.call(lambda: 8, timeout=0.2, key="k")  # so the key is full now
    finally:
        release.set()
    deadline = time.monotonic() + 5
    while pool.abandoned_count and time.monotonic() < deadline:
        time.sleep(0.02)
    assert pool.abandoned_count == 0  # released threads leave
    assert pool.call(lambda: 9, timeout=2, key="k") == 9


HALF_PAIR = """
    import json

    BAD = "bad " + chr(0xD800) + " text"  # half a surrogate pair: no UTF-8 encoder takes it
    CTX = None

    def answer(response_text, **kwargs):
        return BAD if "transform me" in response_text else None

    def result(tool_name, result, **kwargs):
        return BAD if tool_name == "transformed" else None

    def block(tool_name, **kwargs):
        return {"action": "block", "message": BAD} if tool_name == "blocked" else None

    def run(args):
        return json.dumps({"ran": True})

    def command(raw_args):
        if raw_args == "inject":
            return str(CTX.inject_message(BAD))
        return BAD

    def cli_setup(parser):
        pass

    def cli_run(args):
        print(BAD)

    def register(ctx):
        global CTX
        CTX = ctx
        ctx.register_hook("transform_llm_output", answer)
        ctx.register_hook("transform_tool_result", result)
        ctx.register_hook("pre_tool_call", block)
        for name in ("transformed", "blocked"):
            ctx.register_tool(name=name, toolset="halfpair", schema=SCHEMA(name), handler=run)
        ctx.register_command("halfpair", command, description="half a pair")
        ctx.register_cli_command("halfpair", "half a pair", cli_setup, cli_run)

    def SCHEMA(name):
        return {"name": name, "description": name,
                "parameters": {"type": "object", "properties": {}}}
"""


def test_plugin_text_with_half_a_surrogate_pair_is_stored_and_sent_as_a_replacement_character(
    start: Any,
) -> None:
    # Each of these failed before: the turn ("internal error: UnicodeEncodeError"), the RPC
    # ("internal error in encoding the result") or, for inject_message, silently.
    home = short_tmpdir()
    write_plugin(home / "plugins", "halfpair", textwrap.dedent(HALF_PAIR))
    steps = [
        reply("please transform me"),
        call_tools(tool_call("transformed")),
        reply("one"),
        call_tools(tool_call("blocked")),
        reply("two"),
        reply("the injected message's answer"),  # a message injected while idle starts a turn
        reply("next"),
    ]
    bad = "bad \ufffd text"
    with ScriptedModelServer(steps) as model:
        d = start(home, config=model_config(model.url))
        with d.client() as c:
            sid = c.call("session.create")["id"]
            finished = send_and_follow(c, sid, "hi")[-1]
            assert (finished["status"], finished["final_text"]) == ("completed", bad)
            events = send_and_follow(c, sid, "a tool whose result is transformed")
            assert [e["preview"] for e in events if e["type"] == "tool.finished"] == [bad]
            events = send_and_follow(c, sid, "a tool a hook blocks")
            assert [e["preview"] for e in events if e["type"] == "tool.finished"] == [
                json.dumps({"error": bad}, ensure_ascii=False)
            ]
            ran = c.call("command.run", {"line": "/halfpair", "session_id": sid})
            assert (ran["ok"], ran["output"]) == (True, bad)
            assert (
                c.call("command.run", {"line": "/halfpair inject", "session_id": sid})["output"]
                == "True"
            )
            cli = c.call("cli.run", {"argv": ["halfpair"]})
            assert (cli["exit_status"], cli["stdout"]) == (0, bad + "\n")
            deadline = time.monotonic() + 20
            while True:  # the injected message starts a turn once the command returned
                history = d.call("session.history", {"session_id": sid})["messages"]
                running = c.call("session.get", {"session_id": sid})["running"]
                done = history[-1]["content"] == "the injected message's answer"
                if (done and not running) or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            assert [m["content"] for m in history if m["role"] != "user"][:1] == [bad]
            assert history[-2] == {**history[-2], "role": "user", "content": bad}
            assert send_and_follow(c, sid, "and now")[-1]["final_text"] == "next"
        assert "UnicodeEncodeError" not in d.log()
