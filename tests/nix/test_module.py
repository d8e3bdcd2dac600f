"""services.hermes-agent, evaluated by nixpkgs' real module system.

nix/module.nix is evaluated with `lib.evalModules` of nixpkgs' own lib, found as `$NIXPKGS_LIB`
(nixpkgs' `lib` directory itself, or a directory holding it as `lib/`, such as a nixpkgs checkout
or a nixpkgs.lib clone), else as `<nixpkgs/lib>` on NIX_PATH; without either these tests skip,
and a NIXPKGS_LIB that holds no lib fails them. Only two stand-ins remain (nix/tests/stubs): the
NixOS options the module defines (`nixos.nix`, declared with NixOS's types) and the packages
(`pkgs.nix`, real but unbuildable derivations). What a builder would run (the plugin folder's
script, the environment's conflict check) is kept on the stub packages and, where it matters,
run here for real. The helpers at the top are shared by the other tests/nix files.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.daemon import REPO

NIX_INSTANTIATE = shutil.which("nix-instantiate")
needs_nix = pytest.mark.skipif(NIX_INSTANTIATE is None, reason="nix-instantiate missing")
MODULE = REPO / "nix" / "module.nix"
EVAL_MODULE = REPO / "nix" / "tests" / "stubs" / "eval-module.nix"
STORE_PATH = r"/nix/store/[0-9a-z]{32}-"


def find_nixpkgs_lib() -> tuple[Path | None, str | None]:
    """nixpkgs' lib directory (or None), and why a NIXPKGS_LIB that was given cannot be used."""
    given = os.environ.get("NIXPKGS_LIB")
    if given:
        # A directory holding lib/ first: a nixpkgs checkout's own default.nix is not the lib.
        for candidate in (Path(given) / "lib", Path(given)):
            if (candidate / "default.nix").is_file():
                return candidate.resolve(), None
        return None, f"NIXPKGS_LIB={given} holds neither lib/default.nix nor default.nix"
    if NIX_INSTANTIATE is None:
        return None, None
    found = subprocess.run(
        [NIX_INSTANTIATE, "--find-file", "nixpkgs/lib"], capture_output=True, text=True, timeout=60
    )
    lib = Path(found.stdout.strip())
    if found.returncode == 0 and (lib / "default.nix").is_file():
        return lib, None
    return None, None


NIXPKGS_LIB, NIXPKGS_LIB_ERROR = find_nixpkgs_lib()
needs_lib = pytest.mark.skipif(
    NIXPKGS_LIB is None and NIXPKGS_LIB_ERROR is None,
    reason=(
        "no nixpkgs lib: set NIXPKGS_LIB to nixpkgs' lib directory "
        "(e.g. ../shared/nixpkgs-lib/lib) or put nixpkgs on NIX_PATH"
    ),
)

pytestmark = [needs_nix, needs_lib]


def nixpkgs_lib() -> Path:
    """The lib the module is evaluated with; fails the test when NIXPKGS_LIB names no lib."""
    if NIXPKGS_LIB is None:
        pytest.fail(NIXPKGS_LIB_ERROR or "no nixpkgs lib (the test should have been skipped)")
    return NIXPKGS_LIB


def nix_path(path: Path) -> str:
    """A Nix expression for an absolute path, whatever characters it holds."""
    return "(/. + " + json.dumps(str(path), ensure_ascii=False).replace("${", "\\${") + ")"


class NixError(Exception):
    """nix-instantiate failed; the message is its stderr."""


def nix_instantiate(expr: str, *, store: bool = False) -> subprocess.CompletedProcess[str]:
    """nix-instantiate --eval --strict --json on ``expr``; ``store``: may copy paths it names."""
    argv = [NIX_INSTANTIATE or "nix-instantiate", "--eval", "--strict", "--json", "--expr", expr]
    argv.insert(1, "--read-write-mode" if store else "--readonly-mode")
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


def nix_eval(expr: str, *, store: bool = False) -> Any:
    """Evaluate a Nix expression to JSON. ``store``: copy the paths it names into the store."""
    proc = nix_instantiate(expr, store=store)
    if proc.returncode != 0:
        raise NixError(proc.stderr)
    return json.loads(proc.stdout)


def module_expr(configuration: str, select: str) -> str:
    """``select``, an expression over ``e``: the module evaluated with ``configuration``."""
    lib = f"import {nix_path(nixpkgs_lib())}"
    args = f"{{ lib = {lib}; configuration = {configuration}; }}"
    return f"let e = import {nix_path(EVAL_MODULE)} {args}; in {select}"


