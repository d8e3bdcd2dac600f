"""The flake's outputs evaluate, with nixpkgs overridden by the stand-in flake in nix/tests/stubs.

Nothing is built (no nixpkgs, no network): `nix flake show`, `nix flake check --no-build` and
`nix eval` run on copies of the flake and the stub, because a flake inside a git checkout only
sees tracked files. The stub flake's `lib` is nixpkgs' real lib (found as tests/nix/test_module.py
finds it, and copied in beside the stub), its packages are the stub ones. The VM test's machine is
evaluated with the real module system, and its test script, rendered for that machine, must at
least be valid Python.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.nix.test_module import (
    EVAL_MODULE,
    STORE_PATH,
    needs_lib,
    needs_nix,
    nix_eval,
    nix_path,
    nixpkgs_lib,
)
from tests.support.daemon import REPO

NIX = shutil.which("nix")
SYSTEMS = ["aarch64-linux", "x86_64-linux"]
STUBS = REPO / "nix" / "tests" / "stubs"

pytestmark = [needs_nix, needs_lib, pytest.mark.skipif(NIX is None, reason="nix missing")]


@pytest.fixture(scope="module")
def flakes(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("flakes")
    repo, stub = root / "hermesd", root / "nixpkgs"
    repo.mkdir()
    for name in ("flake.nix", "pyproject.toml", "README.md"):
        shutil.copy(REPO / name, repo / name)
    shutil.copytree(
        REPO / "nix", repo / "nix", ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
    )
    shutil.copytree(STUBS, stub)
    shutil.copytree(nixpkgs_lib(), stub / "lib")
    return repo, stub


def nix(flakes: tuple[Path, Path], *args: str) -> subprocess.CompletedProcess[str]:
    repo, stub = flakes
    argv = [
        NIX or "nix",
        "--extra-experimental-features",
        "nix-command flakes",
        *args,
        "--no-write-lock-file",
        "--override-input",
        "nixpkgs",
        f"path:{stub}",
    ]
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=repo)


def flake_eval(flakes: tuple[Path, Path], attr: str) -> Any:
    proc = nix(flakes, "eval", "--json", f"path:{flakes[0]}#{attr}")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_flake_shows_every_output_for_both_systems(flakes: tuple[Path, Path]) -> None:
    proc = nix(flakes, "flake", "show", "--json", f"path:{flakes[0]}")
    assert proc.returncode == 0, proc.stderr
    shown = json.loads(proc.stdout)
    for output in ("packages", "apps", "checks", "devShells"):
        assert sorted(shown[output]) == SYSTEMS, output
    for system in SYSTEMS:
        assert sorted(shown["packages"][system]) == ["default", "hermesd"]
        assert sorted(shown["apps"][system]) == ["default", "hermesctl", "hermesd"]
        assert sorted(shown["checks"][system]) == ["hermesd", "vm"]
        assert shown["checks"][system]["vm"]["name"] == "vm-test-run-hermes-agent"
        assert list(shown["devShells"][system]) == ["default"]
    assert sorted(shown["nixosModules"]) == ["default", "hermes-agent"]
    assert list(shown["overlays"]) == ["default"]


def test_flake_exposes_the_home_manager_module(flakes: tuple[Path, Path]) -> None:
    # `nix flake show` knows no Home-Manager outputs (it prints them as "unknown"): read them.
    for output in ("homeManagerModules", "homeModules"):
        names = f"path:{flakes[0]}#{output}"
        proc = nix(flakes, "eval", "--json", names, "--apply", "builtins.attrNames")
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout) == ["default", "hermes-agent"], output
    module = f"path:{flakes[0]}#homeModules.default"
    proc = nix(flakes, "eval", "--json", module, "--apply", "m: builtins.isFunction m")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) is True


def test_flake_check_evaluates_every_output(flakes: tuple[Path, Path]) -> None:
    proc = nix(flakes, "flake", "check", "--no-build", f"path:{flakes[0]}")
    assert proc.returncode == 0, proc.stderr


def test_package_is_hermesd_from_pyproject(flakes: tuple[Path, Path]) -> None:
    assert flake_eval(flakes, "packages.x86_64-linux.default.name") == "hermesd-0.1.0"
    assert flake_eval(flakes, "packages.aarch64-linux.hermesd.meta.mainProgram") == "hermesd"


def test_apps_run_hermesd_and_hermesctl(flakes: tuple[Path, Path]) -> None:
    apps = flake_eval(flakes, "apps.x86_64-linux")
    package = flake_eval(flakes, "packages.x86_64-linux.hermesd.outPath")
    assert apps["hermesctl"]["type"] == apps["hermesd"]["type"] == "app"
    assert apps["hermesctl"]["program"] == f"{package}/bin/hermesctl"
    assert apps["hermesd"]["program"] == f"{package}/bin/hermesd"
    assert apps["default"] == apps["hermesd"]


def test_overlay_adds_hermesd(flakes: tuple[Path, Path]) -> None:
    repo, stub = flakes
    name = nix_eval(
        f"let pkgs = import {stub}/pkgs.nix {{ lib = import {stub}/lib; }}; "
        f"overlay = (import {repo}/flake.nix).outputs; in "
        f"((overlay {{ self = {{ }}; nixpkgs = {{ }}; }}).overlays.default pkgs pkgs)"
        f".hermesd.name"
    )
    assert name == "hermesd-0.1.0"


# --- the VM test, evaluated --------------------------------------------------------------------


def vm_test_expr() -> str:
    """The VM test's machine, evaluated as eval-module.nix evaluates the module."""
    return f"""
let
  lib = import {nix_path(nixpkgs_lib())};
  test = import {nix_path(REPO / "nix" / "tests" / "hermes-agent.nix")} {{
    inherit lib;
    inherit (node) pkgs;
  }};
  node = import {nix_path(EVAL_MODULE)} {{ inherit lib; configuration = test.nodes.machine; }};
  cfg = node.config.services.hermes-agent;
in {{
  inherit (test) name;
  script = test.testScript {{ nodes.machine = node.config; }};
  failed = node.failedAssertions;
  plugins = builtins.fromJSON (builtins.unsafeDiscardStringContext cfg.pluginDir.stub.sources);
  pythonLibs = map (d: d.name) cfg.pythonEnv.extraLibs;
  environmentFile = node.config.systemd.services.hermesd.serviceConfig.EnvironmentFile;
  alice = node.config.users.users.alice.extraGroups;
  packages = map (p: p.name) node.config.environment.systemPackages;
}}
"""


def test_vm_test_machine_evaluates_with_both_plugins_and_a_valid_script() -> None:
    vm = nix_eval(vm_test_expr())
    assert vm["name"] == "hermes-agent"
    assert vm["failed"] == []
    [plugin] = vm["plugins"]
    assert plugin["path"].endswith("-source")
    assert sorted(vm["pythonLibs"]) == ["hermesd-0.1.0", "python3.13-hermes-nixentry-1.0.0"]
    assert vm["environmentFile"] == "/etc/hermes-test/secrets.env"
    assert vm["alice"] == ["hermes"]
    assert sorted(vm["packages"]) == ["hermes-vm-session", "hermesctl-0.1.0"]
    compile(vm["script"], "testScript", "exec")
    for needle in (
        "hermesctl cmd /plugins",
        "✓ nixdir v1.0.0",
        "✓ nixentry v1.0.0",
        "systemctl reload hermesd.service",
        "systemctl restart hermesd.service",
    ):
        assert needle in vm["script"], needle
    assert re.search(STORE_PATH + r"python3-3\.13-env/bin/hermesd --check-config", vm["script"])
