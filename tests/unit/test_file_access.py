"""The file tools' rules, race-free opening and writes, tested on real files in a temp dir.

The daemon-level behaviour (approval prompts, a second client answering, a hostile model) is in
tests/e2e/test_file_tools.py; here each piece is checked on its own, including the dir-fd walk
that stands in for openat2 on kernels without it.
"""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hermesd.runtime.hooks import HookBus
from hermesd.tools import file_access, safeopen
from hermesd.tools.arguments import BadArgs
from hermesd.tools.consent import Consent
from hermesd.tools.file_access import PathGuard, WritePlan
from hermesd.tools.file_policy import Places, read_refusal, write_verdict
from hermesd.tools.registry import ToolRegistry
from hermesd.tools.workspace import resolve_workspace
from tests.support.swap import Flipper


@pytest.fixture(params=["openat2", "walk"])
def opener(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test using this runs twice: with openat2 and with the O_NOFOLLOW walk."""
    if request.param == "walk":
        monkeypatch.setattr(safeopen.openat2, "works", False)
    else:
        assert safeopen.openat2.available(), "this kernel has openat2; the table needs it"
    return str(request.param)


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[dict[str, Path]]:
    root = Path(os.path.realpath(tmp_path))
    places = {
        "home": root / "hermes",
        "user": root / "user",
        "ws": root / "user" / "project",
        "other": root / "user" / "other",
    }
    for p in places.values():
        p.mkdir(parents=True)
    (places["home"] / "config.yaml").write_text("model: {}\n")
    (places["home"] / ".env").write_text("OPENAI_API_KEY=sk-secret\n")
    yield places


@pytest.fixture
def guard(tree: dict[str, Path]) -> PathGuard:
    env = {"HOME": str(tree["user"]), "PATH": "/usr/bin:/bin", "HERMES_PLUGIN_PATH": ""}
    return PathGuard(tree["home"], tree["ws"], Places.of_daemon(tree["home"], env))


# -- the rules --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("where", "key"),
    [
        (".bashrc", "startup"),
        (".profile", "startup"),
        (".zshrc", "startup"),
        (".config/fish/config.fish", "startup"),
        (".ssh/authorized_keys", "ssh"),
        (".config/systemd/user/evil.service", "units"),
        (".local/share/systemd/user/evil.service", "units"),
        (".config/autostart/evil.desktop", "units"),
        (".gitconfig", "git-config"),
        ("project/.envrc", "autorun"),
        ("project/.vscode/tasks.json", "autorun"),
        ("project/.vscode/settings.json", "autorun"),
        ("project/.devcontainer/devcontainer.json", "autorun"),
        ("project/.github/workflows/ci.yml", "autorun"),
        ("project/venv/lib/python3.11/site-packages/evil.pth", "python-startup"),
        ("project/venv/lib/python3.11/site-packages/evil/__init__.py", "site-packages"),
        ("project/sitecustomize.py", "python-startup"),
        ("project/.hermes/plugins/evil/__init__.py", "plugins"),
        ("elsewhere/notes.txt", "outside"),
    ],
)
def test_sensitive_writes_are_asked(tree: dict[str, Path], guard: PathGuard, where: str, key: str):
    verdict = write_verdict(tree["user"] / where, guard.places, tree["ws"])
    assert verdict is not None and not verdict.refuse and verdict.key == key


@pytest.mark.parametrize("where", ["project/.git/hooks/pre-commit", "project/.git/config"])
def test_git_hooks_and_config_are_refused_even_in_the_workspace(
    tree: dict[str, Path], guard: PathGuard, where: str
) -> None:
    verdict = write_verdict(tree["user"] / where, guard.places, tree["user"] / "project")
    assert verdict is not None and verdict.refuse and verdict.key == "git-readonly"


@pytest.mark.parametrize(
    ("path", "key"),
    [
        ("/etc/profile.d/evil.sh", "etc"),
        ("/etc/cron.d/evil", "cron"),
        ("/etc/crontab", "cron"),
        ("/var/spool/cron/crontabs/root", "cron"),
        ("/etc/systemd/system/evil.service", "units"),
        ("/usr/lib/systemd/system/evil.service", "units"),
    ],
)
def test_system_targets_are_asked(tree: dict[str, Path], guard: PathGuard, path: str, key: str):
    verdict = write_verdict(Path(path), guard.places, tree["ws"])
    assert verdict is not None and verdict.key == key


def test_hermes_home_is_asked_except_its_workspace(tree: dict[str, Path], guard: PathGuard):
    home = tree["home"]
    default_ws = resolve_workspace(home, None)
    assert default_ws == home / "workspace"
    assert stat.S_IMODE(default_ws.stat().st_mode) == 0o700
    assert write_verdict(default_ws / "notes.txt", guard.places, default_ws) is None
    for inside in ("plugins/evil/__init__.py", "skills/x/SKILL.md", "memories/MEMORY.md"):
        verdict = write_verdict(home / inside, guard.places, default_ws)
        assert verdict is not None and verdict.key.startswith("hermes-"), inside
    own = write_verdict(home / "config.yaml", guard.places, default_ws)
    assert own is not None and own.refuse


def test_plugin_path_folders_and_the_install_are_asked(tree: dict[str, Path]) -> None:
    extra = tree["user"] / "more-plugins"
    env = {"HOME": str(tree["user"]), "PATH": "", "HERMES_PLUGIN_PATH": f"{extra}:relative/x"}
    places = Places.of_daemon(tree["home"], env)
    assert places.plugin_path == (extra,)
    verdict = write_verdict(extra / "p" / "__init__.py", places, tree["user"])
    assert verdict is not None and verdict.key == "plugin-path"
    package = Path(os.path.realpath(file_access.__file__)).parent
    verdict = write_verdict(package / "planted.py", places, Path("/"))
    assert verdict is not None and verdict.key == "install"


def test_plain_writes_inside_the_workspace_are_allowed(tree: dict[str, Path], guard: PathGuard):
    for inside in ("a.txt", "src/app.py", ".env", "docs/.profile.md", "git/hooks/x"):
        assert write_verdict(tree["ws"] / inside, guard.places, tree["ws"]) is None, inside


@pytest.mark.parametrize(
    "where",
    [
        "user/.ssh/id_ed25519",
        "user/.ssh/config",
        "user/other/.env",
        "user/project/.env.production",
        "user/.netrc",
        "user/.pgpass",
        "user/.aws/credentials",
        "user/.config/gcloud/credentials.db",
        "user/.docker/config.json",
        "user/.kube/config",
        "user/.git-credentials",
        "user/.local/share/keyrings/login.keyring",
        "user/.mozilla/firefox/x.default/logins.json",
        "user/.config/google-chrome/Default/Cookies",
        "hermes/config.yaml",
        "hermes/.env",
        "hermes/state.db",
        "hermes/state.db-wal",
    ],
)
def test_secret_reads_are_refused(tree: dict[str, Path], guard: PathGuard, where: str) -> None:
    verdict = read_refusal(tree["home"].parent / where, guard.places)
    assert verdict is not None and verdict.refuse


def test_system_secrets_are_refused(guard: PathGuard) -> None:
    for path in ("/etc/shadow", "/etc/gshadow", "/proc/1/environ", "/proc/self/mem"):
        assert read_refusal(Path(path), guard.places) is not None, path
    for path in ("/etc/passwd", "/proc/cpuinfo", "/usr/lib/os-release"):
        assert read_refusal(Path(path), guard.places) is None, path


def test_env_templates_and_ordinary_files_may_be_read(tree: dict[str, Path], guard: PathGuard):
    for name in (".env.example", ".env.sample", "README.md", "environment.py"):
        assert read_refusal(tree["ws"] / name, guard.places) is None, name


# -- opening without following symlinks ------------------------------------------------------


def test_a_symlink_on_the_way_is_refused_not_followed(opener: str, tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "f").write_text("inside")
    (tmp_path / "secret").write_text("outside")
    (tmp_path / "dirlink").symlink_to(tmp_path / "real")
    (tmp_path / "real" / "filelink").symlink_to(tmp_path / "secret")
    root = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fd = safeopen.open_beneath(root, "real/f", os.O_RDONLY)
        assert os.read(fd, 10) == b"inside"
        os.close(fd)
        for path in ("dirlink/f", "real/filelink", "real/../secret", "/etc/passwd"):
            with pytest.raises(OSError):
                os.close(safeopen.open_beneath(root, path, os.O_RDONLY))
    finally:
        os.close(root)


def test_missing_directories_are_made_with_an_exact_mode(opener: str, tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        root = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
        os.close(safeopen.make_dirs(root, ["a", "b"], 0o700))
        (tmp_path / "link").symlink_to(tmp_path / "a")
        with pytest.raises(OSError):
            safeopen.make_dirs(root, ["link", "c"], 0o700)
        os.close(root)
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "a" / "b").stat().st_mode) == 0o700
    assert not (tmp_path / "a" / "c").exists()


# -- writes ----------------------------------------------------------------------------------


def _plan(guard: PathGuard, raw: str, ws: Path) -> Consent:
    return file_access.plan_write(guard, raw, ws)


@pytest.mark.parametrize("umask", [0o000, 0o022, 0o077])
def test_created_files_are_0600_and_directories_0700_whatever_the_umask(
    opener: str, tree: dict[str, Path], guard: PathGuard, umask: int
) -> None:
    old = os.umask(umask)
    try:
        consent = _plan(guard, "new/dir/file.txt", tree["ws"])
        assert consent.ask is None and consent.refuse is None
        assert file_access.write(guard, consent.plan, b"hi\n", append=False) is True
    finally:
        os.umask(old)
    assert stat.S_IMODE((tree["ws"] / "new/dir/file.txt").stat().st_mode) == 0o600
    assert stat.S_IMODE((tree["ws"] / "new/dir").stat().st_mode) == 0o700
    assert stat.S_IMODE((tree["ws"] / "new").stat().st_mode) == 0o700


def test_an_existing_file_keeps_its_mode(tree: dict[str, Path], guard: PathGuard) -> None:
    target = tree["ws"] / "script.sh"
    target.write_text("old\n")
    target.chmod(0o755)
    file_access.write(guard, _plan(guard, "script.sh", tree["ws"]).plan, b"new\n", append=False)
    assert target.read_text() == "new\n" and stat.S_IMODE(target.stat().st_mode) == 0o755


def test_an_approved_target_replaced_afterwards_is_not_written(
    opener: str, tree: dict[str, Path], guard: PathGuard
) -> None:
    target = tree["user"] / ".bashrc"
    target.write_text("# mine\n")
    consent = _plan(guard, str(target), tree["ws"])
    assert consent.ask is not None and "shell start-up file" in consent.ask
    assert consent.rule_key == f"write_file:startup:{target}"
    target.rename(target.with_name("kept"))  # kept alive, so its inode number is not reused
    target.write_text("# a different file now\n")  # a new inode at the approved path
    with pytest.raises(BadArgs, match="replaced after the approval"):
        file_access.write(guard, consent.plan, b"evil\n", append=False)
    assert target.read_text() == "# a different file now\n"


def test_an_approved_new_file_that_appears_meanwhile_is_not_written(
    tree: dict[str, Path], guard: PathGuard
) -> None:
    target = tree["user"] / ".ssh" / "authorized_keys"
    consent = _plan(guard, str(target), tree["ws"])
    assert consent.ask is not None
    target.parent.mkdir()
    target.write_text("someone else's key\n")
    with pytest.raises(BadArgs, match="appeared after the approval"):
        file_access.write(guard, consent.plan, b"ssh-ed25519 AAAA\n", append=False)
    assert target.read_text() == "someone else's key\n"


def test_hard_links_to_own_files_are_refused_and_others_asked(
    tree: dict[str, Path], guard: PathGuard
) -> None:
    os.link(tree["home"] / "config.yaml", tree["ws"] / "innocent.yaml")
    refused = _plan(guard, "innocent.yaml", tree["ws"])
    assert refused.refuse is not None and "hermesd's own file" in refused.refuse
    (tree["other"] / "shared.txt").write_text("shared\n")
    os.link(tree["other"] / "shared.txt", tree["ws"] / "linked.txt")
    asked = _plan(guard, "linked.txt", tree["ws"])
    assert asked.ask is not None and "hard links" in asked.ask


def test_a_file_hard_linked_into_place_after_planning_is_not_overwritten(
    tree: dict[str, Path], guard: PathGuard
) -> None:
    target = tree["ws"] / "notes.txt"
    target.write_text("mine\n")
    consent = _plan(guard, "notes.txt", tree["ws"])
    target.rename(tree["ws"] / "kept.txt")
    os.link(tree["home"] / "config.yaml", target)
    with pytest.raises(BadArgs, match="hermesd's own file"):
        file_access.write(guard, consent.plan, b"approvals: {mode: 'off'}\n", append=False)
    assert (tree["home"] / "config.yaml").read_text() == "model: {}\n"


def test_a_hard_linked_secret_is_not_read(tree: dict[str, Path], guard: PathGuard) -> None:
    (tree["user"] / ".ssh").mkdir()
    (tree["user"] / ".ssh" / "id_ed25519").write_text("PRIVATE KEY\n")
    os.link(tree["user"] / ".ssh" / "id_ed25519", tree["ws"] / "key.txt")
    with pytest.raises(BadArgs, match="hard link"):
        file_access.read_bytes(guard, "key.txt", tree["ws"], 1 << 20)


def test_devices_and_fifos_are_not_opened(tree: dict[str, Path], guard: PathGuard) -> None:
    os.mkfifo(tree["ws"] / "pipe")
    with pytest.raises(BadArgs, match="not a regular file"):
        file_access.read_bytes(guard, "pipe", tree["ws"], 1 << 20)
    with pytest.raises(BadArgs, match="not a regular file"):
        file_access.read_bytes(guard, "/dev/zero", tree["ws"], 1 << 20)
    assert _plan(guard, "pipe", tree["ws"]).refuse == f"{tree['ws'] / 'pipe'} is not a regular file"


@pytest.mark.parametrize("swapped", ["directory", "file"])
def test_a_path_swapped_for_a_symlink_never_redirects_a_write(
    opener: str, tree: dict[str, Path], guard: PathGuard, swapped: str
) -> None:
    """A thread swaps ws/d (or ws/d/config.yaml) with a symlink to $HERMES_HOME (or to its
    config.yaml) non-stop while writes of d/config.yaml are planned and carried out; hermesd's
    config never changes."""
    ws, home = tree["ws"], tree["home"]
    before = (home / "config.yaml").read_bytes()
    (ws / "d").mkdir()
    (ws / "d" / "config.yaml").write_text("the project's own\n")
    if swapped == "directory":
        path, twin = ws / "d", ws / "twin"
        twin.symlink_to(home)
    else:
        path, twin = ws / "d" / "config.yaml", ws / "d" / "twin"
        twin.symlink_to(home / "config.yaml")
    outcomes: dict[str, int] = {}
    with Flipper(path, twin) as flipper:
        for _ in range(300):
            consent = _plan(guard, "d/config.yaml", ws)
            if consent.refuse is not None or consent.ask is not None:
                outcome = "refused or asked"
            else:
                try:
                    file_access.write(guard, consent.plan, b"approvals: {mode: 'off'}\n", False)
                    outcome = "written inside"
                except BadArgs:
                    outcome = "failed safely"
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
    print(f"symlink swap of the {swapped} ({opener}): {flipper.flips} flips, {outcomes}")
    assert (home / "config.yaml").read_bytes() == before, outcomes
    assert sum(outcomes.values()) == 300 and flipper.flips > 0


# -- search ----------------------------------------------------------------------------------


def test_search_never_follows_symlinks_out_of_its_root(
    opener: str, tree: dict[str, Path], guard: PathGuard
) -> None:
    ws = tree["ws"]
    (tree["other"] / "outside.txt").write_text("NEEDLE outside\n")
    (ws / "inside.txt").write_text("NEEDLE inside\n")
    (ws / "out_dir").symlink_to(tree["other"])
    (ws / "out_file.txt").symlink_to(tree["other"] / "outside.txt")
    (ws / ".ssh").mkdir()
    (ws / ".ssh" / "id_rsa").write_text("NEEDLE key\n")
    root, fd = file_access.open_search_root(guard, None, ws)
    found: list[str] = []
    try:
        for here, dir_fd, names in file_access.walk(guard, root, fd, set(), hidden=True):
            for name in names:
                data = file_access.read_beneath(guard, dir_fd, name, 1 << 20)
                if data and b"NEEDLE" in data:
                    found.append(str((here / name).relative_to(ws)))
    finally:
        os.close(fd)
    assert found == ["inside.txt"]


def test_search_root_in_a_secret_place_is_refused(tree: dict[str, Path], guard: PathGuard):
    (tree["user"] / ".ssh").mkdir()
    with pytest.raises(BadArgs, match="Access denied"):
        file_access.open_search_root(guard, str(tree["user"] / ".ssh"), tree["ws"])


# -- the registry's prepare step --------------------------------------------------------------


class Approver:
    def __init__(self, answer: str | None) -> None:
        self.answer = answer
        self.calls: list[tuple[str, dict[str, Any]]] = []

    async def __call__(self, name: str, args: dict[str, Any], session_id: str, **kw: Any):
        self.calls.append((name, kw))
        return self.answer if kw else None


def _registry(approver: Approver | None, consent: Consent, ran: list[Any]) -> ToolRegistry:
    registry = ToolRegistry(HookBus(), approver=approver)

    def handler(args: dict[str, Any], plan: Any = None) -> str:
        ran.append(plan)
        return "done"

    registry.register(
        "touch_file",
        "t",
        {"name": "touch_file", "description": "touch", "parameters": {"type": "object"}},
        handler,
        prepare=lambda args, session_id: consent,
    )
    return registry


def _call(registry: ToolRegistry) -> str:
    return asyncio.run(registry.call("touch_file", {}))


def test_prepare_refusal_blocks_before_anyone_is_asked() -> None:
    ran: list[Any] = []
    approver = Approver(None)
    out = _call(_registry(approver, Consent(refuse="Access denied: no"), ran))
    assert out == '{"error": "Access denied: no"}' and ran == []
    assert approver.calls == []


def test_prepare_ask_goes_to_the_approver_and_a_no_blocks() -> None:
    ran: list[Any] = []
    approver = Approver("BLOCKED: denied")
    consent = Consent(plan="P", ask="write_file to /x: reason", rule_key="write_file:k:/x")
    out = _call(_registry(approver, consent, ran))
    assert "BLOCKED: denied" in out and ran == []
    assert approver.calls[-1] == (
        "touch_file",
        {"asked": "write_file to /x: reason", "rule_key": "write_file:k:/x"},
    )


def test_prepare_ask_with_a_yes_runs_the_handler_with_the_plan() -> None:
    ran: list[Any] = []
    consent = Consent(plan="P", ask="why", rule_key="k")
    assert _call(_registry(Approver(None), consent, ran)) == "done"
    assert ran == ["P"]


def test_prepare_ask_with_nobody_to_ask_fails_closed() -> None:
    ran: list[Any] = []
    out = _call(_registry(None, Consent(plan="P", ask="why", rule_key="k"), ran))
    assert "needs approval and nobody can be asked" in out and ran == []


def test_write_plans_are_not_taken_from_arguments(tree: dict[str, Path], guard: PathGuard):
    """A model cannot pass its own plan: the handler's plan comes from prepare only."""
    from hermesd.daemon import config
    from hermesd.tools.builtin_files import BuiltinFileTools

    tools = BuiltinFileTools(
        home=tree["home"], store=None, config=config.parse(f"terminal:\n  cwd: {tree['ws']}\n")
    )
    forged = WritePlan(tree["user"] / ".bashrc", Path("/"), None, asked=True)
    out = tools.write_file({"path": "ok.txt", "content": "x", "plan": forged})
    assert '"created": true' in out and not (tree["user"] / ".bashrc").exists()
