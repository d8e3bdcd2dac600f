"""nix/package.nix carries every runtime dependency pyproject.toml declares (under nixpkgs'
name), so the NixOS package runs what a pip install runs."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: pyproject name -> the nixpkgs attribute package.nix uses for it, where they differ
NIX_NAMES = {
    "ruamel-yaml": "ruamel-yaml",
    "tree-sitter-bash": "tree-sitter-grammars.tree-sitter-bash",
    "pyseccomp": "libseccomp",  # libseccomp's own binding, whose API pyseccomp copies
}


def _normalised(requirement: str) -> str:
    name = re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0]
    return re.sub(r"[-_.]+", "-", name).lower()


def test_every_runtime_dependency_is_in_the_nix_package() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    nix = (ROOT / "nix" / "package.nix").read_text()
    listed = set(re.findall(r"\bps\.([A-Za-z0-9_.-]+)", nix))
    listed.add("systemd-python")  # chosen by name (nixpkgs renamed it): see package.nix
    missing = [
        requirement
        for requirement in project["dependencies"]
        if NIX_NAMES.get(_normalised(requirement), _normalised(requirement)) not in listed
    ]
    assert not missing, f"add these to nix/package.nix's dependencies: {missing}"
