"""A plugin's top-level section of config.yaml is a setting, not an unknown key: a discovered
plugin (bundled, user folder, HERMES_PLUGIN_PATH, entry point) owns the section named like it.
No warning for it at start-up, in ``status``, ``hermesctl config check``, ``doctor``,
``--check-config`` or a reload; a section no plugin owns is still warned about; the plugin reads
its section; ``hermesctl config set`` keeps it. On a real hermesd with real plugins.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.daemon import (
    DaemonProcess,
    checkout_pythonpath,
    daemon_env,
    run_hermesctl,
    short_tmpdir,
    start_daemon,
)
from tests.support.modelserver import ScriptedModelServer, model_config
from tests.support.plugin_factory import build_wheel, pip_install, write_plugin

READS_ITS_SECTION = """
import json, os
from pathlib import Path

def register(ctx):
    from hermes_cli.config import load_config
    home = Path(os.environ["HERMES_HOME"])
    (home / "psy-seen.json").write_text(json.dumps({
        "ctx_config": ctx.config,
        "load_config": load_config().get("psy"),
    }))
"""

SECTIONS = """
# psy's own settings
psy:
  actor_id: actor-7  # who psy acts as
  depth: 2
pathsy:
  depth: 3
epsy:
  level: 4
calculator:
  precision: 5
psyy:
  actor_id: a-typo
