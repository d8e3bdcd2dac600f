"""Security checks against a real hermesd: the calculator's escape corpus end to end, path
traversal in skill files, plugin names and session ids, symlink tricks in plugin folders, tricky
``.env`` values, and planted secrets that must not reach the log, notifications or the model.

The unit-level pieces live elsewhere and are not repeated: the calculator corpus itself
(tests/unit/test_calculator.py, imported here), basic ``skills.view`` traversal and ``set_env``
round trip (tests/e2e/test_plugins.py, tests/e2e/test_plugin_mgmt.py), and the terminal-``env``
redaction scenario (tests/e2e/test_redaction.py). docs/reliability.md says what is allowed.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from dotenv import dotenv_values

from hermesd.daemon.config import load_dotenv_file
from hermesd.rpc.protocol import Codes, RpcError
from tests.support.approvals import client_answering, tool
from tests.support.daemon import DaemonProcess, short_tmpdir, start_daemon
from tests.support.modelserver import ScriptedModelServer, call_tools, reply, tool_call
from tests.support.plugin_factory import schema, write_plugin
from tests.unit.test_calculator import ESCAPES, SAFETY_BOUND_S

Start = Callable[..., DaemonProcess]

HOSTILE_IDS = [
    "../../etc/passwd",
    "..",
    "/etc/passwd",
    "a/b",
    "x\0y",
    "\0",
    "é" * 5000,
    "A" * 10_000,
    "%2e%2e%2fetc",
    "..\\..\\windows",
]


@pytest.fixture(scope="module")
def secd() -> Iterator[DaemonProcess]:
    """A default daemon with a user skill holding symlinks that point out of its folder."""
    home = short_tmpdir()
    skill = home / "skills" / "demo"
    (skill / "refs").mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: demo\ndescription: a demo skill\n---\n\n# demo\n")
    (skill / "refs" / "notes.md").write_text("inside the skill\n")
    (home / ".env").write_text("DEMO_SETTING=dotenv-value-77\n")
    (skill / "etc_link").symlink_to("/etc")
    (skill / "passwd_link").symlink_to("/etc/passwd")
    (skill / "home_env").symlink_to(home / ".env")
    daemon = start_daemon(home)
    yield daemon
    daemon.stop()


def rpc_error(d: DaemonProcess, method: str, params: dict[str, Any]) -> RpcError:
    with pytest.raises(RpcError) as err:
        d.call(method, params)
    return err.value


# --- the calculator's escape corpus through tools.call --------------------------------------------


def test_calculator_escape_corpus_end_to_end_has_no_escape_and_each_call_is_bounded(
    secd: DaemonProcess,
) -> None:
    assert len(ESCAPES) >= 50
    slowest = 0.0
    escaped: list[tuple[str, Any]] = []
    with secd.client(timeout=30) as c:
        for expression in ESCAPES:
            began = time.monotonic()
            reply_ = c.call("tools.call", {"name": "calculate", "args": {"expression": expression}})
            result = json.loads(reply_["result"])
            slowest = max(slowest, time.monotonic() - began)
            if "result" in result or not str(result.get("error", "")).startswith(
                ("Invalid:", "Division by zero")
            ):
                escaped.append((expression[:80], result))
    print(f"calculator corpus: {len(ESCAPES)} expressions, slowest call {slowest * 1000:.1f} ms")
    assert escaped == []
    assert slowest < SAFETY_BOUND_S
    assert secd.alive() and secd.call("ping") is not None


# --- path traversal ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "file_path",
    [
        "../../.env",
        "refs/../../../.env",
        "/etc/passwd",
        "etc_link/passwd",
        "passwd_link",
        "home_env",
        "refs/\0notes.md",
        "refs/" + "a" * 10_000,
        "refs/../refs/../../demo/../../.env",
    ],
)
def test_skill_file_path_cannot_leave_the_skill_folder(secd: DaemonProcess, file_path: str) -> None:
    view = secd.call("skills.view", {"name": "demo", "file_path": file_path})
    assert view["success"] is False and "content" not in view, view
    assert "root:" not in json.dumps(view) and "dotenv-value-77" not in json.dumps(view)


def test_skill_file_path_inside_the_folder_still_reads(secd: DaemonProcess) -> None:
    view = secd.call("skills.view", {"name": "demo", "file_path": "refs/notes.md"})
    assert view["success"] is True and view["content"] == "inside the skill\n"


@pytest.mark.parametrize("name", HOSTILE_IDS)
def test_hostile_skill_names_are_not_found(secd: DaemonProcess, name: str) -> None:
    view = secd.call("skills.view", {"name": name})
    assert view["success"] is False and "content" not in view


@pytest.mark.parametrize(
    "method",
    ["plugins.info", "plugins.remove", "plugins.enable", "plugins.disable", "plugins.update"],
)
@pytest.mark.parametrize("name", HOSTILE_IDS)
def test_hostile_plugin_names_are_not_found_and_touch_nothing(
    secd: DaemonProcess, method: str, name: str
) -> None:
    assert rpc_error(secd, method, {"name": name}).code == Codes.NOT_FOUND
    assert (secd.home / "skills" / "demo" / "SKILL.md").exists()
    assert not (secd.home / "config.yaml").exists()  # enable/disable did not write anything


@pytest.mark.parametrize(
    "manifest_name",
    ["../escape", "/tmp/abs-escape", "a/b", "..", ".", "x\n", "sub/../../escape", " x", "x\0"],
)
def test_install_refuses_manifest_names_that_are_paths(
    secd: DaemonProcess, manifest_name: str
) -> None:
    source = short_tmpdir("hsrc-")
    write_plugin(source, "src", manifest={"name": manifest_name, "version": "1"})
    (secd.home / "plugins").mkdir(exist_ok=True)
    before = sorted(p.name for p in secd.home.iterdir() if not p.name.startswith("state.db"))
    installed = sorted(p.name for p in (secd.home / "plugins").iterdir())
    err = rpc_error(secd, "plugins.install", {"source": str(source / "src"), "force": True})
    assert err.code == Codes.INVALID_PARAMS
    assert "plugin name" in err.message or "does not parse" in err.message
    assert (
        sorted(p.name for p in secd.home.iterdir() if not p.name.startswith("state.db")) == before
    )
    assert sorted(p.name for p in (secd.home / "plugins").iterdir()) == installed
    assert not Path("/tmp/abs-escape").exists() and not (secd.home / "escape").exists()
    assert list((secd.home / "plugins").glob("*\n*")) == []


@pytest.mark.parametrize(
    "method", ["session.get", "session.history", "session.delete", "session.rename", "session.send"]
)
@pytest.mark.parametrize("sid", HOSTILE_IDS)
def test_hostile_session_ids_are_not_found(secd: DaemonProcess, method: str, sid: str) -> None:
    params: dict[str, Any] = {"session_id": sid}
    if method == "session.rename":
        params["title"] = "x"
    if method == "session.send":
        params["message"] = "hi"
    err = rpc_error(secd, method, params)
    assert err.code in (Codes.NOT_FOUND, Codes.INVALID_PARAMS), (err.code, err.message)
    assert secd.alive()


@pytest.mark.parametrize(
    "where",
    [
        "plugins/planted/__init__.py",
        "plugins/x/../planted.py",
        "skills/demo/../../plugins/planted/__init__.py",
    ],
)
def test_a_tool_cannot_plant_a_plugin(secd: DaemonProcess, where: str) -> None:
    code = "def register(ctx):\n    import os  # would run with the daemon's secrets\n"
    client, asked = client_answering(secd, "deny")
    with client:
        got = tool(client, "write_file", {"path": f"{secd.home}/{where}", "content": code})
    assert got["error"].startswith("BLOCKED: Command denied by user.")
    [request] = asked.requests  # a person was asked, about the resolved plugin path
    assert "plugin directory" in request["description"]
    assert f"{secd.home}/plugins/" in request["description"] and ".." not in request["description"]
    assert not (secd.home / "plugins" / "planted").exists()
    assert not (secd.home / "plugins" / "planted.py").exists()


def test_daemon_still_serves_after_the_traversal_attempts(secd: DaemonProcess) -> None:
    assert secd.call("ping") is not None
    assert secd.call("skills.view", {"name": "demo"})["success"] is True


# --- symlinks in plugin folders -----------------------------------------------------------------

LINKED = f"""
    import json
    from pathlib import Path

    def register(ctx):
        ctx.register_tool("{{tool}}", "{{tool}}", {schema("TOOL")!r} | {{"name": "{{tool}}"}},
                          lambda args: json.dumps({{"data": sorted(
                              p.name for p in (Path(__file__).parent / "data").iterdir())[:3]}}))