def evaluate(configuration: str, select: str = "e.config", *, store: bool = False) -> Any:
    """``select`` (an expression over ``e``, the evaluated module) for one configuration module."""
    return nix_eval(module_expr(configuration, select), store=store)


def enabled(body: str = "", args: str = "{ pkgs, ... }") -> str:
    """A configuration module enabling the service, with ``body`` inside services.hermes-agent."""
    return f"{args}: {{ services.hermes-agent = {{ enable = true; {body} }}; }}"


def service(body: str = "", **kw: Any) -> dict[str, Any]:
    """systemd.services.hermesd as the module defines it."""
    result: dict[str, Any] = evaluate(enabled(body), "e.config.systemd.services.hermesd", **kw)
    return result


def store_writable() -> bool:
    """Whether evaluations may copy into /nix/store (root on these machines)."""
    store = Path("/nix/store")
    return store.is_dir() and os.access(store, os.W_OK)


# --- options ------------------------------------------------------------------------------------

OPTIONS_EXPR = """
let
  lib = e.lib;
  walk = prefix: set: builtins.concatMap (name:
    let v = set.${name}; p = prefix ++ [ name ]; in
    if lib.isOption v then [ {
      path = builtins.concatStringsSep "." p;
      type = v.type.name;
      hasDefault = v ? default;
      description = v.description or "";
      hasExample = v ? example;
      readOnly = v.readOnly or false;
    } ] else walk p v) (builtins.attrNames set);
in walk [ ] e.options.services.hermes-agent
"""

ISSUE_OPTIONS = {
    "enable",
    "package",
    "user",
    "group",
    "stateDir",
    "socket.path",
    "socket.mode",
    "settings",
    "environmentFiles",
    "extraPlugins",
    "extraPythonPackages",
    "extraArgs",
    "logLevel",
    "memoryHigh",
    "memoryMax",
}


def test_every_option_of_the_issue_exists_with_type_default_description_and_example() -> None:
    options = {o["path"]: o for o in evaluate("{ }", OPTIONS_EXPR)}
    assert set(options) >= ISSUE_OPTIONS, ISSUE_OPTIONS - set(options)
    for name in ISSUE_OPTIONS:
        opt = options[name]
        assert opt["hasDefault"], name
        assert len(opt["description"]) > 20, name
        assert opt["hasExample"], name
    assert {n for n, o in options.items() if o["readOnly"]} == {"pythonEnv", "pluginDir"}


def test_option_docs_render_without_building_anything() -> None:
    # What NixOS's manual does with the options; a default that is a package must have a
    # defaultText, or the manual would have to build it.
    docs = evaluate(
        "{ }",
        "map (o: { inherit (o) name type description; default = o.default or null; }) "
        "(e.lib.optionAttrSetToDocList e.options.services.hermes-agent)",
    )
    assert {d["name"].removeprefix("services.hermes-agent.") for d in docs} >= ISSUE_OPTIONS
    for doc in docs:
        assert doc["default"] is None or "/nix/store" not in json.dumps(doc["default"]), doc


def test_every_option_set_evaluates_without_a_warning_from_lib() -> None:
    # lib reports deprecated functions and types on stderr (`evaluation warning:`, `trace:`).
    body = """
      user = "agent"; group = "agents"; stateDir = "/srv/hermes"; logLevel = "DEBUG";
      socket = { path = "/run/agents/h.sock"; mode = "0600"; };
      settings.model.base_url = "http://127.0.0.1:8080/v1";
      environmentFiles = [ "-/run/secrets/hermes.env" ];
      extraPlugins = [ (pkgs.runCommand "weather" { } "") ];
      extraPythonPackages = ps: [ ps.requests ];
      extraArgs = [ "--log-level" "DEBUG" ];
    """
    select = (
        '{ config = removeAttrs e.config [ "services" ]; '
        "failed = e.failedAssertions; "
        "docs = map (o: o.name) (e.lib.optionAttrSetToDocList e.options.services.hermes-agent); "
        "env = e.config.services.hermes-agent.pythonEnv.outPath; }"
    )
    proc = nix_instantiate(module_expr(enabled(body), select))
    assert proc.returncode == 0, proc.stderr
    noise = [line for line in proc.stderr.splitlines() if "warning:" in line or "trace:" in line]
    assert [line for line in noise if "build-users-group" not in line] == [], proc.stderr
    assert json.loads(proc.stdout)["failed"] == []


