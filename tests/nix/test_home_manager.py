"""programs.hermes-agent (nix/home-manager.nix), evaluated by nixpkgs' real module system.

Home-Manager is not available offline, so the module is evaluated with `lib.evalModules` of the
real nixpkgs lib (found as for tests/nix/test_module.py; these tests skip the same way) next to
nix/tests/stubs/home-manager.nix: stand-ins for Home-Manager's own option declarations
(`systemd.user.services`, `systemd.user.sockets`, `home.packages`, `xdg.configFile`, ...), with
Home-Manager's types. The packages are the same stand-ins as for the NixOS module.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.nix.test_module import (
    STORE_PATH,
    NixError,
    needs_lib,
    needs_nix,
    nix_eval,
    nix_instantiate,
    nix_path,
    nixpkgs_lib,
)
from tests.nix.test_module import evaluate as evaluate_nixos
from tests.nix.test_units import Sections, materialise, parse_unit, unit_text
from tests.support.daemon import REPO

EVAL_HOME = REPO / "nix" / "tests" / "stubs" / "eval-home.nix"
RENDERED = 'e.config.xdg.configFile."hermes/config.yaml".source.stub.rendered.value'
NIXOS_RENDERED = 'e.config.environment.etc."hermes/config.yaml".source.stub.rendered.value'

pytestmark = [needs_nix, needs_lib]


def home_expr(configuration: str, select: str) -> str:
    """``select``, an expression over ``e``: the Home-Manager module with ``configuration``."""
    lib = f"import {nix_path(nixpkgs_lib())}"
    args = f"{{ lib = {lib}; configuration = {configuration}; }}"
    return f"let e = import {nix_path(EVAL_HOME)} {args}; in {select}"


def evaluate(configuration: str, select: str = "e.config") -> Any:
    """``select`` (an expression over ``e``, the evaluated Home-Manager module)."""
    return nix_eval(home_expr(configuration, select))


def enabled(body: str = "") -> str:
    """A configuration module enabling programs.hermes-agent with ``body`` inside it."""
    return f"{{ pkgs, ... }}: {{ programs.hermes-agent = {{ enable = true; {body} }}; }}"


def units(body: str = "") -> dict[str, Any]:
    """systemd.user as the module defines it."""
    result: dict[str, Any] = evaluate(enabled(body), "e.config.systemd.user")
    return result


def test_disabled_module_defines_nothing() -> None:
    config = evaluate("{ }", "{ inherit (e.config) systemd home xdg; }")
    assert config["systemd"]["user"] == {"services": {}, "sockets": {}}
    assert config["home"]["packages"] == []
    assert config["xdg"]["configFile"] == {}


DOCS = """
builtins.listToAttrs (map (o: {{
  name = e.lib.removePrefix "{prefix}." o.name;
  value = {{ inherit (o) type description; default = o.default or null; }};
}}) (e.lib.optionAttrSetToDocList e.options.{prefix}))
"""


def test_the_shared_options_are_declared_once_for_both_modules() -> None:
    home = evaluate("{ }", DOCS.format(prefix="programs.hermes-agent"))
    nixos = evaluate_nixos("{ }", DOCS.format(prefix="services.hermes-agent"))
    shared = set(home) & set(nixos)
    assert shared >= {
        "settings",
        "package",
        "http.enable",
        "http.listen",
        "http.tokenFile",
        "mcpServers",
        "environmentFiles",
        "extraPlugins",
        "extraPythonPackages",
        "logLevel",
        "memoryHigh",
        "memoryMax",
        "pythonEnv",
    }
    for name in shared - {"enable"}:
        assert home[name] == nixos[name], name
    # What only a system service has: its own user, group, state directory and socket.
    assert {n.split(".")[0] for n in set(nixos) - set(home)} == {
        "user",
        "group",
        "stateDir",
        "socket",
        "userService",
    }
    assert set(home) - set(nixos) == {"startOnLogin"}


def test_defaults_render_a_socket_activated_user_service() -> None:
    user = units()
    service, socket = user["services"]["hermesd"], user["sockets"]["hermesd"]
    assert set(user["sockets"]) == {"hermesd"}
    assert re.fullmatch(
        STORE_PATH + r"python3-3\.13-env/bin/hermesd", service["Service"]["ExecStart"]
    )
    assert service["Service"]["Type"] == "notify"
    assert service["Service"]["Environment"] == "HERMES_HOME=%h/.hermes"
    assert service["Unit"]["Requires"] == ["hermesd.socket"]
    assert "Sockets" not in service["Service"]
    assert "EnvironmentFile" not in service["Service"]
    assert socket["Socket"]["ListenStream"] == "%t/hermes/hermesd.sock"
    assert socket["Socket"]["SocketMode"] == "0600"
    assert socket["Install"]["WantedBy"] == ["sockets.target"]
    # The same unit as contrib/systemd/user: both come from nix/units.nix.
    contrib = (REPO / "contrib" / "systemd" / "user" / "hermesd.socket").read_text()
    assert "ListenStream=%t/hermes/hermesd.sock" in contrib.splitlines()


def test_config_yaml_is_written_to_xdg_config_home_and_linked_into_hermes_home() -> None:
    config = evaluate(
        enabled('settings.model.default = "qwen";'), "{ inherit (e.config) systemd xdg; }"
    )
    assert config["xdg"]["configFile"]["hermes/config.yaml"]["source"].endswith(
        "-hermes-agent-config.yaml"
    )
    service = config["systemd"]["user"]["services"]["hermesd"]
    assert re.fullmatch(
        STORE_PATH
        + r'hermes-agent-link-config %h/\.hermes "/home/alice/\.config/hermes/config\.yaml"',
        service["Service"]["ExecStartPre"],
    )
    # A settings change reloads hermesd on switch instead of restarting it.
    source = config["xdg"]["configFile"]["hermes/config.yaml"]["source"]
    assert service["Unit"]["X-Reload-Triggers"] == [source]
    assert service["Service"]["ExecReload"].endswith("/bin/kill -HUP $MAINPID")
    assert evaluate(enabled('settings.model.default = "qwen";'), RENDERED) == {
        "log_level": "INFO",
        "model": {"default": "qwen"},
    }
    assert any(p.endswith("-hermesd-0.1.0") for p in evaluate(enabled(), "e.config.home.packages"))


def test_the_config_is_checked_with_hermesds_schema_at_build_time(tmp_path: Path) -> None:
    script = evaluate(
        enabled(), 'e.config.xdg.configFile."hermes/config.yaml".source.stub.buildCommand'
    )
    assert re.search(
        STORE_PATH
        + r"python3-3\.13-env/bin/python3 "
        + STORE_PATH
        + r"check_config\.py \"\$out\" programs\.hermes-agent\.settings$",
        script,
        re.MULTILINE,
    ), script
    # The check as the build runs it, naming this module's option.
    settings = evaluate(enabled('settings.limits.max_connections = "lots";'), RENDERED)
    (tmp_path / "config.yaml").write_text(json.dumps(settings))
    check = subprocess.run(
        [
            sys.executable,
            str(REPO / "nix" / "check_config.py"),
            str(tmp_path / "config.yaml"),
            "programs.hermes-agent.settings",
        ],
        capture_output=True,
        text=True,
    )
    assert check.returncode == 78
    assert "programs.hermes-agent.settings: 'limits.max_connections'" in check.stderr


def test_http_adds_a_second_socket_named_http_for_the_service() -> None:
    body = 'http = { enable = true; listen = "127.0.0.1:9000"; tokenFile = "/run/user/t"; };'
    user = units(body)
    http = user["sockets"]["hermesd-http"]
    assert http["Socket"] == {
        "ListenStream": "127.0.0.1:9000",
        "FileDescriptorName": "http",
        "Service": "hermesd.service",
    }
    assert http["Install"]["WantedBy"] == ["sockets.target"]
    assert user["services"]["hermesd"]["Service"]["Sockets"] == [
        "hermesd.socket",
        "hermesd-http.socket",
    ]
    assert evaluate(enabled(body), RENDERED)["http"] == {
        "listen": "127.0.0.1:9000",
        "token_file": "/run/user/t",
    }


def test_the_same_settings_render_the_same_config_as_the_nixos_module() -> None:
    body = """
      logLevel = "DEBUG";
      settings = { model = { base_url = "http://127.0.0.1:8080/v1"; default = "qwen"; };
                   approvals.mode = "manual"; plugins.disabled = [ "calculator" ]; };
      http.enable = true;
      mcpServers.time = { command = "mcp-time"; args = [ "--utc" ]; };
    """
    home = evaluate(enabled(body), RENDERED)
    nixos = evaluate_nixos(
        f"{{ pkgs, ... }}: {{ services.hermes-agent = {{ enable = true; {body} }}; }}",
        NIXOS_RENDERED,
    )
    assert nixos.pop("socket")["path"] == "/run/hermes/hermesd.sock"  # the system socket's own
    assert home == nixos
    assert home["mcp_servers"] == {"time": {"command": "mcp-time", "args": ["--utc"]}}
    assert home["approvals"] == {"mode": "manual"}


def test_environment_files_and_plugins_reach_the_service() -> None:
    body = """
      environmentFiles = [ "-/home/alice/.config/hermes/env" ];
      extraPlugins = [ (pkgs.runCommand "weather" { } "") ];
    """
    service = units(body)["services"]["hermesd"]["Service"]
    assert service["EnvironmentFile"] == ["-/home/alice/.config/hermes/env"]
    assert service["Environment"][0] == "HERMES_HOME=%h/.hermes"
    assert re.fullmatch(
        "HERMES_PLUGIN_PATH=" + STORE_PATH + "hermes-agent-plugins", service["Environment"][1]
    )


def test_an_environment_file_in_the_store_is_refused() -> None:
    body = 'environmentFiles = [ "${pkgs.writeText "env" "K=v"}" ];'
    failed = evaluate(enabled(body), "e.failedAssertions")
    assert failed == [
        "programs.hermes-agent.environmentFiles: a file in the Nix store is world-readable; "
        "keep secrets outside it."
    ]
    assert evaluate(enabled(), "e.failedAssertions") == []


def test_start_on_login_off_leaves_the_sockets_uninstalled() -> None:
    user = units("startOnLogin = false; http.enable = true;")
    assert user["sockets"]["hermesd"]["Install"]["WantedBy"] == []
    assert user["sockets"]["hermesd-http"]["Install"]["WantedBy"] == []


def test_a_unit_value_home_manager_would_reject_fails_the_evaluation() -> None:
    # The stand-in declarations carry Home-Manager's types: an attribute set is no unit value.
    with pytest.raises(NixError, match=r"systemd\.user\.services"):
        evaluate(
            "{ ... }: { programs.hermes-agent.enable = true; "
            "systemd.user.services.hermesd.Service.Bad = { a = 1; }; }",
            "e.config.systemd.user.services",
        )


# --- the link script, run for real ----------------------------------------------------------------

LINK = REPO / "nix" / "link_config.sh"
BASH = shutil.which("bash")


@pytest.mark.skipif(BASH is None, reason="bash missing")
def test_the_link_script_links_and_keeps_a_hand_written_config(tmp_path: Path) -> None:
    home, rendered = tmp_path / "hermes", tmp_path / "rendered.yaml"
    rendered.write_text("log_level: INFO\n")
    home.mkdir()
    (home / "config.yaml").write_text("model: {default: mine}\n")
    for _ in range(2):  # a second start finds its own link and replaces only that
        run = subprocess.run(
            [BASH or "bash", str(LINK), str(home), str(rendered)], capture_output=True, text=True
        )
        assert run.returncode == 0, run.stderr
    assert (home / "config.yaml").is_symlink()
    assert (home / "config.yaml").resolve() == rendered
    assert (home / "config.yaml.before-home-manager").read_text() == "model: {default: mine}\n"
    assert sorted(p.name for p in home.iterdir()) == [
        "config.yaml",
        "config.yaml.before-home-manager",
    ]


@pytest.mark.skipif(BASH is None, reason="bash missing")
def test_the_link_script_creates_hermes_home_private(tmp_path: Path) -> None:
    home = tmp_path / "new" / "hermes"
    run = subprocess.run(
        [BASH or "bash", str(LINK), str(home), "/nowhere/config.yaml"],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    assert home.stat().st_mode & 0o777 == 0o700
    assert json.dumps(str((home / "config.yaml").readlink())) == '"/nowhere/config.yaml"'


# --- the units as Home-Manager writes them --------------------------------------------------


def home_sections(unit: dict[str, Any]) -> Sections:
    """Section → key → values, as Home-Manager writes a unit (a list repeats the key)."""
    return {
        name: {
            k: [str(v) for v in (vs if isinstance(vs, list) else [vs])] for k, vs in body.items()
        }
        for name, body in unit.items()
    }


# Where the Home-Manager units differ from contrib/systemd/user: store paths, and the link to
# the rendered config with its reload trigger.
DIFFERENT = {
    ("Unit", "Documentation"),
    ("Unit", "X-Reload-Triggers"),
    ("Service", "ExecStart"),
    ("Service", "ExecReload"),
    ("Service", "ExecStartPre"),
}


@pytest.mark.parametrize("kind", ["service", "socket"])
def test_the_units_agree_with_contrib_user_units_on_every_other_directive(kind: str) -> None:
    shipped = parse_unit((REPO / "contrib" / "systemd" / "user" / f"hermesd.{kind}").read_text())
    rendered = home_sections(units()[f"{kind}s"]["hermesd"])
    assert set(shipped) == set(rendered)
    for section in shipped:
        keys = set(shipped[section]) | set(rendered[section])
        for key in sorted(keys - {k for s, k in DIFFERENT if s == section}):
            assert rendered[section].get(key) == shipped[section].get(key), (section, key)


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze missing")
def test_the_units_with_http_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    user = units('http.enable = true; environmentFiles = [ "-/home/alice/.hermes.env" ];')
    store = tmp_path / "store"
    paths = []
    for kind, name in (
        ("sockets", "hermesd"),
        ("sockets", "hermesd-http"),
        ("services", "hermesd"),
    ):
        text = materialise(unit_text(home_sections(user[kind][name])), store)
        path = tmp_path / f"{name}.{kind.removesuffix('s')}"
        path.write_text(text)
        paths.append(str(path))
    # The link script has no bin/ of its own: materialise made no executable for it.
    for found in re.findall(r"\S+-hermes-agent-link-config", Path(paths[-1]).read_text()):
        script = Path(found.removeprefix("ExecStartPre="))
        script.write_text("#!/bin/sh\nexit 0\n")
        script.chmod(0o755)
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    proc = subprocess.run(
        ["systemd-analyze", "--user", "verify", "--man=no", *paths],
        capture_output=True,
        text=True,
        env={**os.environ, "SYSTEMD_LOG_LEVEL": "warning", "XDG_RUNTIME_DIR": str(runtime)},
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [x for x in (proc.stdout + proc.stderr).splitlines() if "hermesd" in x] == []


def test_every_option_set_evaluates_without_a_warning_from_lib() -> None:
    body = """
      logLevel = "DEBUG"; startOnLogin = false; memoryHigh = null; memoryMax = "4G";
      settings.model.base_url = "http://127.0.0.1:8080/v1";
      environmentFiles = [ "-/home/alice/.hermes.env" ];
      extraPlugins = [ (pkgs.runCommand "weather" { } "") ];
      extraPythonPackages = ps: [ ps.requests ];
      extraArgs = [ "--log-level" "DEBUG" ];
      http = { enable = true; tokenFile = "/home/alice/.hermes-tokens"; };
      mcpServers.time.command = "mcp-time";
    """
    select = (
        "{ inherit (e.config) systemd xdg; failed = e.failedAssertions; "
        "env = e.config.programs.hermes-agent.pythonEnv.outPath; }"
    )
    proc = nix_instantiate(home_expr(enabled(body), select))
    assert proc.returncode == 0, proc.stderr
    noise = [line for line in proc.stderr.splitlines() if "warning:" in line or "trace:" in line]
    assert [line for line in noise if "build-users-group" not in line] == [], proc.stderr
    result = json.loads(proc.stdout)
    assert result["failed"] == []
    assert "MemoryHigh" not in result["systemd"]["user"]["services"]["hermesd"]["Service"]
    assert result["systemd"]["user"]["services"]["hermesd"]["Service"]["MemoryMax"] == "4G"
