"""hermesd started exactly as the NixOS module's units start it, with both kinds of plugin.

The unit comes from evaluating nix/module.nix with nixpkgs' real lib (as tests/nix/test_module.py
does; skipped without one): its ExecStartPre, ExecStart, Environment, EnvironmentFile,
WorkingDirectory and UMask, and the socket unit's ListenStream, are carried out here with
`systemd-socket-activate` and a NOTIFY_SOCKET. The module's own plugin-folder build step makes
the HERMES_PLUGIN_PATH folder; the entry-point plugin is installed into one Python environment
with hermesd, as the module's buildEnv does.
What differs from a real system is only where things live: store paths and /etc map to a
temporary directory, and as root the daemon gets `--allow-root` (the unit runs it as `hermes`).
"""

from __future__ import annotations

import errno
import grp
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from hermesctl.client import Client
from tests.nix.test_module import evaluate, needs_lib, needs_nix, store_writable
from tests.support.daemon import NotifyListener, short_tmpdir
from tests.support.otheruser import talk_as

ACTIVATE = shutil.which("systemd-socket-activate")

pytestmark = [
    needs_nix,
    needs_lib,
    pytest.mark.skipif(ACTIVATE is None, reason="systemd-socket-activate missing"),
    pytest.mark.skipif(not store_writable(), reason="needs a writable /nix/store"),
]

DIR_PLUGIN_MANIFEST = """\
name: nixdir
version: 1.0.0
description: Directory plugin handed in by services.hermes-agent.extraPlugins
requires_env:
  - NIXDIR_TOKEN
"""
DIR_PLUGIN_INIT = """\
import json
import os

SCHEMA = {
    "name": "nixdir_token_length",
    "description": "Length of the NIXDIR_TOKEN secret the service was given -> JSON {length}.",
    "parameters": {"type": "object", "properties": {}},
}


def token_length(args, **kwargs):
    return json.dumps({"length": len(os.environ.get("NIXDIR_TOKEN", ""))})


def register(ctx):
    ctx.register_tool(name="nixdir_token_length", toolset="nixdir", schema=SCHEMA,
                      handler=token_length, description=SCHEMA["description"])
"""
ENTRY_PLUGIN_INIT = """\
def register(ctx):
    ctx.register_command("nixentry", handler=lambda raw: "nixentry is here",
                         description="Say that the entry-point plugin loaded")
"""


def make_python_env(root: Path) -> Path:
    """One environment: hermesd (from this checkout's interpreter) plus an entry-point package.

    The module's `python.buildEnv` is a site-packages holding every package; here a venv whose
    site-packages adds the running interpreter's (where hermesd and its dependencies are) and
    holds the plugin distribution as pip would install it.
    """
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    python = root / "bin" / "python"
    purelib = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = Path(
        subprocess.run(
            [str(python), "-c", purelib], check=True, capture_output=True, text=True
        ).stdout.strip()
    )
    base = sysconfig.get_paths()["purelib"]
    (site / "hermesd-base.pth").write_text(f"import site; site.addsitedir({base!r})\n")
    package = site / "hermes_nixentry"
    package.mkdir()
    (package / "__init__.py").write_text(ENTRY_PLUGIN_INIT)
    info = site / "hermes_nixentry-1.0.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: hermes-nixentry\n"
        "Version: 1.0.0\nSummary: Entry-point plugin handed in by "
        "services.hermes-agent.extraPythonPackages\n"
    )
    (info / "entry_points.txt").write_text("[hermes_agent.plugins]\nnixentry = hermes_nixentry\n")
    (info / "RECORD").write_text("")
    return python


@dataclass
class Unit:
    """The module's units, evaluated for paths under one temporary directory."""

    service: dict[str, Any]
    socket: dict[str, Any]
    settings: dict[str, Any]
    plugin_build: dict[str, str]
    python_env: str


def service_group() -> str:
    """The module's `group` here: one hermesd can resolve, and not root's when we are root."""
    if os.geteuid() == 0:
        try:
            return grp.getgrnam("nogroup").gr_name
        except KeyError:
            pass
    return grp.getgrgid(os.getegid()).gr_name