"""


def linked_plugin(root: Path, folder: str, tool: str) -> Path:
    path = write_plugin(root, folder, LINKED.replace("{tool}", tool))
    (path / "data").mkdir(exist_ok=True)
    (path / "data" / "a.txt").write_text("a")
    return path


def test_symlinked_plugin_folder_and_manifest_load_but_cannot_be_removed_through_rpc(
    start: Start,
) -> None:
    home, elsewhere = short_tmpdir(), short_tmpdir("hel-")
    (home / "plugins").mkdir()
    target = linked_plugin(elsewhere, "real_folder", "linked_tool")
    (home / "plugins" / "linked").symlink_to(target)  # the whole folder is a link
    manifest_src = linked_plugin(home / "plugins", "manifest_link", "manifest_tool")
    (elsewhere / "manifest.yaml").write_text("name: manifest_link\nversion: 2.0.0\n")
    (manifest_src / "plugin.yaml").unlink()
    (manifest_src / "plugin.yaml").symlink_to(elsewhere / "manifest.yaml")
    d = start(home)
    plugins = {p["key"]: p for p in d.call("plugins.list")["plugins"]}
    assert plugins["real_folder"]["state"] == "loaded"  # the key is the manifest's name
    assert plugins["manifest_link"]["state"] == "loaded"
    assert plugins["manifest_link"]["version"] == "2.0.0"
    # removing would delete outside $HERMES_HOME/plugins: refused, the target is untouched
    assert rpc_error(d, "plugins.remove", {"name": "real_folder"}).code == Codes.CONFLICT
    assert (target / "__init__.py").exists()


def test_plugin_data_symlink_to_etc_is_plugin_code_business_not_a_daemon_read(start: Start) -> None:
    # A plugin's own code may read what the daemon user can read (it runs in-process); the
    # daemon itself never serves a plugin's data files to clients, so a data -> /etc link
    # gives a client nothing a plugin could not give it anyway. Loading is allowed.
    home = short_tmpdir()
    path = write_plugin(home / "plugins", "etc_data", LINKED.replace("{tool}", "etc_tool"))
    (path / "data").symlink_to("/etc")
    d = start(home)
    assert (
        next(p for p in d.call("plugins.list")["plugins"] if p["key"] == "etc_data")["state"]
        == "loaded"
    )


def test_install_refuses_a_source_with_symlinks_pointing_outside_it(secd: DaemonProcess) -> None:
    source = short_tmpdir("hsrc-")
    path = linked_plugin(source, "sneaky", "sneaky_tool")
    (path / "secrets").symlink_to(secd.home / ".env")
    err = rpc_error(secd, "plugins.install", {"source": str(path)})
    assert err.code == Codes.INVALID_PARAMS and "symlink" in err.message
    assert not (secd.home / "plugins" / "sneaky").exists()


def test_install_keeps_symlinks_that_stay_inside_the_source(secd: DaemonProcess) -> None:
    source = short_tmpdir("hsrc-")
    path = linked_plugin(source, "tidy", "tidy_tool")
    (path / "data" / "b.txt").symlink_to("a.txt")
    done = secd.call("plugins.install", {"source": str(path)})
    installed = Path(done["path"])
    assert (installed / "data" / "b.txt").is_symlink()
    assert (installed / "data" / "b.txt").read_text() == "a"


# --- .env values --------------------------------------------------------------------------------

TRICKY_VALUES = {
    "NEWLINE": "one\ntwo",
    "CRLF": "one\r\ntwo\r\n",
    "INJECT": "x\nINJECTED=owned",
    "DQUOTE": 'say "hi"',
    "SQUOTE": "it's",
    "BOTHQ": "\"'\"'",
    "BACKSLASH": "C:\\path\\n\\",
    "TRAILING_BS": "ends with \\",
    "HASH": "value # not a comment",
    "EQUALS": "a=b=c",
    "SPACES": "  padded  ",
    "DOLLAR": "$HOME and $PATH",
    "UNICODE": "ключ 🔑 鍵",
    "TAB": "a\tb",
    "EMPTYISH": " ",
    "EXPORT": "export X=1",
}


def test_tricky_env_values_written_by_set_env_read_back_unchanged(start: Start) -> None:
    home = short_tmpdir()
    hasher = """
        import hashlib, json, os

        def register(ctx):
            ctx.register_tool("env_digest", "env_digest", {
                "name": "env_digest", "description": "Digest of an environment variable value",
                "parameters": {"type": "object", "required": ["name"], "properties": {
                    "name": {"type": "string", "description": "variable"}}}},
                lambda args: json.dumps({"sha": hashlib.sha256(
                    os.environ.get(args["name"], "<unset>").encode()).hexdigest()}))
    """
    write_plugin(home / "plugins", "env_digest", hasher)
    d = start(home)
    d.call("plugins.set_env", {"values": TRICKY_VALUES})
    env_file = home / ".env"
    assert load_dotenv_file(home) == TRICKY_VALUES  # the daemon's own reader
    assert dotenv_values(env_file) == TRICKY_VALUES  # the reference's reader
    assert "INJECTED" not in load_dotenv_file(home)
    d.stop()
    d2 = start(home)  # a restart loads them into the daemon's environment unchanged
    for name, value in TRICKY_VALUES.items():
        got = json.loads(
            d2.call("tools.call", {"name": "env_digest", "args": {"name": name}})["result"]
        )
        assert got["sha"] == hashlib.sha256(value.encode()).hexdigest(), name
    got = json.loads(
        d2.call("tools.call", {"name": "env_digest", "args": {"name": "INJECTED"}})["result"]
    )
    assert got["sha"] == hashlib.sha256(b"<unset>").hexdigest()


# --- planted secrets ----------------------------------------------------------------------------

DOTENV_SECRET = "dotenv-secret-7c1d9e3f"
TOKEN_SECRET = "tok-secret-a8b7c6d5e4"
SK_KEY = "sk-live-0123456789abcdefghijKLMN"
PLANTED = [DOTENV_SECRET, TOKEN_SECRET, SK_KEY]

SPILLER = f"""
    import json, logging, os

    log = logging.getLogger("spiller")

    def sk_output(args, **kw):
        return json.dumps({{"key": "{SK_KEY}", "token": os.environ["DEPLOY_TOKEN"]}})

    def failing(args, **kw):
        raise RuntimeError("cannot use " + os.environ["DEPLOY_TOKEN"] + " or {SK_KEY}")

    def noisy(args, **kw):
        log.warning("dotenv secret %s and key %s", os.environ["MY_DOTENV_SECRET"], "{SK_KEY}")
        print("stdout: " + os.environ["DEPLOY_TOKEN"])
        ctx_ref[0].inject_message("note with " + os.environ["DEPLOY_TOKEN"])
        return json.dumps({{"ok": True}})

    ctx_ref = []

    def register(ctx):
        ctx_ref.append(ctx)
        for name, fn in (("sk_output", sk_output), ("failing", failing), ("noisy", noisy)):
            ctx.register_tool(name, "spiller", {schema("X")!r} | {{"name": name}}, fn)
        ctx.register_hook("transform_tool_result", lambda tool_name, **kw: (
            "transformed " + os.environ["DEPLOY_TOKEN"] if tool_name == "noisy" else None))
        ctx.register_hook("pre_llm_call", lambda user_message, **kw: (
            {{"context": "context " + os.environ["MY_DOTENV_SECRET"]}}
            if "context" in user_message else None))
        ctx.register_hook("post_tool_call", lambda tool_name, result, **kw: log.info(
            "post_tool_call %s saw %s", tool_name, result))
