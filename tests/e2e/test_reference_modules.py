"""The reference modules plugins import (``hermes_constants``, ``hermes_cli.config``,
``hermes_state``, ``agent.memory_provider``, …), provided by hermesd inside the daemon, and the
``ctx`` attributes plugins probe, on a real hermesd with a plugin that uses them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.approvals import tool
from tests.support.daemon import (
    DaemonProcess,
    checkout_pythonpath,
    send_and_follow,
    short_tmpdir,
    start_daemon,
)
from tests.support.modelserver import ScriptedModelServer, model_config, reply
from tests.support.plugin_factory import write_plugin

PROBE = """
import json, os
from pathlib import Path

def probe(args, session_id=None):
    import hermes_constants
    from hermes_cli import config as hconfig
    from hermes_cli import plugins as hplugins
    from gateway.session_context import get_session_env
    from agent.memory_provider import MemoryProvider
    from agent.context_engine import ContextEngine, sanitize_memory_context
    from agent.redact import redact_sensitive_text
    import hermes_state
    cfg = hconfig.load_config()
    out = {
        "home": str(hermes_constants.get_hermes_home()),
        "module_file": hermes_constants.__file__,
        "actor": hconfig.cfg_get(cfg, "plugins", "psy", "actor_id"),
        "missing": hconfig.cfg_get(cfg, "plugins", "nope", "x", default="dflt"),
        "version": cfg.get("_config_version"),
        "valid_hooks": "pre_tool_call" in hplugins.VALID_HOOKS,
        "plugins": sorted(hplugins.get_plugin_manager()._plugins),
        "cli_ref": hplugins.get_plugin_manager()._cli_ref,
        "session_env": get_session_env("HERMES_SESSION_ID"),
        "redacted": redact_sensitive_text("key sk-abcdefghijklmnopqrstuvwxyz0123456789"),
        "sanitized_len": len(sanitize_memory_context("x" * 9000)),
    }
    try:
        hconfig.save_config(cfg)
    except NotImplementedError as exc:
        out["save_config"] = str(exc)

    class Mem(MemoryProvider):
        pass
    try:
        Mem()
    except TypeError as exc:
        out["abstract"] = str(exc)

    db = hermes_state.SessionDB()
    out["sessions"] = [(s["id"], s["message_count"]) for s in db.list_sessions_rich()]
    wanted = args.get("session")
    if wanted:
        out["messages"] = [(m["role"], m["content"]) for m in db.get_messages(wanted)]
    try:
        db.set_session_title(wanted or "x", "new")
    except NotImplementedError as exc:
        out["read_only"] = str(exc)
    return json.dumps(out)

def register(ctx):
    ctx.register_tool("refmods_probe", "refmods", {
        "description": "Report what the reference modules say",
        "parameters": {"type": "object", "properties": {"session": {"type": "string"}}}},
        probe)
    home = Path(os.environ["HERMES_HOME"])
    (home / "ctx-probe.json").write_text(json.dumps({
        "config": ctx.config,
        "receives_messages": ctx.context_engine_tool_handlers_receive_messages,
    }))
    ctx.on_unload(lambda: (home / "unloaded.txt").write_text("bye"))
    from tools.registry import registry
    registry.register("refmods_via_registry", "refmods", {
        "description": "Dispatch refmods_probe through the reference registry",
        "parameters": {"type": "object", "properties": {}}},
        lambda args: json.dumps({
            "dispatched": json.loads(registry.dispatch("refmods_probe", {}))["home"],
            "definitions": [d["function"]["name"]
                            for d in registry.get_definitions(["refmods_probe"])]}))
"""

CONFIG_EXTRA = """
_config_version: 7
plugins:
  psy:
    actor_id: actor-42
  entries:
    refmods:
      colour: blue
