"""Secret sources a plugin registers answer the daemon's own credential lookups.

A directory plugin registers reference-shaped secret sources (subclasses of
``agent.secret_sources.base.SecretSource``): ``vault`` binds names (mapped), ``dump`` brings a
project of them (bulk), ``broken`` raises, ``idle`` is never enabled. With ``secrets.<name>``
enabling them, the model is asked with the key ``vault`` supplied, an MCP server's ``${VAR}``
expands from it, and the reference's precedence holds. The ``/whence NAME`` command says which
source a variable's value came from without showing the value.
"""

from __future__ import annotations

from collections.abc import Callable

import yaml

from tests.support.daemon import DaemonProcess, send_and_follow, short_tmpdir
from tests.support.mcp_helpers import stdio
from tests.support.modelserver import ScriptedModelServer, reply
from tests.support.plugin_factory import write_plugin

Start = Callable[..., DaemonProcess]
KEY = "sk-vault-0123456789abcdef"
MCP_TOKEN = "mcp-token-from-the-vault-42"

PLUGIN = """
import os
from agent.secret_sources.base import FetchResult, SecretSource


class Vault(SecretSource):
    name = "vault"
    label = "Test vault"
    shape = "mapped"

    def fetch(self, cfg, home_path):
        return FetchResult(secrets={
            "OPENAI_API_KEY": "@KEY@",
            "VAULT_MCP_TOKEN": "@MCP_TOKEN@",
            "SHARED_NAME": "mapped-shared-value",
            "PRESET_NAME": "mapped-preset-value",
            "GUARDED_TOKEN": "mapped-guarded-value",
        })


class Dump(SecretSource):
    name = "dump"
    shape = "bulk"

    def fetch(self, cfg, home_path):
        return FetchResult(secrets={
            "SHARED_NAME": "bulk-shared-value",
            "BULK_ONLY": "bulk-only-value",
            "not a name": "bulk-bad-value",
        })

    def protected_env_vars(self, cfg):
        return frozenset({"GUARDED_TOKEN"})


class Broken(SecretSource):
    name = "broken"

    def fetch(self, cfg, home_path):
        raise RuntimeError("the vault is sealed")


class Idle(SecretSource):
    name = "idle"

    def fetch(self, cfg, home_path):
        return FetchResult(secrets={"IDLE_NAME": "idle-value-1234"})


class WrongVersion(SecretSource):
    name = "future"
    api_version = 2

    def fetch(self, cfg, home_path):
        return FetchResult(secrets={"FUTURE_NAME": "future-value-1234"})


def whence(raw):
    value = os.environ.get(raw.strip())
    if value is None:
        return "unset"
    return value.split("-")[0]


def register(ctx):
    for source in (Vault(), Dump(), Broken(), Idle(), WrongVersion()):
        ctx.register_secret_source(source)
    ctx.register_command("whence", whence, description="which source set a variable")
""".replace("@KEY@", KEY).replace("@MCP_TOKEN@", MCP_TOKEN)


def _daemon(start: Start, model: ScriptedModelServer, **secrets_extra: object) -> DaemonProcess:
    home = short_tmpdir("secrets-")
    write_plugin(home / "plugins", "vaults", PLUGIN)
    (home / ".env").write_text("PRESET_NAME=dotenv-preset-value\n")
    secrets = {
        "vault": {"enabled": True},
        "dump": {"enabled": True},
        "broken": {"enabled": True},
        "future": {"enabled": True},
        **secrets_extra,
    }
    config = {
        "model": {"base_url": model.url, "default": "scripted-model"},
        "secrets": secrets,
        "mcp_servers": {"echo": stdio("echo", env={"MY_TOKEN": "${VAULT_MCP_TOKEN}"})},
    }
    return start(home, config=yaml.safe_dump(config))


def _whence(d: DaemonProcess, name: str) -> str:
    with d.client() as c:
        return str(c.call("command.run", {"line": f"/whence {name}"})["output"])


def test_an_enabled_secret_source_supplies_the_models_api_key(
    start: Start, model: ScriptedModelServer
) -> None:
    d = _daemon(start, model)
    d.call("plugins.list")  # waits for the plugins (and their secret sources) to load
    model.push(reply("hello"))
    with d.client() as c:
        sid = c.call("session.create")["id"]
        send_and_follow(c, sid, "hi")
    assert model.request_headers[-1]["authorization"] == f"Bearer {KEY}"
    assert KEY not in d.log()
    assert "secret source 'vault' supplied OPENAI_API_KEY" in d.log()


def test_an_mcp_servers_variable_expands_from_a_secret_source_and_is_redacted(
    start: Start, model: ScriptedModelServer
) -> None:
    d = _daemon(start, model)
    d.call("tools.list")  # plugins loaded, the lazy server started
    out = d.call("tools.call", {"name": "mcp__echo__env", "args": {"name": "MY_TOKEN"}})
    assert "[REDACTED]" in out["result"] and MCP_TOKEN not in out["result"]
    assert MCP_TOKEN not in d.log()


def test_mapped_sources_win_over_bulk_and_the_first_source_keeps_a_name(
    start: Start, model: ScriptedModelServer
) -> None:
    d = _daemon(start, model, sources=["dump", "vault"])
    d.call("plugins.list")
    assert _whence(d, "SHARED_NAME") == "mapped"  # mapped outranks bulk whatever the order
    assert _whence(d, "BULK_ONLY") == "bulk"
    assert "dump' also supplies SHARED_NAME" in d.log()


def test_dotenv_keeps_its_value_unless_the_source_may_override_it(
    start: Start, model: ScriptedModelServer
) -> None:
    d = _daemon(start, model)
    d.call("plugins.list")
    assert _whence(d, "PRESET_NAME") == "dotenv"
    d.stop()
    d = _daemon(start, model, vault={"enabled": True, "override_existing": True})
    d.call("plugins.list")
    assert _whence(d, "PRESET_NAME") == "mapped"


def test_protected_names_disabled_and_refused_sources_supply_nothing(
    start: Start, model: ScriptedModelServer
) -> None:
    d = _daemon(start, model)
    d.call("plugins.list")
    assert _whence(d, "GUARDED_TOKEN") == "unset"
    assert _whence(d, "IDLE_NAME") == "unset"
    assert _whence(d, "FUTURE_NAME") == "unset"
    log = d.log()
    assert "secret-source API v2" in log
    assert "secret source 'broken': fetch raised RuntimeError" in log


def test_a_source_disabled_by_a_reload_takes_its_secrets_back(
    start: Start, model: ScriptedModelServer
) -> None:
    d = _daemon(start, model)
    d.call("plugins.list")
    assert _whence(d, "BULK_ONLY") == "bulk"
    config = yaml.safe_load((d.home / "config.yaml").read_text())
    config["secrets"]["dump"]["enabled"] = False
    (d.home / "config.yaml").write_text(yaml.safe_dump(config))
    d.call("reload")
    assert _whence(d, "BULK_ONLY") == "unset"
    info = d.call("plugins.info", {"name": "vaults"})
    statuses = {p["name"]: p["status"] for p in info["providers"]}
    assert statuses["vault"].startswith("in use: when secrets.<name>.enabled is set")
