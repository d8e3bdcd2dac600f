"""The sandbox's rules without a daemon: the levels a call gets, the Landlock plan that grants
them (Landlock only allows, so hidden paths are left out by granting their siblings), the
allow-listed environment, and the launcher applying a plan to a real process.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hermesd.sandbox import landlock_exec as ll
from hermesd.sandbox.confine import LAUNCHER, landlock_abi
from hermesd.sandbox.policy import (
    DaemonPlaces,
    SandboxSettings,
    check_widening,
    rules,
    tool_environment,
)


def _tree(tmp_path: Path) -> dict[str, Path]:
    home = tmp_path / "user"
    (home / ".hermes" / "plugins").mkdir(parents=True)
    (home / ".hermes" / ".env").write_text("K=v\n")
    (home / "project").mkdir()
    (home / "notes.txt").write_text("notes\n")
    (home / "link").symlink_to(home / ".hermes")
    return {"home": home, "hermes": home / ".hermes", "project": home / "project"}


def _granted(plan: list[tuple[str, int, bool | None]]) -> dict[str, int]:
    return {path: rights for path, rights, _ in plan}


def test_a_hidden_folder_is_left_out_by_granting_its_siblings(tmp_path: Path) -> None:
    t = _tree(tmp_path)
    plan = _granted(ll.plan([(str(t["hermes"]), "none")], 7))
    assert str(t["hermes"]) not in plan
    assert plan[str(t["home"])] == ll.READ_DIR  # listable, but no file right that would inherit
    assert plan[str(t["project"])] & ll.READ_FILE and plan[str(t["home"] / "notes.txt")]
    assert str(t["home"] / "link") not in plan  # a symlink is judged where it points
    assert plan["/usr"] == ll.level_rights("read", 7)


def test_a_writable_workspace_holding_the_home_keeps_the_home_hidden(tmp_path: Path) -> None:
    t = _tree(tmp_path)
    plan = _granted(ll.plan([(str(t["home"]), "write"), (str(t["hermes"]), "none")], 7))
    assert plan[str(t["home"])] == ll.READ_DIR  # no create/remove right in the folder itself
    assert plan[str(t["project"])] == ll.handled(7)
    assert str(t["hermes"]) not in plan


def test_a_writable_folder_inside_a_readable_one_needs_no_expansion(tmp_path: Path) -> None:
    t = _tree(tmp_path)
    plan = ll.plan([(str(t["project"]), "write")], 7)
    assert [p for p, _, _ in plan] == ["/", str(t["project"])]


def test_rules_hide_the_home_socket_and_denied_paths_and_keep_the_install_read_only(
    tmp_path: Path,
) -> None:
    t = _tree(tmp_path)
    places = DaemonPlaces(
        t["hermes"], tmp_path / "run" / "hermesd.sock", t["hermes"] / "tmp", (tmp_path / "venv",)
    )
    settings = SandboxSettings(
        writable=(str(tmp_path / "cache"),), readable_deny=(str(t["home"] / "notes.txt"),)
    )
    got = dict(rules(settings, places, t["project"], None))
    assert _level(got, t["hermes"]) == "none" and _level(got, tmp_path / "run") == "none"
    assert _level(got, t["home"] / "notes.txt") == "none"
    assert got[str(t["project"])] == "write" and got[str(tmp_path / "cache")] == "write"
    assert _level(got, tmp_path / "venv") == "read"  # bound back into the private /tmp
    assert "/usr/lib" not in got  # read inside read: no rule needed
    in_workspace = DaemonPlaces(t["hermes"], None, t["hermes"] / "tmp", (t["project"] / ".venv",))
    kept = dict(rules(SandboxSettings(), in_workspace, t["project"], None))
    assert kept[str(t["project"] / ".venv")] == "read"  # read-only inside the writable workspace
    read_only = dict(
        rules(SandboxSettings(mode="read-only", writable=("/x",)), places, t["project"], None)
    )
    assert _level(read_only, t["project"]) == "read" and "/x" not in read_only  # nothing written
    default_ws = t["hermes"] / "workspace"
    hidden_ws = dict(rules(SandboxSettings(mode="read-only"), places, default_ws, None))
    assert hidden_ws[str(default_ws)] == "read"  # readable although $HERMES_HOME is hidden


def test_a_programs_widening_writes_in_read_only_mode_and_lifts_readable_deny(
    tmp_path: Path,
) -> None:
    t = _tree(tmp_path)
    places = DaemonPlaces(t["hermes"], None, t["hermes"] / "tmp")
    settings = SandboxSettings(mode="read-only", readable_deny=(str(t["home"] / "notes.txt"),))
    got = dict(rules(settings, places, t["project"], None, [str(tmp_path / "w")], [str(t["home"])]))
    assert got[str(tmp_path / "w")] == "write"
    assert str(t["home"] / "notes.txt") not in got  # the deny below a readable entry is lifted
    assert got[str(t["hermes"])] == "none"  # never the daemon's own places


def test_the_credential_stores_under_home_are_hidden_unless_readable_allow_lifts_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = _tree(tmp_path)
    monkeypatch.setenv("HOME", str(t["home"]))
    places = DaemonPlaces(t["hermes"], None, t["hermes"] / "tmp")
    got = dict(rules(SandboxSettings(), places, t["project"], None))
    for store in (".ssh", ".gnupg", ".aws", ".kube", ".config/gh", ".docker/config.json"):
        assert got[str(t["home"] / store)] == "none", store
    lifted = dict(rules(SandboxSettings(readable_allow=("~/.aws",)), places, t["project"], None))
    assert str(t["home"] / ".aws") not in lifted and lifted[str(t["home"] / ".ssh")] == "none"


def test_git_hooks_and_config_of_a_writable_root_are_read_only_when_asked_for(
    tmp_path: Path,
) -> None:
    t = _tree(tmp_path)
    (t["project"] / ".git" / "hooks").mkdir(parents=True)
    (t["project"] / ".git" / "config").write_text("[core]\n")
    places = DaemonPlaces(t["hermes"], None, t["hermes"] / "tmp")
    got = dict(rules(SandboxSettings(), places, t["project"], None))
    assert got[str(t["project"])] == "write"
    assert got[str(t["project"] / ".git" / "hooks")] == "read"
    assert got[str(t["project"] / ".git" / "config")] == "read"
    nested = t["home"] / "project" / "checkout"
    (nested / ".git" / "hooks").mkdir(parents=True)
    deeper = nested / "vendor" / "lib"
    (deeper / ".git" / "hooks").mkdir(parents=True)
    got = dict(rules(SandboxSettings(), places, t["project"], None))
    assert got[str(nested / ".git" / "hooks")] == "read"  # a checkout one folder down
    assert str(deeper / ".git" / "hooks") not in got  # deeper ones are not looked for
    landlock = dict(rules(SandboxSettings(), places, t["project"], None, protect_git=False))
    assert str(t["project"] / ".git" / "hooks") not in landlock
    read_only = dict(rules(SandboxSettings(mode="read-only"), places, t["project"], None))
    assert str(t["project"] / ".git" / "hooks") not in read_only  # read already


def test_a_widening_into_the_daemons_places_is_refused(tmp_path: Path) -> None:
    t = _tree(tmp_path)
    places = DaemonPlaces(
        t["hermes"], tmp_path / "run" / "s.sock", t["hermes"] / "tmp", (tmp_path / "venv",)
    )
    for writable, readable in [
        ([str(t["hermes"] / "plugins")], []),
        ([], [str(t["hermes"])]),
        ([], [str(tmp_path / "run")]),
        ([str(tmp_path / "venv" / "lib")], []),
        (["relative"], []),
    ]:
        with pytest.raises(ValueError):
            check_widening(places, writable, readable)
    check_widening(places, [str(t["project"])], [str(tmp_path / "venv" / "lib")])


def test_a_workspace_that_is_the_home_stays_hidden(tmp_path: Path) -> None:
    t = _tree(tmp_path)
    places = DaemonPlaces(t["hermes"], None, t["hermes"] / "tmp")
    assert _level(dict(rules(SandboxSettings(), places, t["hermes"], None)), t["hermes"]) == "none"


def _level(got: dict[str, str], path: Path | str) -> str:
    """The level the deepest rule at or above ``path`` gives it."""
    here = Path(path)
    while str(here) not in got:
        here = here.parent
    return got[str(here)]


def test_tmp_and_the_runtime_folders_are_hidden_but_a_workspace_in_them_is_not(
    tmp_path: Path,
) -> None:
    t = _tree(tmp_path)
    runtime = (Path("/run/user"), tmp_path / "xdg-runtime")
    places = DaemonPlaces(t["hermes"], None, t["hermes"] / "tmp", (), runtime)
    got = dict(rules(SandboxSettings(), places, t["project"], None))
    for hidden in ("/tmp", "/var/tmp", "/run/user", tmp_path / "xdg-runtime" / "bus"):
        assert _level(got, hidden) == "none", hidden
    assert _level(got, t["project"]) == "write"
    assert _level(got, "/run/systemd") == "read"


def test_a_workspace_that_is_tmp_itself_stays_the_workspace(tmp_path: Path) -> None:
    places = DaemonPlaces(tmp_path / "hermes", None, tmp_path / "hermes" / "tmp")
    assert dict(rules(SandboxSettings(), places, Path("/tmp"), None))["/tmp"] == "write"


def test_the_environment_is_an_allow_list_without_secrets() -> None:
    environ = {
        "PATH": "/bin",
        "HOME": "/home/a",
        "LC_ALL": "C",
        "OPENAI_API_KEY": "sk-1",
        "GOPATH": "/go",
        "GH_TOKEN": "ghp",
        "FROM_DOTENV": "x",
        "TERM": "dotenv-secret-value",
        "OTHER": "1",
    }
    settings = SandboxSettings(env_passthrough=("GOPATH", "GH_TOKEN", "FROM_DOTENV"))
    env = tool_environment(environ, settings, {"FROM_DOTENV": "x", "S": "dotenv-secret-value"})
    assert env == {"PATH": "/bin", "HOME": "/home/a", "LC_ALL": "C", "GOPATH": "/go"}


@pytest.mark.skipif(landlock_abi() < 6, reason="needs Landlock ABI 6")
def test_the_launcher_confines_and_marks_the_program_it_runs(tmp_path: Path) -> None:
    t = _tree(tmp_path)
    script = (
        f"cat {t['home']}/notes.txt; cat {t['hermes']}/.env; echo w > {t['project']}/w && "
        f"echo wrote; echo x > {t['home']}/x; grep Seccomp_filters /proc/self/status; kill -0 1"
    )
    done = subprocess.run(
        [
            sys.executable,
            "-I",
            "-S",
            LAUNCHER,
            str(landlock_abi()),
            f"none={t['hermes']}",
            f"write={t['project']}",
            "--",
            "/bin/sh",
            "-c",
            script,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "notes" in done.stdout and "wrote" in done.stdout
    assert "K=v" not in done.stdout and not (t["home"] / "x").exists()
    assert "Seccomp_filters:\t1" in done.stdout
    assert "Operation not permitted" in done.stderr  # pid 1 is outside the sandbox


def test_the_launcher_refuses_a_malformed_command_line() -> None:
    done = subprocess.run(
        [sys.executable, "-I", "-S", LAUNCHER, "7", "read=/"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 126 and "usage" in done.stderr


def test_a_call_started_in_a_folder_of_the_private_tmp_can_still_read_it(tmp_path: Path) -> None:
    # tmp_path lies in /tmp, which each call gets empty: the call's own cwd is kept readable,
    # never a hidden one (the daemon's home) and never more than read
    t = _tree(tmp_path)
    places = DaemonPlaces(t["hermes"], None, t["hermes"] / "tmp")
    work = tmp_path / "work"
    work.mkdir()
    got = dict(rules(SandboxSettings(), places, t["project"], None, cwd=work))
    assert got[str(work.resolve())] == "read"
    inside = t["hermes"] / "plugins"
    hidden = dict(rules(SandboxSettings(), places, t["project"], None, cwd=inside))
    assert hidden.get(str(inside.resolve())) != "read", hidden


def test_a_workspace_in_the_private_tmp_that_is_also_the_cwd_stays_writable(
    tmp_path: Path,
) -> None:
    t = _tree(tmp_path)
    places = DaemonPlaces(t["hermes"], None, t["hermes"] / "tmp")
    work = tmp_path / "ws"
    work.mkdir()
    got = dict(rules(SandboxSettings(), places, work, None, cwd=work))
    assert got[str(work.resolve())] == "write"