"""

UNOWNED = ["unknown setting 'psyy' ignored"]


@pytest.fixture(scope="module")
def sources() -> Iterator[dict[str, Path]]:
    """A home with the user plugin ``psy`` (and a broken one), a HERMES_PLUGIN_PATH folder with
    ``pathsy``, and a pip target with the entry-point plugin ``epsy``."""
    root = short_tmpdir("ps-")
    home = root / "home"
    write_plugin(home / "plugins", "psy", READS_ITS_SECTION)
    write_plugin(home / "plugins", "broken", manifest="name: [unclosed\n")
    write_plugin(root / "path", "pathsy")
    wheel = build_wheel(
        root / "dist",
        "epsy",
        "1.0",
        {"epsy/__init__.py": "def register(ctx):\n    pass\n"},
        {"epsy": "epsy"},
    )
    pip_install([wheel], root / "site")
    yield {"root": root, "home": home, "path": root / "path", "site": root / "site"}
    shutil.rmtree(root, ignore_errors=True)


def sources_env(sources: dict[str, Path]) -> dict[str, str]:
    return {
        "HERMES_PLUGIN_PATH": str(sources["path"]),
        "PYTHONPATH": checkout_pythonpath(str(sources["site"])),
    }


@pytest.fixture(scope="module")
def psyd(model: ScriptedModelServer, sources: dict[str, Path]) -> Iterator[DaemonProcess]:
    daemon = start_daemon(
        sources["home"], config=model_config(model.url) + SECTIONS, env=sources_env(sources)
    )
    daemon.call("plugins.list")  # waits for the plugins, which load after start-up
    yield daemon
    daemon.stop()


def ctl(daemon: DaemonProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return run_hermesctl(["--socket", str(daemon.socket), *args])


def test_plugins_of_every_source_are_discovered(psyd: DaemonProcess) -> None:
    sources = {p["key"]: p["source"] for p in psyd.call("plugins.list")["plugins"]}
    assert {k: sources.get(k) for k in ("psy", "pathsy", "epsy", "calculator")} == {
        "psy": "user",
        "pathsy": "path",
        "epsy": "entrypoint",
        "calculator": "bundled",
    }


def test_status_warns_only_about_the_section_no_plugin_owns(psyd: DaemonProcess) -> None:
    assert psyd.call("status")["config_warnings"] == UNOWNED


def test_the_start_up_log_warns_only_about_the_section_no_plugin_owns(psyd: DaemonProcess) -> None:
    warned = [line for line in psyd.log().splitlines() if "unknown setting" in line]
    assert len(warned) == 1 and UNOWNED[0] in warned[0]


def test_config_check_warns_only_about_the_section_no_plugin_owns(psyd: DaemonProcess) -> None:
    out = ctl(psyd, "config", "check", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["warnings"] == UNOWNED


def test_doctor_names_only_the_section_no_plugin_owns(psyd: DaemonProcess) -> None:
    out = ctl(psyd, "doctor", "--json")
    config_row = {c["name"]: c for c in json.loads(out.stdout)["checks"]}["config"]
    assert config_row["status"] == "warn"
    assert config_row["detail"].endswith(f": {UNOWNED[0]}")


def test_a_reload_warns_only_about_the_section_no_plugin_owns(psyd: DaemonProcess) -> None:
    outcome = psyd.call("reload")
    assert outcome["config_warnings"] == UNOWNED
    assert psyd.call("status")["last_reload"]["config_warnings"] == UNOWNED


def test_the_plugin_reads_its_top_level_section(psyd: DaemonProcess) -> None:
    seen = json.loads((psyd.home / "psy-seen.json").read_text())
    section = {"actor_id": "actor-7", "depth": 2}
    assert seen == {"ctx_config": section, "load_config": section}


def test_finding_the_sections_owners_logs_nothing_discovery_has_not(psyd: DaemonProcess) -> None:
    # Discovery's own lines (here: the broken manifest) are logged once per plugin load, not
    # once more by each configuration check (start-up, config.check, reload).
    psyd.call("config.check")
    psyd.call("reload")
    log = psyd.log()
    loads = log.count("hermesd.plugins.host: Plugins: ")
    assert loads >= 2
    assert log.count(f"Failed to parse {psyd.home}/plugins/broken/plugin.yaml") == loads


def test_check_config_accepts_the_sections_plugins_own(sources: dict[str, Path]) -> None:
    home = short_tmpdir()
    shutil.copytree(sources["home"] / "plugins", home / "plugins")
    (home / "config.yaml").write_text(SECTIONS)
    out = subprocess.run(
        [sys.executable, "-m", "hermesd", "--check-config"],
        env=daemon_env(home, sources_env(sources)),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 0, out.stderr
    assert out.stderr.splitlines() == [f"hermesd: warning: {UNOWNED[0]}"]


def test_config_set_keeps_a_plugins_top_level_section(
    start: Callable[..., DaemonProcess], model: ScriptedModelServer
) -> None:
    home = short_tmpdir()
    write_plugin(home / "plugins", "psy", READS_ITS_SECTION)
    before = model_config(model.url) + SECTIONS
    daemon = start(home, config=before, env={"HERMES_BUNDLED_PLUGINS": "/nonexistent"})
    out = ctl(daemon, "config", "set", "tools.timeout", "30")
    assert out.returncode == 0, out.stderr
    assert (home / "config.yaml").read_text() == before + "tools:\n  timeout: 30\n"
    assert "warning: unknown setting 'psy'" not in out.stdout
    seen = json.loads((home / "psy-seen.json").read_text())  # written again by the reload
    assert seen["ctx_config"] == {"actor_id": "actor-7", "depth": 2}


def test_a_plugin_installed_later_owns_its_section_from_the_next_reload(
    start: Callable[..., DaemonProcess], model: ScriptedModelServer
) -> None:
    home = short_tmpdir()
    daemon = start(
        home,
        config=model_config(model.url) + "later:\n  mode: on\n",
        env={"HERMES_BUNDLED_PLUGINS": "/nonexistent"},
    )
    assert daemon.call("status")["config_warnings"] == ["unknown setting 'later' ignored"]
    write_plugin(home / "plugins", "later")
    assert daemon.call("reload")["config_warnings"] == []
    assert daemon.call("status")["config_warnings"] == []


def test_a_scalar_named_like_a_plugin_is_still_an_unknown_setting(
    start: Callable[..., DaemonProcess], model: ScriptedModelServer
) -> None:
    home = short_tmpdir()
    write_plugin(home / "plugins", "psy")
    daemon = start(
        home,
        config=model_config(model.url) + "psy: 3\n",
        env={"HERMES_BUNDLED_PLUGINS": "/nonexistent"},
    )
    assert daemon.call("status")["config_warnings"] == ["unknown setting 'psy' ignored"]