# Every option nix/module.nix gives a value above the option's default priority (1500).
DEFINED_BY_MODULE = f"""
let
  module = toString {nix_path(MODULE)};
  walk = prefix: set: builtins.concatMap (name:
    let v = set.${{name}}; p = prefix ++ [ name ]; in
    if e.lib.isOption v then
      e.lib.optional (builtins.elem module v.files && v.highestPrio < 1500)
        (builtins.concatStringsSep "." p)
    else walk p v) (builtins.attrNames set);
in walk [ ] (removeAttrs e.options [ "_module" ])
"""


def test_disabled_module_defines_nothing() -> None:
    assert evaluate("{ }", DEFINED_BY_MODULE) == []
    assert set(evaluate(enabled(), DEFINED_BY_MODULE)) >= {
        "assertions",
        "environment.etc",
        "services.hermes-agent.settings",
        "systemd.services",
        "users.users",
    }


# --- config.yaml --------------------------------------------------------------------------------

RENDERED = 'e.config.environment.etc."hermes/config.yaml".source.stub.rendered.value'


def test_defaults_render_the_socket_and_log_level_into_config_yaml() -> None:
    assert evaluate(enabled(), RENDERED) == {
        "socket": {"path": "/run/hermes/hermesd.sock", "mode": "0660", "group": "hermes"},
        "log_level": "INFO",
    }


def test_settings_from_several_modules_merge_into_one_config_yaml() -> None:
    config = """{ pkgs, ... }: {
      imports = [ { services.hermes-agent.settings.model.base_url = "http://127.0.0.1:8080/v1"; } ];
      services.hermes-agent = {
        enable = true; group = "agents"; logLevel = "DEBUG";
        settings = { model.default = "qwen"; plugins.disabled = [ "calculator" ]; };
      };
    }"""
    assert evaluate(config, RENDERED) == {
        "socket": {"path": "/run/hermes/hermesd.sock", "mode": "0660", "group": "agents"},
        "log_level": "DEBUG",
        "model": {"base_url": "http://127.0.0.1:8080/v1", "default": "qwen"},
        "plugins": {"disabled": ["calculator"]},
    }


def test_a_socket_path_in_settings_that_contradicts_the_option_is_an_error() -> None:
    with pytest.raises(NixError, match="conflicting definition values"):
        evaluate(enabled('settings.socket.path = "/tmp/other.sock";'), RENDERED)


def test_config_yaml_is_checked_with_hermesds_schema_at_build_time() -> None:
    script = evaluate(
        enabled(), 'e.config.environment.etc."hermes/config.yaml".source.stub.buildCommand'
    )
    assert re.search(r'cp "\$rendered" "\$out"', script)
    assert re.search(
        STORE_PATH + r"python3-3\.13-env/bin/python3 " + STORE_PATH + r'check_config\.py "\$out"',
        script,
    ), script


