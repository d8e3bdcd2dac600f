"""One declaration of the units: contrib/systemd/* and the NixOS module's units agree.

nix/units.nix declares every directive; nix/render_units.py writes contrib/systemd/* from it and
nix/module.nix feeds it into systemd.services/sockets. These tests check the shipped files are
current, compare the module's units with them directive by directive (only the parameters a
NixOS install must change may differ, and those are checked for their NixOS values), and run
`systemd-analyze verify` and `security` on the units as the module renders them.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.nix.test_module import STORE_PATH, enabled, evaluate, needs_lib, needs_nix
from tests.support.daemon import REPO

CONTRIB = REPO / "contrib" / "systemd"
RENDER = REPO / "nix" / "render_units.py"
needs_analyze = pytest.mark.skipif(
    shutil.which("systemd-analyze") is None, reason="systemd-analyze missing"
)

pytestmark = needs_nix

Sections = dict[str, dict[str, list[str]]]


def parse_unit(text: str) -> Sections:
    """Section → key → values (in order), as systemd reads a unit file."""
    sections: Sections = {}
    current: dict[str, list[str]] | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), {})
            continue
        assert current is not None, line
        key, _, value = line.partition("=")
        current.setdefault(key, []).append(value)
    return sections


def _values(value: Any) -> list[str]:
    return list(value) if isinstance(value, list) else [value]


def nixos_sections(unit: dict[str, Any], kind: str) -> Sections:
    """The sections NixOS writes for systemd.{services,sockets}.hermesd (Install as wantedBy)."""
    sections: Sections = {"Unit": {"Description": [unit["description"]]}}
    for option, key in (
        ("documentation", "Documentation"),
        ("requires", "Requires"),
        ("after", "After"),
        ("wants", "Wants"),
    ):
        if unit.get(option):
            sections["Unit"][key] = [" ".join(unit[option])]
    for key, value in unit.get("unitConfig", {}).items():
        sections["Unit"][key] = _values(value)
    if kind == "service":
        body = {k: _values(v) for k, v in unit["serviceConfig"].items()}
        env = [f"{k}={v}" for k, v in unit["environment"].items()]
        if env:
            body["Environment"] = env
        sections["Service"] = body
    else:
        body = {k: _values(v) for k, v in unit["socketConfig"].items()}
        body["ListenStream"] = list(unit["listenStreams"])
        sections["Socket"] = body
    sections["Install"] = {"WantedBy": [" ".join(unit["wantedBy"])]}
    return sections


def module_units(body: str = "", scope: str = "system") -> dict[str, Any]:
    where = "systemd.user" if scope == "user" else "systemd"
    if scope == "user":
        body = f"userService.enable = true; {body}"
    units: dict[str, Any] = evaluate(
        enabled(body),
        f"{{ service = e.config.{where}.services.hermesd; "
        f"socket = e.config.{where}.sockets.hermesd; "
        "env = e.config.services.hermes-agent.pythonEnv; }",
    )
    return units


def test_contrib_units_are_generated_from_units_nix() -> None:
    proc = subprocess.run(
        [sys.executable, str(RENDER), "--check"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr


# Directives a NixOS install sets differently, each with what the module must set.
PARAMETERS: dict[tuple[str, str], Any] = {
    # docs/systemd.md: /usr/share/doc/hermesd in the shipped units, the package's own copy here
    ("Unit", "Documentation"): "file://"
    + STORE_PATH
    + r"hermesd-[^/]+/share/doc/hermesd/systemd\.md",
    ("Service", "ExecStart"): STORE_PATH + r"python3-3\.13-env/bin/hermesd",
    ("Service", "ExecReload"): STORE_PATH + r"coreutils-9\.5/bin/kill -HUP \$MAINPID",
    ("Service", "ExecStartPre"): STORE_PATH + r"coreutils-9\.5/bin/ln -sfn "
    r"/etc/hermes/config\.yaml /var/lib/hermes/config\.yaml",
    ("Service", "EnvironmentFile"): None,  # environmentFiles, empty by default
}


@needs_lib
@pytest.mark.parametrize("kind", ["service", "socket"])
def test_module_units_agree_with_contrib_on_every_directive(kind: str) -> None:
    shipped = parse_unit((CONTRIB / f"hermesd.{kind}").read_text())
    rendered = nixos_sections(module_units()[kind], kind)
    assert set(shipped) == set(rendered)
    for section in shipped:
        keys = set(shipped[section]) | set(rendered[section])
        for key in sorted(keys):
            if (section, key) in PARAMETERS:
                expected = PARAMETERS[section, key]
                got = rendered[section].get(key)
                if expected is None:
                    assert got is None, (section, key, got)
                else:
                    assert got is not None and len(got) == 1, (section, key, got)
                    assert re.fullmatch(expected, got[0]), (section, key, got)
                continue
            assert rendered[section].get(key) == shipped[section].get(key), (section, key)


@needs_lib
def test_every_parameter_is_used_by_one_of_the_units() -> None:
    service = parse_unit((CONTRIB / "hermesd.service").read_text())
    nixos = nixos_sections(module_units()["service"], "service")
    for section, key in PARAMETERS:
        assert key in service.get(section, {}) or key in nixos.get(section, {}), key


# --- systemd-analyze on the module's units ---------------------------------------------------


def unit_text(sections: Sections) -> str:
    lines = []
    for name, body in sections.items():
        if name == "Install":
            continue  # NixOS links the unit into its targets instead
        lines.append(f"[{name}]")
        for key in sorted(body):
            for value in body[key]:
                quoted = f'"{value}"' if key == "Environment" else value
                lines.append(f"{key}={quoted}")
        lines.append("")
    return "\n".join(lines)


def materialise(text: str, root: Path) -> str:
    """Point store paths at stand-in executables under ``root`` (verify needs them to exist)."""

    def replace(match: re.Match[str]) -> str:
        target = root / match.group(1)
        if "/bin/" in match.group(1):
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text("#!/bin/sh\nexit 0\n")
            target.chmod(0o755)
        return str(target)

    return re.sub(r"/nix/store/([0-9a-z]{32}-[^\s\"]+)", replace, text)


def render_module_units(tmp_path: Path, body: str = "") -> tuple[Path, Path]:
    units = module_units(body)
    paths = []
    for kind in ("socket", "service"):
        text = materialise(unit_text(nixos_sections(units[kind], kind)), tmp_path / "store")
        path = tmp_path / f"hermesd.{kind}"
        path.write_text(text)
        paths.append(path)
    return paths[0], paths[1]


def analyze(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["systemd-analyze", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "SYSTEMD_LOG_LEVEL": "warning"},
        timeout=60,
    )


@needs_lib
@needs_analyze
@pytest.mark.parametrize(
    "body",
    [
        "",
        (
            'stateDir = "/srv/hermes"; '
            'environmentFiles = [ "/run/secrets/hermes.env" ]; '
            'extraArgs = [ "--log-level" "two words" ];'
        ),
    ],
    ids=["defaults", "custom"],
)
def test_module_units_pass_systemd_analyze_verify(tmp_path: Path, body: str) -> None:
    socket, service = render_module_units(tmp_path, body)
    proc = analyze("verify", "--man=no", str(socket), str(service))
    problems = [line for line in (proc.stdout + proc.stderr).splitlines() if "hermesd" in line]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert problems == [], problems


def exposure(path: Path) -> float:
    proc = analyze("security", "--offline=true", "--no-pager", str(path))
    line = [x for x in proc.stdout.splitlines() if "Overall exposure level" in x]
    assert line, proc.stdout + proc.stderr
    return float(line[0].split(":")[1].split()[0])


@needs_lib
@needs_analyze
def test_module_service_exposure_matches_contrib_and_is_at_most_2(tmp_path: Path) -> None:
    _, service = render_module_units(tmp_path)
    score = exposure(service)
    contrib = exposure(CONTRIB / "hermesd.service")
    print(f"systemd-analyze security: module {score}, contrib {contrib}")
    assert score <= 2.0
    assert score == contrib


# --- the per-user pair -----------------------------------------------------------------------

USER_CONTRIB = CONTRIB / "user"
# What the module's per-user units set differently from contrib/systemd/user/*.
USER_PARAMETERS: dict[tuple[str, str], Any] = {
    ("Unit", "Documentation"): PARAMETERS["Unit", "Documentation"],
    ("Service", "ExecStart"): PARAMETERS["Service", "ExecStart"],
    ("Service", "ExecReload"): PARAMETERS["Service", "ExecReload"],
    ("Install", "WantedBy"): None,  # each user enables it, unless startByDefault
}


@needs_lib
@pytest.mark.parametrize("kind", ["service", "socket"])
def test_module_user_units_agree_with_contrib_user_units_on_every_directive(kind: str) -> None:
    shipped = parse_unit((USER_CONTRIB / f"hermesd.{kind}").read_text())
    unit = module_units(scope="user")[kind]
    rendered = nixos_sections(unit, kind)
    if not unit["wantedBy"]:
        rendered["Install"] = {}
    assert set(shipped) == set(rendered)
    for section in shipped:
        for key in sorted(set(shipped[section]) | set(rendered[section])):
            got = rendered[section].get(key)
            if (section, key) in USER_PARAMETERS:
                expected = USER_PARAMETERS[section, key]
                if expected is None:
                    assert got is None, (section, key, got)
                else:
                    assert got is not None and re.fullmatch(expected, got[0]), (section, key, got)
                continue
            assert got == shipped[section].get(key), (section, key)


@needs_lib
def test_start_by_default_enables_the_user_socket_for_every_user() -> None:
    units = module_units("userService.startByDefault = true;", scope="user")
    assert units["socket"]["wantedBy"] == ["sockets.target"]


@needs_lib
def test_the_module_offers_a_system_service_and_a_per_user_one_side_by_side() -> None:
    both = evaluate(
        enabled("userService.enable = true;"),
        "{ system = e.config.systemd.services ? hermesd; "
        "user = e.config.systemd.user.services ? hermesd; "
        "userSocket = e.config.systemd.user.sockets.hermesd.listenStreams; }",
    )
    assert both == {
        "system": True,
        "user": True,
        "userSocket": ["%t/hermes/hermesd.sock"],
    }
    user_only = evaluate(
        "{ ... }: { services.hermes-agent.userService.enable = true; }",
        "{ system = e.config.systemd.services ? hermesd; "
        "users = e.config.users.users ? hermes; "
        "user = e.config.systemd.user.services.hermesd.environment; }",
    )
    assert user_only == {"system": False, "users": False, "user": {"HERMES_HOME": "%h/.hermes"}}


@needs_lib
@needs_analyze
def test_module_user_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    units = module_units(scope="user")
    paths = []
    for kind in ("socket", "service"):
        text = materialise(unit_text(nixos_sections(units[kind], kind)), tmp_path / "store")
        path = tmp_path / f"hermesd.{kind}"
        path.write_text(text)
        paths.append(str(path))
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
