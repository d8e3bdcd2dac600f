"""A full disk and a read-only state directory: clear errors, the daemon keeps serving, no
corruption.

HERMES_HOME is a small tmpfs mounted for the test (the suite runs as root in CI and in the dev
container); where mounting is not permitted the tests are skipped with the reason.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hermesd.rpc.protocol import Codes, RpcError
from tests.support.daemon import (
    DaemonProcess,
    daemon_env,
    follow_turn,
    run_hermesctl,
    send_and_follow,
    short_tmpdir,
    start_daemon,
)
from tests.support.modelserver import ScriptedModelServer, reply
from tests.support.plugin_factory import write_plugin
from tests.support.reliability import (
    db_report,
    fill_disk,
    model_config,
    mount_tmpfs,
    remount,
    turn_rules,
    unmount,
)
from tests.support.waiting import wait_until


@pytest.fixture
def small_home() -> Iterator[Path]:
    """An empty 8 MiB tmpfs to use as HERMES_HOME."""
    home = short_tmpdir("rs-") / "home"
    why = mount_tmpfs(home, "8m") if os.geteuid() == 0 else "not root"
    if why is not None:
        pytest.skip(f"cannot mount a tmpfs here ({why}); see docs/reliability.md")
    yield home
    unmount(home)


@pytest.fixture
def model() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer(rules=turn_rules()) as server:
        yield server


def _fill_until_refused(daemon: DaemonProcess, sid: str) -> RpcError:
    """Store ever larger messages until the store refuses one; return that error."""
    big = "x" * 200_000
    with daemon.client() as c:
        for _ in range(60):
            try:
                c.call("session.create", {"title": big[:200]})
                result = c.call(
                    "session.send",
                    {"session_id": sid, "wait": True, "message": f"echo full {big}"},
                    timeout=30,
                )
            except RpcError as exc:
                return exc
            assert result["status"] == "completed" or "full" in (result["error"] or ""), result
    raise AssertionError("the store never reported the full disk")


def test_full_disk_gives_a_clear_error_and_works_again_once_space_is_freed(
    start: Callable[..., DaemonProcess], small_home: Path, model: ScriptedModelServer
) -> None:
    daemon = start(small_home, config=model_config(model.url))
    with daemon.client() as c:
        sid = c.call("session.create", {"title": "before"})["id"]
        assert (
            c.call("session.send", {"session_id": sid, "message": "echo before", "wait": True})[
                "status"
            ]
            == "completed"
        )
    filler = small_home / "filler"
    fill_disk(filler)
    error = _fill_until_refused(daemon, sid)
    assert error.code == Codes.STORAGE_UNAVAILABLE, error.to_wire()
    assert "full" in error.message and error.data == {"reason": "full"}
    print(f"\nfull disk: {error.code}: {error.message}")
    with daemon.client() as c:
        result = c.call(
            "session.send", {"session_id": sid, "message": "echo refused", "wait": True}, timeout=30
        )
        assert result["status"] == "failed" and "disk" in result["error"], result
        assert not result["error"].startswith("internal error"), result  # a plain sentence
        print(f"turn on a full disk: {result['error']}")
        with pytest.raises(RpcError) as refused:  # .env is on the same full disk
            c.call("plugins.set_env", {"values": {"SOME_TOKEN": "x" * 5000}})
        assert refused.value.code == Codes.STORAGE_UNAVAILABLE, refused.value.to_wire()
        assert refused.value.data == {"reason": "full"} and ".env" in refused.value.message
        assert c.call("ping")["pong"] is True
        assert c.call("session.get", {"session_id": sid})["title"] == "before"
    filler.unlink()
    with daemon.client() as c:
        new = c.call("session.create", {"title": "after"})["id"]
        result = c.call(
            "session.send", {"session_id": new, "message": "echo after", "wait": True}, timeout=30
        )
        assert result["status"] == "completed", result
    assert daemon.stop() == 0
    report = db_report(small_home / "state.db")
    assert report["integrity"] == "ok" and report["fts"] == "ok", report
    assert report["bad_counters"] == 0 and report["messages"] == report["fts_rows"], report


def _start_failing(home: Path) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "hermesd", "--socket", str(short_tmpdir("hr-") / "s.sock")]
    if os.geteuid() == 0:
        argv.append("--allow-root")
    return subprocess.run(
        argv, env=daemon_env(home), capture_output=True, text=True, timeout=30, check=False
    )


def test_read_only_state_dir_at_start_is_a_clear_error_and_exit_status_73(small_home: Path) -> None:
    daemon = start_daemon(small_home)
    with daemon.client() as c:
        sid = c.call("session.create", {"title": "kept"})["id"]
    assert daemon.stop() == 0
    remount(small_home, "ro")
    try:
        done = _start_failing(small_home)
    finally:
        remount(small_home, "rw")
    assert done.returncode == 73, done.stderr
    assert "state.db" in done.stderr and "read-only" in done.stderr.lower(), done.stderr
    assert "Traceback" not in done.stderr
    print(f"\nread-only: exit {done.returncode}: {done.stderr.strip()}")
    daemon = start_daemon(small_home)
    try:
        assert daemon.call("session.get", {"session_id": sid})["title"] == "kept"
    finally:
        daemon.stop()


def test_another_process_holding_the_database_lock_delays_turns_but_never_the_loop(
    start: Callable[..., DaemonProcess], model: ScriptedModelServer
) -> None:
    # `sqlite3 state.db` in a shell, a backup tool: another process holds the write lock. A
    # turn's writes wait for it on the DB thread (up to its busy timeout); the event loop
    # never does, and serves everything else meanwhile.
    import sqlite3
    import time

    daemon = start(config=model_config(model.url))
    with daemon.client() as c:
        sid = c.call("session.create")["id"]
        assert (
            c.call("session.send", {"session_id": sid, "message": "echo warm", "wait": True})[
                "status"
            ]
            == "completed"
        )
        other = sqlite3.connect(
            daemon.home / "state.db", isolation_level=None, timeout=5, check_same_thread=False
        )
        other.execute("BEGIN IMMEDIATE")
        hold = 3.0
        started = time.monotonic()
        try:
            turn_id = c.call(
                "session.send", {"session_id": sid, "message": "echo held"}, timeout=10
            )["turn_id"]
            pings = []
            while time.monotonic() - started < hold:
                sent = time.monotonic()
                assert c.call("ping", timeout=5)["pong"] is True
                pings.append(time.monotonic() - sent)
                time.sleep(0.05)
            # the lock is still held: the turn cannot have stored its answer yet
            assert c.call("status", timeout=5)["turns_running"] == 1
        finally:
            other.execute("COMMIT")
            other.close()
        events = follow_turn(c, turn_id, timeout=15)
        waited = time.monotonic() - started
        history = c.call("session.history", {"session_id": sid})["messages"]
    # the loop never waited for the lock: a blocked loop would hold a ping for the whole hold
    assert max(pings) < hold / 2, pings
    assert events[-1]["status"] == "completed" and waited >= hold, (events[-1], waited)
    assert [m["content"] for m in history if m["role"] == "user"] == ["echo warm", "echo held"]


def _damage_pages(db: Path, marker: bytes, keep_pointer: bool) -> int:
    """Garble the pages made mostly of ``marker`` (a long message's overflow pages): their
    text becomes invalid UTF-8 (``keep_pointer``) or the whole page garbage; return how many."""
    data = bytearray(db.read_bytes())
    size = int.from_bytes(data[16:18], "big")
    hit = 0
    for start in range(0, len(data), size):
        page = data[start : start + size]
        # an overflow page (its first bytes: the next page's number, small here), never the
        # b-tree leaf holding the start of the row and other rows (its first byte: the type)
        if page[0] == 0 and page.count(marker) * len(marker) > size * 3 // 4:
            first = start + 4 if keep_pointer else start
            data[first : start + size] = b"\xff" * (start + size - first)
            hit += 1
    db.write_bytes(bytes(data))
    return hit


@pytest.mark.parametrize("keep_pointer", [True, False], ids=["bad-utf8", "bad-page"])
def test_damaged_pages_answer_a_storage_error_naming_the_session_and_doctor_sees_them(
    start: Callable[..., DaemonProcess], model: ScriptedModelServer, keep_pointer: bool
) -> None:
    daemon = start(config=model_config(model.url))
    with daemon.client() as c:
        hurt = c.call("session.create", {"title": "hurt"})["id"]
        well = c.call("session.create", {"title": "well"})["id"]
        text = "echo big " + "dmgtext " * 3000
        for sid, message in ((hurt, text), (well, "echo fine")):
            sent = c.call("session.send", {"session_id": sid, "message": message, "wait": True})
            assert sent["status"] == "completed", sent
    assert daemon.stop() == 0
    assert _damage_pages(daemon.home / "state.db", b"dmgtext ", keep_pointer) >= 2
    daemon = start(daemon.home, config=model_config(model.url))
    with daemon.client() as c:
        with pytest.raises(RpcError) as read:
            c.call("session.history", {"session_id": hurt})
        assert read.value.code == Codes.STORAGE_UNAVAILABLE, read.value.to_wire()
        assert read.value.data == {"reason": "corrupt"}, read.value.to_wire()
        assert hurt in read.value.message
        assert ("not valid UTF-8" if keep_pointer else ".recover") in read.value.message
        print(f"\ndamaged read: {read.value.message}")
        turn = c.call("session.send", {"session_id": hurt, "message": "echo x", "wait": True})
        assert turn["status"] == "failed" and "damaged" in turn["error"], turn
        assert "utf-8" not in turn["error"].lower() or hurt in turn["error"], turn
        try:  # hits from the index, or the storage error where it reads damaged text
            c.call("session.search", {"query": "dmgtext"})
        except RpcError as searched:
            assert searched.data == {"reason": "corrupt"}, searched.to_wire()
            assert "search" in searched.message, searched.message
        # the rest keeps working
        kept = c.call("session.history", {"session_id": well})["messages"]
        assert [m["content"] for m in kept if m["role"] == "user"] == ["echo fine"]
        again = c.call("session.send", {"session_id": well, "message": "echo on", "wait": True})
        assert again["status"] == "completed", again
        checks = {r["name"]: r for r in c.call("doctor", timeout=60)["checks"]}
    if keep_pointer:  # quick_check reads structure, not text: the text check finds it
        assert checks["text"]["status"] == "fail", checks["text"]
        assert hurt in checks["text"]["detail"] and well not in checks["text"]["detail"]
        return
    assert checks["storage"]["status"] == "fail", checks["storage"]
    assert "state.db" in checks["storage"]["detail"], checks["storage"]
    print(f"doctor: {checks['storage']['detail']}")


def test_invalid_utf8_in_an_intact_page_is_found_by_doctor_and_reads_as_a_storage_error(
    start: Callable[..., DaemonProcess], model: ScriptedModelServer
) -> None:
    import sqlite3

    daemon = start(config=model_config(model.url))
    with daemon.client() as c:
        hurt = c.call("session.create", {"title": "hurt"})["id"]
        well = c.call("session.create", {"title": "well"})["id"]
        for sid in (hurt, well):
            sent = c.call("session.send", {"session_id": sid, "message": "echo hi", "wait": True})
            assert sent["status"] == "completed", sent
        checks = {r["name"]: r for r in c.call("doctor", timeout=60)["checks"]}
        assert checks["text"]["status"] == "ok", checks["text"]
    assert daemon.stop() == 0
    db = sqlite3.connect(daemon.home / "state.db")
    with db:  # bytes no UTF-8 decoder accepts, stored as text: quick_check still says ok
        db.execute(
            "UPDATE messages SET content = CAST(x'6563686f20fffe20c328' AS TEXT) "
            "WHERE session_id = ? AND role = 'user'",
            (hurt,),
        )
        db.execute("UPDATE sessions SET title = CAST(x'6875ff7274' AS TEXT) WHERE id = ?", (hurt,))
    assert db.execute("PRAGMA quick_check").fetchone()[0] == "ok"
    db.close()
    daemon = start(daemon.home, config=model_config(model.url))
    with daemon.client() as c:
        checks = {r["name"]: r for r in c.call("doctor", timeout=60)["checks"]}
        assert checks["storage"]["status"] == "ok", checks["storage"]
        assert checks["text"]["status"] == "fail", checks["text"]
        detail = checks["text"]["detail"]
        assert f"{hurt} (sessions, messages)" in detail and well not in detail, detail
        assert f"hermesctl sessions delete {hurt}" in detail, detail
        with pytest.raises(RpcError) as read:
            c.call("session.history", {"session_id": hurt})
        assert read.value.code == Codes.STORAGE_UNAVAILABLE, read.value.to_wire()
        assert hurt in read.value.message and "not valid UTF-8" in read.value.message
        assert len(c.call("session.history", {"session_id": well})["messages"]) == 2
        # a damaged title reads with a replacement character; the list still answers
        assert c.call("session.get", {"session_id": hurt})["title"] == "hu\ufffdrt"
        listed = {x["id"] for x in c.call("session.list", {})["sessions"]}
        assert {hurt, well} <= listed
        # the recovery step the check gives works, and then all is well
        c.call("session.delete", {"session_id": hurt})
        checks = {r["name"]: r for r in c.call("doctor", timeout=60)["checks"]}
        assert checks["text"]["status"] == "ok", checks["text"]


@pytest.mark.parametrize("damage", ["garbled", "truncated", "emptied"])
def test_a_damaged_state_db_at_start_says_how_to_recover_and_exits_65(damage: str) -> None:
    daemon = start_daemon()
    with daemon.client() as c:
        for n in range(30):
            c.call("session.create", {"title": f"session {n} " + "t" * 150})
    assert daemon.stop() == 0
    db = daemon.home / "state.db"
    data = db.read_bytes()
    if damage == "garbled":
        db.write_bytes(b"\x13" * 4096 + data[4096:])
    elif damage == "truncated":
        db.write_bytes(data[:1000])
    else:
        db.write_bytes(b"")
    done = _start_failing(daemon.home)
    assert done.returncode == 65, done.stderr
    assert "Traceback" not in done.stderr and str(db) in done.stderr, done.stderr
    hint = "backup" if damage == "emptied" else ".recover"
    assert hint in done.stderr, done.stderr
    print(f"\n{damage}: exit {done.returncode}: {done.stderr.strip()}")
    if damage == "emptied":  # not silently started afresh
        assert db.stat().st_size == 0


def test_a_new_home_starts_with_an_empty_database() -> None:
    daemon = start_daemon()
    try:
        assert (daemon.home / ".state-db-created").exists()
        assert daemon.call("session.list")["sessions"] == []
    finally:
        daemon.stop()


def test_memory_writes_on_a_full_disk_answer_the_storage_error(small_home: Path) -> None:
    daemon = start_daemon(small_home)
    try:
        with daemon.client() as c:
            c.call("memory.write", {"target": "memory", "action": "add", "content": "Before"})
            filler = small_home / "filler"
            fill_disk(filler)
            big = "A fact worth keeping. " * 40
            for method, params in (
                ("memory.write", {"target": "memory", "action": "add", "content": big}),
                ("memory.set", {"target": "user", "entries": [big]}),
            ):
                with pytest.raises(RpcError) as refused:
                    c.call(method, params)
                error = refused.value
                assert error.code == Codes.STORAGE_UNAVAILABLE, (method, error.to_wire())
                assert error.data == {"reason": "full"} and "full" in error.message, error.message
                print(f"\n{method} on a full disk: {error.message}")
            filler.unlink()
            c.call("memory.write", {"target": "memory", "action": "add", "content": "After"})
            shown = c.call("memory.show", {"target": "memory"})["targets"][0]
        assert "Before" in str(shown) and "After" in str(shown), shown
    finally:
        daemon.stop()


SECRET = "ghp_" + "a1B2c3D4e5" * 3 + "f6G7h8"  # a GitHub token's shape: redacted by format


def test_a_huge_model_answer_is_kept_capped_redacted_and_its_history_still_reads() -> None:
    # 12 MB: over the 4 MiB kept by default and over the 8 MiB RPC frame
    big = SECRET + " " + "word " * (12 * 1024 * 1024 // 5)
    with ScriptedModelServer(rules=lambda _req: reply(big, chunk_chars=1 << 20)) as server:
        daemon = start_daemon(config=model_config(server.url))
        try:
            with daemon.client() as c:
                sid = c.call("session.create")["id"]
                events = send_and_follow(c, sid, "say a lot", timeout=180)
                assert c.call("ping")["pong"] is True
                finished = events[-1]
                assert finished["status"] == "completed", finished
                shown = next(e for e in events if e["type"] == "message")["content"]
                # streamed pieces are shown (redacted on the loop) only up to what is kept
                streamed = sum(len(e["text"]) for e in events if e["type"] == "text.delta")
                assert 0 < streamed <= 4 * 1024 * 1024, streamed
                assert SECRET not in shown and "[REDACTED]" in shown[:200]
                assert shown.endswith(" bytes]") and "truncated" in shown[-100:]
                newest = c.call("session.history", {"session_id": sid, "limit": 1})
                kept = newest["messages"][0]["content"]
                assert len(kept.encode()) <= 4 * 1024 * 1024 and kept.startswith(SECRET[:4])
                assert kept.endswith(f"truncated to {4 * 1024 * 1024} of its {len(big)} bytes]")
                every = c.call("session.history", {"session_id": sid})
                assert [m["role"] for m in every["messages"]] == ["user", "assistant"]
                assert every["more"] is False
        finally:
            daemon.stop()


def test_history_is_paged_by_size_and_the_cap_is_configurable() -> None:
    answer = "chunk " * (700 * 1024)  # 4.2 MB: cut to the configured 3 MB
    with ScriptedModelServer(rules=lambda _req: reply(answer, chunk_chars=1 << 20)) as server:
        extra = f"sessions:\n  max_message_bytes: {3 * 1024 * 1024}\n"
        daemon = start_daemon(config=model_config(server.url, extra))
        try:
            with daemon.client() as c:
                sid = c.call("session.create")["id"]
                for n in range(3):
                    done = c.call(
                        "session.send",
                        {"session_id": sid, "message": f"echo {n}", "wait": True},
                        timeout=120,
                    )
                    assert done["status"] == "completed", done
                seen: list[dict[str, Any]] = []
                after, pages = 0, 0
                while True:
                    page = c.call("session.history", {"session_id": sid, "after_seq": after})
                    seen += page["messages"]
                    after, pages = page["messages"][-1]["seq"], pages + 1
                    if not page["more"]:
                        break
                # a reload applies a new cap to the next answers
                (daemon.home / "config.yaml").write_text(
                    model_config(server.url, f"sessions:\n  max_message_bytes: {2 * 1024 * 1024}\n")
                )
                c.call("config.reload")
                done = c.call(
                    "session.send", {"session_id": sid, "message": "echo 3", "wait": True}
                )
                last = c.call("session.history", {"session_id": sid, "limit": 1})["messages"]
                assert last[0]["content"].endswith(
                    f"to {2 * 1024 * 1024} of its {len(answer)} bytes]"
                )
            assert [m["seq"] for m in seen] == list(range(1, 7)) and pages >= 3, pages
            answers = [m["content"] for m in seen if m["role"] == "assistant"]
            assert all(len(a.encode()) <= 3 * 1024 * 1024 for a in answers)
            assert all(a.endswith(f"of its {len(answer)} bytes]") for a in answers)
        finally:
            daemon.stop()


HOG_PLUGIN = """
import json

KEPT = []

def register(ctx):
    def grow(args, **kw):
        KEPT.append(bytearray(b"h" * (8 * 1024 * 1024)))  # touched: resident
        return json.dumps({"held_mib": 8 * len(KEPT)})

    ctx.register_tool("hog_grow", "hog", {
        "name": "hog_grow", "description": "Keeps 8 MiB more on every call",
        "parameters": {"type": "object", "properties": {}}}, grow)
    ctx.register_tool("calm_echo", "hog", {
        "name": "calm_echo", "description": "Keeps nothing",
        "parameters": {"type": "object", "properties": {}}}, lambda args, **kw: "{}")
"""


def test_a_plugin_growing_the_daemons_memory_is_named_and_status_shows_the_rss(
    start: Callable[..., DaemonProcess],
) -> None:
    home = short_tmpdir("rm-") / "home"
    write_plugin(home / "plugins", "hog", HOG_PLUGIN)
    daemon = start(home, config=f"limits:\n  plugin_memory_warn: {20 * 1024 * 1024}\n")
    with daemon.client() as c:
        before = c.call("status")
        assert before["rss_bytes"] > 10 * 1024 * 1024, before["rss_bytes"]
        assert "plugin hog" not in daemon.log()
        for _ in range(4):
            c.call("tools.call", {"name": "hog_grow"})
        # the worker counts a call's growth just after handing its result back
        wait_until(
            lambda: c.call("status")["plugin_memory_growth"].get("hog", 0) >= 20 << 20,
            20,
            "the hog plugin's growth to be counted",
        )
        after = c.call("status")
        memory = {r["name"]: r for r in c.call("doctor", timeout=60)["checks"]}["memory"]
    assert after["rss_bytes"] >= before["rss_bytes"] + 24 * 1024 * 1024
    assert after["plugin_memory_growth"]["hog"] >= 20 * 1024 * 1024, after
    warned = [line for line in daemon.log().splitlines() if "plugin hog: the daemon" in line]
    assert len(warned) == 1 and "may be leaking" in warned[0], warned
    assert memory["status"] == "warn" and "hog +" in memory["detail"], memory
    shown = run_hermesctl(["--socket", str(daemon.socket), "status"])
    assert shown.returncode == 0 and "MiB resident" in shown.stdout, shown.stdout
    print(f"\n{warned[0]}\ndoctor: {memory['detail']}")