"""


def test_planted_secrets_never_reach_the_log_notifications_or_the_model(start: Start) -> None:
    home = short_tmpdir()
    (home / ".env").write_text(f"MY_DOTENV_SECRET={DOTENV_SECRET}\n")
    write_plugin(home / "plugins", "spiller", SPILLER)
    with ScriptedModelServer() as model:
        d = start(
            home,
            env={"DEPLOY_TOKEN": TOKEN_SECRET},
            config=(f"model:\n  base_url: {model.url}\n  default: scripted\nlog_level: DEBUG\n"),
        )
        script = [
            (call_tools(tool_call("sk_output"), tool_call("failing")), "show me the key"),
            (call_tools(tool_call("noisy")), "make noise with context"),
            (call_tools(tool_call("calculate", {"expression": "2+2"})), "plain maths"),
        ]
        notes: list[Any] = []
        with d.client(timeout=30) as c:
            sid = c.call("session.create")["id"]
            for step, message in script:
                model.push(step, reply("answered"))
                result = c.call(
                    "session.send",
                    {"session_id": sid, "message": message, "wait": True},
                    timeout=30,
                )
                assert result["status"] == "completed", result
            model.push(reply("after the injected note"))
            c.call(
                "session.send", {"session_id": sid, "message": "again", "wait": True}, timeout=30
            )
            notes = [n.params for n in c.notifications(timeout=0.3)]
            history = c.call("session.history", {"session_id": sid})["messages"]
        d.stop()
        bodies = json.dumps(model.requests)
    log = d.log()
    assert "[REDACTED]" in bodies and "stdout: " in log  # the scenario did run
    assert len(model.requests) >= 7
    for secret in PLANTED:
        at = bodies.find(secret)
        assert at < 0, f"{secret} reached the model: {bodies[max(0, at - 300) : at + 50]}"
        assert secret not in json.dumps(notes), f"{secret} reached a notification"
        assert secret not in json.dumps(history), f"{secret} reached the stored history"
        assert secret not in log, f"{secret} reached the daemon log"
