"""Hostile manifests and install sources against a real hermesd (issue 18, part 8): an alias
bomb, a list-valued name, ``requires_env: [LD_PRELOAD]``, a plugin shadowing a bundled one,
and ``plugins install fd::17`` / ``ext::sh -c …``. Each fails with a reason on the listing or a
clear error, the daemon stays small and keeps answering, and no plugin code runs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from hermesd.rpc.protocol import Codes, RpcError
from tests.support.daemon import DaemonProcess, run_hermesctl, short_tmpdir
from tests.support.plugin_factory import alias_bomb, write_plugin
from tests.support.reliability import rss_kb

Start = Callable[..., DaemonProcess]
RSS_BOUND_KB = 200 * 1024
MARKER_INIT = """
    from pathlib import Path

    def register(ctx):
        Path(__file__).with_name("registered").touch()
"""


def no_bundled() -> dict[str, str]:
    return {"HERMES_BUNDLED_PLUGINS": str(short_tmpdir("nobundle-"))}


def entries(daemon: DaemonProcess) -> dict[str, dict]:
    return {p["key"]: p for p in daemon.call("plugins.list")["plugins"]}


def ctl(daemon: DaemonProcess, *args: str):
    return run_hermesctl(["--socket", str(daemon.socket), *args], timeout=60)


def rpc_error(daemon: DaemonProcess, method: str, params: dict) -> RpcError:
    with pytest.raises(RpcError) as err:
        daemon.call(method, params)
    return err.value


# --- the alias bomb ---------------------------------------------------------------------------


def test_an_alias_bomb_manifest_fails_to_load_and_the_daemon_stays_small(start: Start) -> None:
    home = short_tmpdir()
    bomb = home / "plugins" / "bomb"
    bomb.mkdir(parents=True)
    (bomb / "plugin.yaml").write_text(alias_bomb())
    (bomb / "__init__.py").write_text("def register(ctx):\n    raise SystemExit('ran')\n")
    write_plugin(home / "plugins", "good")
    daemon = start(home, env=no_bundled())
    rows = entries(daemon)
    assert rows["good"]["state"] == "loaded"
    assert rows["bomb"]["state"] == "error"
    assert rows["bomb"]["reason"] == (
        "Failed to parse plugin.yaml: line 1, column 5: YAML anchors (&l0) are not allowed"
    )
    assert rss_kb(daemon.proc.pid) < RSS_BOUND_KB
    out = ctl(daemon, "plugins", "list")
    assert out.returncode == 0 and "✗ bomb — Failed to parse plugin.yaml" in out.stdout


def test_an_alias_bomb_dropped_in_later_fails_the_reload_only_for_itself(start: Start) -> None:
    home = short_tmpdir()
    write_plugin(home / "plugins", "good")
    daemon = start(home, env=no_bundled())
    bomb = write_plugin(home / "plugins", "bomb", MARKER_INIT)
    (bomb / "plugin.yaml").write_text(alias_bomb())
    result = daemon.call("plugins.reload")
    assert result["loaded"] == ["good"]
    assert [f["key"] for f in result["failed"]] == ["bomb"]
    assert rss_kb(daemon.proc.pid) < RSS_BOUND_KB
    assert not (bomb / "registered").exists()
    assert daemon.call("ping")["pong"] is True


def test_a_skill_whose_front_matter_is_an_alias_bomb_is_listed_without_it(start: Start) -> None:
    home = short_tmpdir()
    skill = home / "skills" / "bomb"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text(f"---\n{alias_bomb()}description: x\n---\n# Bomb\n")
    daemon = start(home, env=no_bundled())
    listed = daemon.call("skills.list")["skills"]
    assert [(s["name"], s["description"]) for s in listed] == [("bomb", "")]
    assert rss_kb(daemon.proc.pid) < RSS_BOUND_KB
    assert "Ignoring the front matter of" in daemon.log()


def test_a_manifest_over_64_kib_is_refused_by_its_size(start: Start) -> None:
    home = short_tmpdir()
    big = write_plugin(home / "plugins", "big", MARKER_INIT)
    with (big / "plugin.yaml").open("ab") as f:
        f.truncate(512 * 1024 * 1024)  # sparse: only a reader would pay for it
    daemon = start(home, env=no_bundled())
    row = entries(daemon)["big"]
    assert row["state"] == "error"
    assert row["reason"] == (
        "Failed to parse plugin.yaml: plugin.yaml is 536870912 bytes; the limit is 65536"
    )
    assert rss_kb(daemon.proc.pid) < RSS_BOUND_KB


# --- field rules ------------------------------------------------------------------------------


def test_a_list_valued_name_fails_the_plugin_with_a_reason_naming_the_field(start: Start) -> None:
    home = short_tmpdir()
    folder = write_plugin(home / "plugins", "listy", MARKER_INIT, manifest="name: [a, b]\n")
    daemon = start(home, env=no_bundled())
    row = entries(daemon)["listy"]
    assert (row["state"], row["reason"]) == (
        "error",
        "Failed to parse plugin.yaml: 'name' must be a string, not a list",
    )
    assert not (folder / "registered").exists()
    info = ctl(daemon, "plugins", "info", "listy")
    assert info.returncode == 0 and "'name' must be a string, not a list" in info.stdout


def test_requires_env_ld_preload_fails_the_plugin_and_cannot_be_set(start: Start) -> None:
    home = short_tmpdir()
    folder = write_plugin(
        home / "plugins",
        "preload",
        MARKER_INIT,
        manifest="name: preload\nrequires_env:\n  - name: LD_PRELOAD\n    secret: true\n",
    )
    daemon = start(home, env=no_bundled())
    row = entries(daemon)["preload"]
    assert row["state"] == "error"
    assert "'requires_env': LD_PRELOAD may not be set for a plugin" in row["reason"]
    assert not (folder / "registered").exists()
    err = rpc_error(daemon, "plugins.set_env", {"values": {"LD_PRELOAD": "/tmp/evil.so"}})
    assert err.code == Codes.INVALID_PARAMS and "LD_PRELOAD may not be set" in err.message
    assert not (home / ".env").exists()


@pytest.mark.parametrize("name", ["LD_PRELOAD", "PYTHONPATH", "HERMES_HOME"])
def test_install_refuses_a_plugin_asking_for_a_refused_variable(start: Start, name: str) -> None:
    daemon = start(env=no_bundled())
    source = write_plugin(
        short_tmpdir("src-"),
        "asker",
        MARKER_INIT,
        manifest=f"name: asker\nrequires_env: [{name}]\n",
    )
    err = rpc_error(daemon, "plugins.install", {"source": str(source)})
    assert err.code == Codes.INVALID_PARAMS and f"{name} may not be set" in err.message
    plugins = daemon.home / "plugins"
    assert not plugins.exists() or list(plugins.iterdir()) == []


# --- shadowing --------------------------------------------------------------------------------


def test_a_user_plugin_shadowing_a_bundled_one_is_warned_about_everywhere(start: Start) -> None:
    bundled_root = short_tmpdir("bundled-")
    bundled = write_plugin(bundled_root, "calc", manifest={"name": "calc", "version": "1.0"})
    home = short_tmpdir()
    mine = write_plugin(home / "plugins", "calc", manifest={"name": "calc", "version": "6.6.6"})
    daemon = start(home, env={"HERMES_BUNDLED_PLUGINS": str(bundled_root)})
    row = entries(daemon)["calc"]
    assert (row["source"], row["version"], row["state"]) == ("user", "6.6.6", "loaded")
    assert row["shadows"] == [{"source": "bundled", "location": str(bundled)}]
    assert row["line"] == "✓ calc v6.6.6 — registered nothing; shadows the bundled plugin"
    warning = (
        f"shadows the plugin of the same key from the bundled source ({bundled}), "
        "which is therefore not loaded"
    )
    assert [w["message"] for w in row["warnings"]] == [warning]
    listing = ctl(daemon, "plugins", "list")
    assert "✓ calc v6.6.6 — registered nothing; shadows the bundled plugin" in listing.stdout
    info = ctl(daemon, "plugins", "info", "calc")
    assert f"  warning:     {warning}" in info.stdout
    log = daemon.log()
    assert (
        "WARNING" in log
        and (
            "Plugin 'calc' from the user source overrides the one from the bundled source "
            f"({mine} is loaded, {bundled} is not)"
        )
        in log
    )


# --- install sources --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "needle"),
    [
        ("fd::17", "git remote helpers ('fd::') are not allowed"),
        ("ext::sh -c touch% {marker}", "git remote helpers ('ext::') are not allowed"),
        ("ext::sh -c touch% {marker} .git", "git remote helpers ('ext::') are not allowed"),
        ("--upload-pack=touch {marker}", "starts with '-'"),
        ("http://127.0.0.1:9/x.git", "git transport 'http://' is not allowed"),
    ],
)
def test_install_from_a_transport_helper_is_refused_at_once(
    start: Start, source: str, needle: str
) -> None:
    daemon = start(env=no_bundled())
    marker = short_tmpdir("marker-") / "ran"
    source = source.format(marker=marker)
    err = rpc_error(daemon, "plugins.install", {"source": source})
    assert err.code == Codes.INVALID_PARAMS and needle in err.message
    out = ctl(daemon, "plugins", "install", source)
    assert out.returncode == 1 and needle in out.stderr
    assert not marker.exists()
    plugins = daemon.home / "plugins"
    assert not plugins.exists() or list(plugins.iterdir()) == []
    assert daemon.call("ping")["pong"] is True


def test_after_a_refused_source_a_local_folder_still_installs(start: Start) -> None:
    daemon = start(env=no_bundled())
    rpc_error(daemon, "plugins.install", {"source": "fd::17"})
    source = write_plugin(short_tmpdir("src-"), "notes", MARKER_INIT)
    result = daemon.call("plugins.install", {"source": str(source)})
    assert result["plugin"]["state"] == "loaded"
    assert Path(result["path"], "registered").exists()