def test_the_rendered_config_is_valid_for_hermesd(tmp_path: Path) -> None:
    settings = evaluate(enabled('settings.model.base_url = "http://127.0.0.1:8080/v1";'), RENDERED)
    settings["socket"]["group"] = "root"  # resolvable here, unlike "hermes"
    (tmp_path / "config.yaml").write_text(json.dumps(settings))  # JSON is YAML
    check = subprocess.run(
        [sys.executable, str(REPO / "nix" / "check_config.py"), str(tmp_path / "config.yaml")],
        capture_output=True,
        text=True,
    )
    assert check.returncode == 0, check.stderr
    home = subprocess.run(
        [sys.executable, "-m", "hermesd", "--check-config"],
        env={**os.environ, "HERMES_HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert home.returncode == 0, home.stderr


def test_a_wrong_setting_fails_the_config_check_naming_the_key(tmp_path: Path) -> None:
    settings = evaluate(enabled('settings.limits.max_connections = "lots";'), RENDERED)
    (tmp_path / "config.yaml").write_text(json.dumps(settings))
    check = subprocess.run(
        [sys.executable, str(REPO / "nix" / "check_config.py"), str(tmp_path / "config.yaml")],
        capture_output=True,
        text=True,
    )
    assert check.returncode == 78
    assert "services.hermes-agent.settings: 'limits.max_connections'" in check.stderr


def test_a_settings_change_reloads_instead_of_restarting() -> None:
    unit = service()
    etc = evaluate(enabled(), 'e.config.environment.etc."hermes/config.yaml".source')
    assert unit["reloadTriggers"] == [etc]
    assert unit["serviceConfig"]["ExecReload"].endswith("/bin/kill -HUP $MAINPID")
    # The unit names the stable /etc path, so its text does not change with the settings.
    assert (
        "/etc/hermes/config.yaml /var/lib/hermes/config.yaml"
        in unit["serviceConfig"]["ExecStartPre"]
    )


# --- the service ---------------------------------------------------------------------------------


def test_execstart_runs_hermesd_from_the_one_python_environment() -> None:
    unit = service('extraArgs = [ "--log-level" "DEBUG" "two words" "100%" ];')
    env = evaluate(enabled(), "e.config.services.hermes-agent.pythonEnv")
    assert unit["serviceConfig"]["ExecStart"] == (
        f'{env}/bin/hermesd --log-level DEBUG "two words" "100%%"'
    )


def test_environment_names_home_and_no_plugin_path_without_plugins() -> None:
    assert service()["environment"] == {"HERMES_HOME": "/var/lib/hermes"}


def test_environment_hands_extra_plugins_over_through_hermes_plugin_path() -> None:
    body = 'extraPlugins = [ (pkgs.runCommand "source" { } "") ];'
    unit = service(body)
    plugin_dir = evaluate(enabled(body), "e.config.services.hermes-agent.pluginDir")
    assert unit["environment"] == {
        "HERMES_HOME": "/var/lib/hermes",
        "HERMES_PLUGIN_PATH": plugin_dir,
    }
    assert re.fullmatch(STORE_PATH + "hermes-agent-plugins", plugin_dir)


def test_state_dir_becomes_home_working_directory_and_state_directory() -> None:
    config = service()["serviceConfig"]
    assert (config["StateDirectory"], config["StateDirectoryMode"]) == ("hermes", "0700")
    assert config["WorkingDirectory"] == "/var/lib/hermes"
    assert "ReadWritePaths" not in config


def test_a_state_dir_outside_var_lib_is_made_by_tmpfiles_and_opened_in_the_sandbox() -> None:
    body = 'stateDir = "/srv/hermes"; user = "agent"; group = "agents";'
    unit = service(body)
    assert unit["environment"]["HERMES_HOME"] == "/srv/hermes"
    assert unit["serviceConfig"]["ReadWritePaths"] == "/srv/hermes"
    assert "StateDirectory" not in unit["serviceConfig"]
    assert evaluate(enabled(body), "e.config.systemd.tmpfiles.rules") == [
        "d /srv/hermes 0700 agent agents - -"
    ]


def test_environment_files_become_environment_file_directives() -> None:
    config = service('environmentFiles = [ "/run/secrets/hermes.env" "-/etc/hermes/extra.env" ];')
    assert config["serviceConfig"]["EnvironmentFile"] == [
        "/run/secrets/hermes.env",
        "-/etc/hermes/extra.env",
    ]
    assert "EnvironmentFile" not in service()["serviceConfig"]


def test_the_unit_is_type_notify_with_watchdog_and_restart_rules() -> None:
    config = service()["serviceConfig"]
    assert config["Type"] == "notify" and config["NotifyAccess"] == "main"
    assert config["WatchdogSec"] == "30" and config["Restart"] == "on-failure"
    assert config["RestartPreventExitStatus"].split() == ["65", "69", "77", "78"]
    assert (config["User"], config["Group"], config["UMask"]) == ("hermes", "hermes", "0077")
    assert (config["RuntimeDirectory"], config["RuntimeDirectoryPreserve"]) == ("hermes", "yes")


def test_memory_limits_are_set_by_default_and_follow_the_options() -> None:
    config = service()["serviceConfig"]
    assert (config["MemoryHigh"], config["MemoryMax"]) == ("1536M", "2G")
    config = service('memoryHigh = "3G"; memoryMax = null;')["serviceConfig"]
    assert config["MemoryHigh"] == "3G" and "MemoryMax" not in config
    user = evaluate(
        enabled('userService.enable = true; memoryMax = "5G";'),
        "e.config.systemd.user.services.hermesd.serviceConfig",
    )
    assert (user["MemoryHigh"], user["MemoryMax"]) == ("1536M", "5G")


def test_socket_unit_carries_path_mode_and_owner() -> None:
    body = (
        'user = "agent"; group = "agents"; socket.path = "/run/agents/h.sock"; '
        'socket.mode = "0600";'
    )
    sock = evaluate(enabled(body), "e.config.systemd.sockets.hermesd")
    assert sock["listenStreams"] == ["/run/agents/h.sock"]
    assert sock["wantedBy"] == ["sockets.target"]
    assert {k: sock["socketConfig"][k] for k in ("SocketUser", "SocketGroup", "SocketMode")} == {
        "SocketUser": "agent",
        "SocketGroup": "agents",
        "SocketMode": "0600",
    }
    unit = service(body)
    assert unit["requires"] == ["hermesd.socket"] and "hermesd.socket" in unit["after"]


def test_default_user_and_group_are_created_and_others_are_not() -> None:
    users = evaluate(enabled(), "{ u = e.config.users.users; g = e.config.users.groups; }")
    assert users["u"]["hermes"]["isSystemUser"] is True
    assert users["u"]["hermes"]["group"] == "hermes"
    assert list(users["g"]) == ["hermes"]
    other = evaluate(
        enabled('user = "alice"; group = "users";'),
        "{ u = e.config.users.users ? hermes; g = e.config.users.groups ? hermes; }",
    )
    assert other == {"u": False, "g": False}


def test_hermesctl_on_path_links_the_package_for_the_default_socket() -> None:
    ctl = evaluate(enabled(), "builtins.head e.config.environment.systemPackages")
    script = evaluate(
        enabled(), "(builtins.head e.config.environment.systemPackages).stub.buildCommand"
    )
    assert re.fullmatch(STORE_PATH + "hermesctl-0.1.0", ctl)
    assert re.search(r"ln -s " + STORE_PATH + r"hermesd-0\.1\.0/bin/hermesctl", script)


def test_hermesctl_on_path_defaults_to_a_non_default_socket() -> None:
    script = evaluate(
        enabled('socket.path = "/run/hermes agents/h.sock";'),
        "(builtins.head e.config.environment.systemPackages).stub.buildCommand",
    )
    words = shlex.split(script.replace("\\\n", " "))
    at = words.index("--set-default")
    assert words[at : at + 3] == ["--set-default", "HERMES_SOCKET", "/run/hermes agents/h.sock"]


# --- assertions ----------------------------------------------------------------------------------


def failed(body: str) -> list[str]:
    result: list[str] = evaluate(enabled(body), "e.failedAssertions")
    return result


def test_a_default_configuration_passes_every_assertion_without_warnings() -> None:
    assert failed("") == []
    assert evaluate(enabled(), "e.warnings") == []


def test_root_is_refused() -> None:
    assert failed('user = "root";') == [
        (
            "services.hermes-agent.user must not be root: hermesd refuses to run as root "
            "(exit status 77)."
        )
    ]


def test_a_package_for_another_python_is_refused_naming_both_pythons() -> None:
    [message] = failed("extraPythonPackages = [ pkgs.python312Packages.requests ];")
    assert "hermesd runs on python3.13" in message
    assert "python3.12-requests-2.32.3 is built for python3.12" in message
    assert "extraPythonPackages = ps: [" in message


def test_a_non_python_package_is_refused() -> None:
    [message] = failed("extraPythonPackages = [ pkgs.coreutils ];")
    assert "coreutils-9.5 is not a Python module" in message


def test_an_environment_file_in_the_store_is_refused() -> None:
    [message] = failed('environmentFiles = [ "${pkgs.writeText "env" "K=v"}" ];')
    assert "world-readable" in message


def test_an_environment_file_given_as_a_nix_path_is_a_type_error() -> None:
    with pytest.raises(
        NixError, match=r"option `services\.hermes-agent\.environmentFiles\..*' is not of type"
    ):
        evaluate(enabled("environmentFiles = [ ./secret.env ];"), "e.config.systemd")


# --- extraPythonPackages: one environment -------------------------------------------------------

ENV_LIBS = "map (d: d.name) e.config.services.hermes-agent.pythonEnv.extraLibs"


def test_extra_python_packages_accept_a_function_and_a_list_and_merge_them() -> None:
    config = """{ pkgs, ... }: {
      imports = [
        { services.hermes-agent.extraPythonPackages = [ pkgs.python3Packages.requests ]; }
      ];
      services.hermes-agent = { enable = true; extraPythonPackages = ps: [ ps.msgpack ]; };
    }"""
    assert sorted(evaluate(config, ENV_LIBS)) == [
        "hermesd-0.1.0",
        "python3.13-msgpack-1.1.0",
        "python3.13-requests-2.32.3",
    ]


def test_hermesd_alone_makes_an_environment_of_hermesd() -> None:
    assert evaluate(enabled(), ENV_LIBS) == ["hermesd-0.1.0"]
    assert (
        evaluate(enabled(), "e.config.services.hermes-agent.pythonEnv.python.libPrefix")
        == "python3.13"
    )


def test_hermesd_enters_the_environment_as_a_python_module() -> None:
    # buildPythonApplication results are left out of Python environments otherwise.
    module = evaluate(
        enabled(),
        "(builtins.head e.config.services.hermes-agent.pythonEnv.extraLibs).pythonModule.libPrefix",
    )
    assert module == "python3.13"


def test_the_conflict_check_sees_every_root_with_its_closure() -> None:
    roots_json = evaluate(
        enabled("extraPythonPackages = ps: [ ps.requests ];"),
        "e.config.services.hermes-agent.pythonEnv.conflictCheck.stub.roots",
    )
    spec = json.loads(roots_json)
    assert spec["sitePackages"] == "lib/python3.13/site-packages"
    names = [r["name"] for r in spec["roots"]]
    assert names == ["hermesd", "requests"]
    hermesd_closure = " ".join(spec["roots"][0]["closure"])
    for dep in (
        "pyyaml",
        "openai",
        "aiohttp",
        "msgpack",
        "systemd-python",
        "python-dotenv",
        "orjson",
        "tree-sitter",
        "python-tree-sitter-bash",
    ):
        assert f"python3.13-{dep}-" in hermesd_closure, dep
    postbuild = evaluate(enabled(), "e.config.services.hermes-agent.pythonEnv.stub.postBuild")
    check = evaluate(enabled(), "e.config.services.hermes-agent.pythonEnv.conflictCheck")
    assert check in postbuild  # the environment cannot be built before the check passed


# --- extraPlugins: the checked folder ------------------------------------------------------------

SOURCES = (
    "builtins.fromJSON (builtins.unsafeDiscardStringContext "
    "e.config.services.hermes-agent.pluginDir.stub.sources)"
)


def test_plugin_sources_carry_their_store_path_and_where_they_came_from() -> None:
    body = """extraPlugins = [
      (pkgs.runCommand "source" { url = "https://github.com/you/hermes-weather"; } "")
      "${pkgs.runCommand "bundle" { } ""}/plugins/one"
    ];"""
    sources = evaluate(enabled(body), SOURCES)
    assert re.fullmatch(STORE_PATH + "source", sources[0]["path"])
    assert sources[0]["label"] == "https://github.com/you/hermes-weather"
    assert re.fullmatch(STORE_PATH + "bundle/plugins/one", sources[1]["path"])


def test_the_same_plugin_declared_twice_is_one_source() -> None:
    body = 'extraPlugins = let p = pkgs.runCommand "weather" { } ""; in [ p p ];'
    assert len(evaluate(enabled(body), SOURCES)) == 1


def plugin_dir(root: Path, folder: str, manifest: str) -> Path:
    """A minimal directory plugin."""
    path = root / folder
    path.mkdir(parents=True)
    (path / "plugin.yaml").write_text(manifest)
    (path / "__init__.py").write_text("def register(ctx):\n    pass\n")
    return path


def build_plugin_dir(tmp_path: Path, plugins: list[Path]) -> subprocess.CompletedProcess[str]:
    """Evaluate the module with these plugins and run its plugin-folder build step here."""
    if not store_writable():
        pytest.skip("needs a writable /nix/store to copy the plugins into")
    nix_list = " ".join(f"(/. + {json.dumps(str(p))})" for p in plugins)
    stub = evaluate(
        enabled(f"extraPlugins = [ {nix_list} ];"),
        "{ inherit (e.config.services.hermes-agent.pluginDir.stub) sources buildCommand; }",
        store=True,
    )
    sources = tmp_path / "sources.json"
    sources.write_text(stub["sources"])
    out = tmp_path / "out"
    env = {
        **os.environ,
        "sourcesPath": str(sources),
        "out": str(out),
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
    }
    return subprocess.run(
        ["bash", "-euc", stub["buildCommand"]], env=env, capture_output=True, text=True, timeout=60
    )


def test_the_plugin_folder_links_each_plugin_by_its_manifest_name(tmp_path: Path) -> None:
    a = plugin_dir(tmp_path / "a", "source", "name: weather\nversion: 1.0.0\n")
    b = plugin_dir(tmp_path / "b", "echo-plugin", "version: 2\n")
    proc = build_plugin_dir(tmp_path, [a, b])
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == ["echo-plugin", "weather"]
    assert (out / "weather" / "plugin.yaml").read_text() == "name: weather\nversion: 1.0.0\n"
    assert os.readlink(out / "weather").startswith("/nix/store/")


def test_two_plugins_with_one_name_fail_the_build_naming_both_sources(tmp_path: Path) -> None:
    a = plugin_dir(tmp_path / "a", "weather-a", "name: weather\n")
    b = plugin_dir(tmp_path / "b", "weather-b", "name: weather\n")
    proc = build_plugin_dir(tmp_path, [a, b])
    assert proc.returncode == 1
    assert "services.hermes-agent.extraPlugins: two plugins are named 'weather':" in proc.stderr
    assert f"-weather-a ({a})" in proc.stderr and f"-weather-b ({b})" in proc.stderr
    assert not (tmp_path / "out").exists()


def test_two_fetched_plugins_without_names_get_the_name_hint(tmp_path: Path) -> None:
    a = plugin_dir(tmp_path / "a", "source", "version: 1\n")
    b = plugin_dir(tmp_path / "b", "source", "version: 2\n")
    proc = build_plugin_dir(tmp_path, [a, b])
    assert proc.returncode == 1
    assert "two plugins are named 'source':" in proc.stderr
    assert (
        'Give each fetcher its own name, e.g. pkgs.fetchFromGitHub { name = "my-plugin";'
        in proc.stderr
    )


def test_a_folder_without_init_py_fails_the_build(tmp_path: Path) -> None:
    a = plugin_dir(tmp_path / "a", "weather", "name: weather\n")
    (a / "__init__.py").unlink()
    proc = build_plugin_dir(tmp_path, [a])
    assert proc.returncode == 1
    assert "has no __init__.py" in proc.stderr


def test_settings_cron_renders_and_passes_hermesds_config_check(tmp_path: Path) -> None:
    body = (
        'settings.cron = { timezone = "Europe/Berlin"; disabled_toolsets = [ "terminal" ];'
        " approval_timeout = 120; output_retention = 20; };"
        ' settings.approvals.cron_mode = "deny";'
    )
    settings = evaluate(enabled(body), RENDERED)
    assert settings["cron"] == {
        "timezone": "Europe/Berlin",
        "disabled_toolsets": ["terminal"],
        "approval_timeout": 120,
        "output_retention": 20,
    }
    assert settings["approvals"] == {"cron_mode": "deny"}
    settings["socket"]["group"] = "root"
    (tmp_path / "config.yaml").write_text(json.dumps(settings))
    check = subprocess.run(
        [sys.executable, str(REPO / "nix" / "check_config.py"), str(tmp_path / "config.yaml")],
        capture_output=True,
        text=True,
    )
    assert check.returncode == 0, check.stderr
    settings["cron"]["timezone"] = 5
    (tmp_path / "config.yaml").write_text(json.dumps(settings))
    wrong = subprocess.run(
        [sys.executable, str(REPO / "nix" / "check_config.py"), str(tmp_path / "config.yaml")],
        capture_output=True,
        text=True,
    )
    assert wrong.returncode != 0 and "cron.timezone" in wrong.stderr


# --- MCP servers ---------------------------------------------------------------------------------


def test_mcp_servers_render_as_settings_mcp_servers() -> None:
    body = """mcpServers = {
      remote = { url = "http://127.0.0.1:9000/mcp"; headers.Authorization = "Bearer \\${TOKEN}"; };
      local = { command = "uvx"; args = [ "mcp-server-time" ]; tools.exclude = [ "convert*" ]; };
    };"""
    assert evaluate(enabled(body), RENDERED)["mcp_servers"] == {
        "remote": {
            "url": "http://127.0.0.1:9000/mcp",
            "headers": {"Authorization": "Bearer ${TOKEN}"},
        },
        "local": {
            "command": "uvx",
            "args": ["mcp-server-time"],
            "tools": {"exclude": ["convert*"]},
        },
    }


def test_an_mcp_server_command_may_be_a_package() -> None:
    body = """mcpServers.time.command = derivation {
      name = "mcp-time"; system = "x86_64-linux"; builder = "/bin/sh";
    } // { meta.mainProgram = "mcp-server-time"; };"""
    command = evaluate(enabled(body), RENDERED)["mcp_servers"]["time"]["command"]
    assert re.fullmatch(STORE_PATH + r"mcp-time/bin/mcp-server-time", command), command


def test_an_mcp_server_command_may_be_a_path_copied_to_the_store(tmp_path: Path) -> None:
    script = tmp_path / "server.sh"
    script.write_text("#!/bin/sh\n")
    body = f"mcpServers.mine.command = {nix_path(script)};"
    rendered = evaluate(enabled(body), RENDERED, store=True)
    assert re.fullmatch(STORE_PATH + r"server\.sh", rendered["mcp_servers"]["mine"]["command"])


def test_no_mcp_servers_render_nothing() -> None:
    assert "mcp_servers" not in evaluate(enabled(), RENDERED)


def test_rendered_mcp_servers_pass_hermesds_check(tmp_path: Path) -> None:
    body = 'mcpServers.t = { command = "mcp-server-time"; timeout = 30; trusted = true; };'
    settings = evaluate(enabled(body), RENDERED)
    settings["socket"]["group"] = "root"
    (tmp_path / "config.yaml").write_text(json.dumps(settings))
    check = subprocess.run(
        [sys.executable, str(REPO / "nix" / "check_config.py"), str(tmp_path / "config.yaml")],
        capture_output=True,
        text=True,
    )
    assert check.returncode == 0, check.stderr


def test_a_wrong_mcp_server_fails_the_config_check_naming_the_key(tmp_path: Path) -> None:
    body = 'mcpServers.t = { command = "x"; url = "http://h"; };'
    settings = evaluate(enabled(body), RENDERED)
    (tmp_path / "config.yaml").write_text(json.dumps(settings))
    check = subprocess.run(
        [sys.executable, str(REPO / "nix" / "check_config.py"), str(tmp_path / "config.yaml")],
        capture_output=True,
        text=True,
    )
    assert check.returncode == 78
    assert "'mcp_servers.t' needs exactly one of 'command'" in check.stderr


# --- the HTTP door -------------------------------------------------------------------------------


def test_the_http_door_is_off_by_default_and_rendered_when_enabled() -> None:
    assert "http" not in evaluate(enabled(), RENDERED)
    body = 'http = { enable = true; tokenFile = "/run/secrets/hermes-http"; };'
    assert evaluate(enabled(body), RENDERED)["http"] == {
        "listen": "127.0.0.1:8642",
        "token_file": "/run/secrets/hermes-http",
    }
    opened = evaluate(enabled(body), "e.config.networking.firewall.allowedTCPPorts or [ ]")
    assert opened == []


def test_the_http_door_gets_a_socket_unit_named_http_for_the_service() -> None:
    assert evaluate(enabled(), "e.config.systemd.sockets ? hermesd-http") is False
    body = 'http = { enable = true; listen = "127.0.0.1:9000"; };'
    unit = evaluate(enabled(body), "e.config.systemd.sockets.hermesd-http")
    assert unit["listenStreams"] == ["127.0.0.1:9000"]
    assert unit["socketConfig"]["FileDescriptorName"] == "http"
    assert unit["socketConfig"]["Service"] == "hermesd.service"
    assert service(body)["serviceConfig"]["Sockets"] == ["hermesd.socket", "hermesd-http.socket"]


# --- chat platforms (docs/gateway.md) ------------------------------------------------------------


def test_chat_platforms_render_with_their_token_files() -> None:
    assert "gateway" not in evaluate(enabled(), RENDERED)
    body = (
        'gateway.platforms.telegram = { tokenFile = "/run/secrets/tg"; owners = [ "42" ]; '
        'home_channel = "42"; };'
    )
    assert evaluate(enabled(body), RENDERED)["gateway"] == {
        "platforms": {
            "telegram": {
                "enabled": True,
                "token_file": "/run/secrets/tg",
                "owners": ["42"],
                "allow": [],
                "home_channel": "42",
            }
        }
    }


def test_matrix_renders_with_its_homeserver_and_password_file() -> None:
    body = (
        "gateway.platforms.matrix = { "
        'homeserver = "https://example.org"; user_id = "@hermes:example.org"; '
        'passwordFile = "/run/secrets/mx"; owners = [ "@me:example.org" ]; encryption = true; };'
    )
    assert evaluate(enabled(body), RENDERED)["gateway"]["platforms"]["matrix"] == {
        "enabled": True,
        "homeserver": "https://example.org",
        "user_id": "@hermes:example.org",
        "password_file": "/run/secrets/mx",
        "owners": ["@me:example.org"],
        "allow": [],
        "encryption": True,
    }