def module_units(root: Path, plugin: Path) -> Unit:
    group = service_group()
    body = f"""
      user = "hermes-test"; group = {json.dumps(group)};
      stateDir = "{root}/state";
      socket.path = "{root}/run/hermesd.sock";
      environmentFiles = [ "{root}/secrets.env" ];
      extraPlugins = [ (/. + {json.dumps(str(plugin))}) ];
      extraPythonPackages = ps: [
        (ps.buildPythonPackage {{ pname = "hermes-nixentry"; version = "1.0.0"; }})
      ];
      settings.model.base_url = "http://127.0.0.1:9/v1";
    """
    data = evaluate(
        f"{{ pkgs, ... }}: {{ services.hermes-agent = {{ enable = true; {body} }}; }}",
        """let c = e.config; h = c.services.hermes-agent; in {
          service = c.systemd.services.hermesd;
          socket = c.systemd.sockets.hermesd;
          settings = c.environment.etc."hermes/config.yaml".source.stub.rendered.value;
          plugin_build = { inherit (h.pluginDir.stub) sources buildCommand; };
          python_env = h.pythonEnv;
        }""",
        store=True,
    )
    return Unit(
        data["service"], data["socket"], data["settings"], data["plugin_build"], data["python_env"]
    )


def build_plugin_folder(unit: Unit, work: Path) -> Path:
    """Run the module's plugin-folder build step; returns its output."""
    (work / "sources.json").write_text(unit.plugin_build["sources"])
    out = work / "plugins-out"
    env = {
        **os.environ,
        "sourcesPath": str(work / "sources.json"),
        "out": str(out),
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
    }
    subprocess.run(["bash", "-euc", unit.plugin_build["buildCommand"]], env=env, check=True)
    return out


def read_environment_file(path: Path) -> dict[str, str]:
    """NAME=value lines, as systemd's EnvironmentFile= reads the simple cases."""
    env = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            env[key.strip()] = value.strip()
    return env


@dataclass
class Started:
    proc: subprocess.Popen[bytes]
    socket: Path
    state: Path
    notify: NotifyListener
    unit: Unit

    def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        with Client.connect(self.socket, timeout=30) as c:
            return c.call(method, params)


@pytest.fixture
def started() -> Iterator[Started]:
    root = short_tmpdir("hn-")
    plugin = root / "nixdir-src"
    plugin.mkdir()
    (plugin / "plugin.yaml").write_text(DIR_PLUGIN_MANIFEST)
    (plugin / "__init__.py").write_text(DIR_PLUGIN_INIT)
    (root / "secrets.env").write_text("NIXDIR_TOKEN=s3cret\n")
    (root / "secrets.env").chmod(0o600)
    unit = module_units(root, plugin)
    service = unit.service["serviceConfig"]

    # What the system provides around the unit: /etc/hermes/config.yaml, the Python environment,
    # the plugin folder, coreutils.
    etc_config = root / "etc" / "hermes" / "config.yaml"
    etc_config.parent.mkdir(parents=True)
    etc_config.write_text(json.dumps(unit.settings))
    python = make_python_env(root / "env")
    paths = {
        "/etc/hermes/config.yaml": str(etc_config),
        unit.service["environment"]["HERMES_PLUGIN_PATH"]: str(build_plugin_folder(unit, root)),
    }

    def local(arg: str) -> str:
        for store, here in paths.items():
            arg = arg.replace(store, here)
        return arg

    state = Path(service["WorkingDirectory"])
    state.mkdir(mode=0o700)  # StateDirectory= / the tmpfiles rule
    for pre in [service["ExecStartPre"]]:
        argv = shlex.split(pre)
        assert argv[0].endswith("/bin/ln"), argv
        subprocess.run(["ln", *map(local, argv[1:])], check=True)

    argv = shlex.split(service["ExecStart"])
    assert argv[0] == f"{unit.python_env}/bin/hermesd", argv
    argv = [str(python), "-m", "hermesd", *argv[1:]]
    if os.geteuid() == 0:
        argv.append("--allow-root")
    env = {"PATH": os.environ["PATH"], "HOME": str(root)}
    env.update({k: local(v) for k, v in unit.service["environment"].items()})
    env_files = service["EnvironmentFile"]
    for name in env_files if isinstance(env_files, list) else [env_files]:
        env.update(read_environment_file(Path(name.lstrip("-"))))
    notify = NotifyListener(root / "notify.sock")
    env["NOTIFY_SOCKET"] = str(notify.path)
    env["WATCHDOG_USEC"] = str(int(service["WatchdogSec"]) * 1_000_000)

    [listen] = unit.socket["listenStreams"]
    listen_path = Path(listen)
    listen_path.parent.mkdir(mode=0o755)  # DirectoryMode= of the socket unit
    activate = [ACTIVATE or "systemd-socket-activate", "-l", listen]
    for name, value in env.items():
        activate += ["-E", f"{name}={value}"]
    umask = int(service["UMask"], 8)
    proc = subprocess.Popen(
        activate + argv,
        env=env,
        cwd=state,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        umask=umask,
    )
    for _ in range(100):
        if listen_path.exists():
            break
        time.sleep(0.05)
    if os.geteuid() == 0:  # what SocketGroup=/SocketMode= make of it (needs root to chown)
        socket_config = unit.socket["socketConfig"]
        os.chown(listen_path, -1, grp.getgrnam(socket_config["SocketGroup"]).gr_gid)
        os.chmod(listen_path, int(socket_config["SocketMode"], 8))
        root.chmod(0o755)
    daemon = Started(proc, listen_path, state, notify, unit)
    try:
        yield daemon
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        output = proc.communicate(timeout=30)[0].decode(errors="replace")
        notify.close()
        shutil.rmtree(root, ignore_errors=True)
        if proc.returncode not in (0, -signal.SIGTERM):
            print(output)