"""


@pytest.fixture(scope="module")
def refd(model: ScriptedModelServer) -> Iterator[DaemonProcess]:
    home = short_tmpdir("rm-")
    # it names MemoryProvider, so it declares its kind: else it would be a memory provider
    manifest = {"name": "refmods", "version": "1.0.0", "kind": "standalone"}
    write_plugin(home / "plugins", "refmods", PROBE, manifest=manifest)
    daemon = start_daemon(home, config=model_config(model.url, timeout=5) + CONFIG_EXTRA)
    daemon.call("plugins.list")  # the plugins load after start-up; this waits for them
    yield daemon
    daemon.stop()


def probe(daemon: DaemonProcess, **params: Any) -> dict[str, Any]:
    with daemon.client() as c:
        result = tool(c, "refmods_probe", params.pop("args", {}), **params)
    assert isinstance(result, dict), result
    return result


def test_reference_modules_are_hermesds_and_read_its_home_and_config(refd: DaemonProcess) -> None:
    out = probe(refd)
    assert out["home"] == str(refd.home)
    assert "/hermesd/plugins/compat/" in out["module_file"]
    assert out["actor"] == "actor-42"
    assert out["missing"] == "dflt"
    assert out["version"] == 7
    assert out["valid_hooks"] is True
    assert "refmods" in out["plugins"]
    assert out["cli_ref"] is None


def test_plugin_config_sections_are_settings_not_unknown_keys(refd: DaemonProcess) -> None:
    log = refd.log()
    assert "unknown setting 'plugins.psy'" not in log
    assert "unknown setting 'plugins.entries'" not in log
    assert "unknown setting '_config_version'" not in log


def test_unsupported_reference_functions_raise_not_implemented_naming_hermesd(
    refd: DaemonProcess,
) -> None:
    out = probe(refd)
    assert out["save_config"].startswith(
        "hermes_cli.config.save_config is not available in hermesd"
    )
    assert "read-only view of hermesd's sessions" in out["read_only"]


def test_memory_provider_keeps_the_reference_abstract_methods(refd: DaemonProcess) -> None:
    out = probe(refd)
    for name in ("get_tool_schemas", "initialize", "is_available", "name"):
        assert name in out["abstract"]


def test_redaction_and_memory_context_limits_match_the_reference(refd: DaemonProcess) -> None:
    out = probe(refd)
    assert "sk-abcdefghijklmnopqrstuvwxyz0123456789" not in out["redacted"]
    assert out["sanitized_len"] == 4000 + 1500 + len(
        "\n...[memory provider context truncated]...\n"
    )


def test_session_db_and_session_env_see_hermesds_sessions(
    refd: DaemonProcess, model: ScriptedModelServer
) -> None:
    model.push(reply("stored answer"))
    with refd.client() as c:
        sid = c.call("session.create")["id"]
        send_and_follow(c, sid, "remember this")
    out = probe(refd, args={"session": sid}, session_id=sid)
    assert out["session_env"] == sid
    assert (sid, 2) in [tuple(s) for s in out["sessions"]]
    assert [tuple(m) for m in out["messages"]] == [
        ("user", "remember this"),
        ("assistant", "stored answer"),
    ]


def test_ctx_config_and_probed_attributes(refd: DaemonProcess) -> None:
    seen = json.loads((refd.home / "ctx-probe.json").read_text())
    assert seen == {"config": {"colour": "blue"}, "receives_messages": True}


def test_on_unload_runs_when_plugins_reload(refd: DaemonProcess) -> None:
    assert not (refd.home / "unloaded.txt").exists()
    refd.call("plugins.reload")
    assert (refd.home / "unloaded.txt").read_text() == "bye"


def test_hermesctl_does_not_get_the_reference_modules() -> None:
    code = (
        "import importlib.util, hermesctl.cli, hermesctl.client; "
        "print([importlib.util.find_spec(m) is None for m in "
        "('hermes_cli', 'hermes_constants', 'hermes_state')])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={"PYTHONPATH": checkout_pythonpath(), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.strip() == "[True, True, True]"


def test_on_unload_runs_when_the_daemon_stops() -> None:
    home = short_tmpdir("ru-")
    write_plugin(
        home / "plugins",
        "bye",
        """
import os
from pathlib import Path

def register(ctx):
    home = Path(os.environ["HERMES_HOME"])
    ctx.on_unload(lambda: (home / "stopped.txt").write_text("bye"))
""",
    )
    daemon = start_daemon(home)
    assert not (home / "stopped.txt").exists()
    assert daemon.stop() == 0
    assert (home / "stopped.txt").read_text() == "bye"


def test_tools_registered_through_the_reference_registry_belong_to_the_plugin(
    refd: DaemonProcess,
) -> None:
    with refd.client() as c:
        result = tool(c, "refmods_via_registry", {})
    assert result == {"dispatched": str(refd.home), "definitions": ["refmods_probe"]}
    plugins = {p["key"]: p for p in refd.call("plugins.list")["plugins"]}
    assert "refmods_via_registry" in plugins["refmods"]["tools"]


def test_an_installed_hermes_agent_is_not_shadowed() -> None:
    fake = short_tmpdir("rf-")
    (fake / "hermes_cli").mkdir(parents=True)
    (fake / "hermes_cli" / "__init__.py").write_text("REAL = True\n")
    home = short_tmpdir("rh-")
    write_plugin(
        home / "plugins",
        "which",
        """
import json, os
from pathlib import Path

def register(ctx):
    import hermes_cli
    try:
        import hermes_constants
        ours = hermes_constants.__file__
    except ImportError:
        ours = None
    Path(os.environ["HERMES_HOME"], "which.json").write_text(json.dumps(
        {"real": getattr(hermes_cli, "REAL", False), "constants": ours}))
""",
    )
    daemon = start_daemon(home, env={"PYTHONPATH": checkout_pythonpath(str(fake))})
    try:
        daemon.call("plugins.list")  # waits for the plugins, which load after start-up
        seen = json.loads((home / "which.json").read_text())
    finally:
        daemon.stop()
    assert seen == {"real": True, "constants": None}
