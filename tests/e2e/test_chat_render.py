"""The model's markdown in ``hermesctl chat``: rendered on a terminal (bold, headings, tables
with box rules, code blocks) while it streams, and left as written when piped, with
``--plain`` or with ``NO_COLOR``."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.daemon import DaemonProcess, short_tmpdir, start_daemon
from tests.support.modelserver import (
    ScriptedModelServer,
    call_tools,
    model_config,
    reply,
    tool_call,
)
from tests.support.terminal import Terminal
from tests.support.tmux import TmuxWindow

ANSWER = (
    "## Ports\n\nThe **daemon** listens on these:\n\n"
    "| name | port |\n|---|---|\n| http | 8080 |\n| rpc | 9090 |\n\n"
    "```python\nprint('hello')\n```\n"
    "Done, see `hermesctl status`."
)


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer() as server:
        yield server


@pytest.fixture(scope="module")
def chatd(model: ScriptedModelServer) -> Iterator[DaemonProcess]:
    daemon = start_daemon(short_tmpdir(), config=model_config(model.url, timeout=5))
    yield daemon
    daemon.stop()


def client_env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMES_")}
    env.pop("NO_COLOR", None)
    env.update(HERMES_HOME=str(home), TERM="xterm", **extra)
    return env


def chat_on_terminal(d: DaemonProcess, *args: str, **env: str) -> Terminal:
    argv = [sys.executable, "-m", "hermesctl", "--socket", str(d.socket), "chat", *args]
    return Terminal(argv, client_env(d.home, **env), cols=100)


def chat_in_tmux(d: DaemonProcess, *args: str) -> TmuxWindow:
    argv = [sys.executable, "-m", "hermesctl", "--socket", str(d.socket), "chat", *args]
    return TmuxWindow(argv, client_env(d.home))


def test_a_streamed_answer_is_rendered_on_a_terminal(
    chatd: DaemonProcess, model: ScriptedModelServer
) -> None:
    model.push(reply(ANSWER, chunk_chars=5, chunk_delay=0.01))
    w = chat_in_tmux(chatd, "-m", "which ports?")
    try:
        shown = w.wait_for(r"\[exit 0\]")
        coloured = w.screen(escapes=True)
    finally:
        w.close()
    assert "Done, see hermesctl status" in shown
    assert "**" not in shown and "```" not in shown and "|---" not in shown  # previews erased
    assert "\x1b[1mdaemon" in coloured  # bold, without the asterisks
    assert "─────" in shown  # the table's rule, in box characters
    assert "print('hello')" in shown
    assert shown.index("Ports") < shown.index("8080") < shown.index("print(")


def test_an_answer_cut_inside_a_code_block_still_shows_its_code(
    chatd: DaemonProcess, model: ScriptedModelServer
) -> None:
    model.push(reply("Here:\n\n```sh\nls -la /tmp\nrm -rf build", chunk_chars=4))
    w = chat_in_tmux(chatd, "-m", "a script?")
    try:
        shown = w.wait_for(r"\[exit 0\]")
    finally:
        w.close()
    assert "ls -la /tmp" in shown and "rm -rf build" in shown
    assert "```" not in shown


def test_plain_and_no_color_show_the_markdown_as_written(
    chatd: DaemonProcess, model: ScriptedModelServer
) -> None:
    for args, env in ((("--plain",), {}), ((), {"NO_COLOR": "1"})):
        model.push(reply(ANSWER))
        t = chat_on_terminal(chatd, *args, "-m", "which ports?", **env)
        try:
            assert t.wait() == 0
        finally:
            t.close()
        assert "The **daemon** listens" in t.text
        assert "| http | 8080 |" in t.text


def test_a_piped_answer_is_the_markdown_as_written(
    chatd: DaemonProcess, model: ScriptedModelServer
) -> None:
    model.push(reply(ANSWER))
    done = subprocess.run(
        [sys.executable, "-m", "hermesctl", "--socket", str(chatd.socket), "chat", "-m", "ports"],
        env=client_env(chatd.home),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ANSWER
    assert "\x1b[" not in done.stdout


# --- the REPL's status line and spinner -------------------------------------------------------


def test_the_repl_shows_a_status_line_and_a_spinner_with_elapsed_seconds(
    chatd: DaemonProcess, model: ScriptedModelServer
) -> None:
    t = chat_on_terminal(chatd, "--plain")  # printed under the answer (else: the toolbar)
    try:
        t.expect("› ")
        t.wait_reading()
        model.push(reply("slow but sure", delay=2.5))
        t.sendline("take your time")
        t.expect(r"thinking… 1s")  # counts while the model is awaited
        t.expect("slow but sure")
        footer = t.expect(r"scripted-model · context ([\d,.k]+)/([\d,.k]+) \(\d+%\).*last turn")
        assert footer.group(1) != "0"
        t.expect("› ")
        t.wait_reading()
        t.sendline("/quit")
        assert t.wait() == 0
    finally:
        t.close()


def test_the_chat_keeps_a_status_toolbar_at_the_bottom_that_a_turn_updates(
    chatd: DaemonProcess, model: ScriptedModelServer
) -> None:
    w = chat_in_tmux(chatd)
    try:
        shown = w.wait_for(r"› ")
        bottom = [x for x in w.wait_for(r"scripted-model").splitlines() if x.strip()][-1]
        assert bottom.startswith("scripted-model") and "last turn" not in bottom, shown
        model.push(reply("toolbar answer"))
        w.type("hello toolbar")
        shown = w.wait_for(r"(?s)toolbar answer.*scripted-model · context .*last turn \d")
        lines = [x for x in shown.splitlines() if x.strip()]
        assert lines[-1].startswith("scripted-model · context ") and "last turn" in lines[-1]
        assert lines[-2].startswith("› ")  # the toolbar is under the prompt, not in the answer
        assert shown.count("last turn") == 1  # not printed after the answer as well
        w.type("/quit")
        w.wait_for(r"\[exit 0\]")
    finally:
        w.close()


def test_the_toolbar_counts_an_approval_asked_elsewhere_while_the_prompt_waits(
    chatd: DaemonProcess,
) -> None:
    from tests.support.approvals import Background, client_answering, terminal, wait_pending

    workspace = chatd.home / "workspace"
    workspace.mkdir(exist_ok=True)
    victim = Path(tempfile.mkdtemp(prefix="victim-", dir=workspace))
    other = chatd.call("session.create")["id"]
    w = chat_in_tmux(chatd)
    try:
        w.wait_for(r"scripted-model")
        assert "approval" not in w.screen()
        caller, _ = client_answering(chatd, None)
        with caller:  # a tool in another session asks; nothing is typed in the chat
            running = Background(terminal, caller, f"rm -r {victim}", other)
            [pending] = wait_pending(chatd)
            shown = w.wait_for(r"1 approval pending")
            assert [x for x in shown.splitlines() if x.strip()][-1].startswith("scripted-model")
            chatd.call("approvals.respond", {"id": pending["id"], "choice": "deny"})
            running.result()
        deadline = time.monotonic() + 20
        while "approval pending" in w.screen() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert "approval pending" not in w.screen()
        w.type("/quit")
        w.wait_for(r"\[exit 0\]")
    finally:
        w.close()
    assert victim.exists()


def test_a_running_tool_line_counts_its_seconds(
    chatd: DaemonProcess, model: ScriptedModelServer
) -> None:
    model.push(call_tools(tool_call("terminal", {"command": "sleep 5"})), reply("slept well"))
    t = chat_on_terminal(chatd, "-m", "have a nap")
    try:
        t.expect(r"⚙ terminal\(command='sleep 5'\) \S [1-4]s")
        t.expect(r"⚙ terminal\(command='sleep 5'\) ✓")
        t.expect("slept well")
        assert t.wait() == 0
    finally:
        t.close()