def test_hermesd_starts_socket_activated_as_the_unit_says(started: Started) -> None:
    status = started.call("status")  # the first connection starts hermesd
    started.notify.wait_for("READY=1")
    assert status["socket_activated"] is True
    assert status["socket"] == str(started.socket)
    assert status["home"] == str(started.state)
    assert status["config_warnings"] == []
    link = started.state / "config.yaml"
    assert link.is_symlink() and json.loads(link.read_text()) == started.unit.settings


def test_both_plugins_load_the_directory_one_and_the_entry_point_one(started: Started) -> None:
    hello = started.call("hello")
    if "plugins.list" not in hello["methods"]:
        pytest.skip("plugins.list is not served by this hermesd yet (plugin host pending)")
    listing = started.call("plugins.list")
    plugins = {p["key"]: p for p in listing["plugins"]}
    assert plugins["nixdir"]["state"] == "loaded", plugins["nixdir"]
    assert plugins["nixdir"]["source"] == "path"
    assert plugins["nixentry"]["state"] == "loaded", plugins["nixentry"]
    assert plugins["nixentry"]["source"] == "entrypoint"
    assert plugins["nixentry"]["version"] == "1.0.0"
    assert "✓ nixdir v1.0.0 (1 tools)" in listing["text"]
    assert "✓ nixentry v1.0.0" in listing["text"]


def test_the_environment_file_reaches_the_plugins(started: Started) -> None:
    if "tools.call" not in started.call("hello")["methods"]:
        pytest.skip("tools.call is not served by this hermesd yet (plugin host pending)")
    result = started.call("tools.call", {"name": "nixdir_token_length"})["result"]
    assert json.loads(result) == {"length": len("s3cret")}


def test_exec_reload_reloads_in_place(started: Started) -> None:
    pid = started.call("status")["pid"]
    started.notify.wait_for("READY=1")
    reload = started.unit.service["serviceConfig"]["ExecReload"]
    assert shlex.split(reload)[1:] == ["-HUP", "$MAINPID"]
    os.kill(pid, signal.SIGHUP)
    started.notify.wait_for("RELOADING=1")
    deadline = time.monotonic() + 15
    while started.notify.count("READY=1") < 2:
        assert time.monotonic() < deadline, started.notify.messages
        time.sleep(0.05)
    assert started.call("status")["pid"] == pid


@pytest.mark.skipif(os.geteuid() != 0, reason="connecting as another uid needs root")
def test_members_of_the_group_get_in_and_others_do_not(started: Started) -> None:
    started.call("status")
    gid = grp.getgrnam(started.unit.socket["socketConfig"]["SocketGroup"]).gr_gid
    member = talk_as(65534, gid, started.socket, [[0, 1, "ping", []]])
    assert [m[2] for m in member.get("received", []) if m[0] == 1] == [None], member
    outsider = talk_as(65534, 65533, started.socket, [[0, 1, "ping", []]])
    assert outsider == {"connect_error": errno.EACCES}, outsider
