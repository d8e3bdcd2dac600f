#!/usr/bin/env python3
"""Refuse a hermesd Python environment holding two versions of one distribution.

Runs at build time (nix/module.nix, `services.hermes-agent.extraPythonPackages`) before the one
environment with hermesd and the plugin packages is assembled. Reads a JSON file
``{"sitePackages": "lib/python3.X/site-packages", "roots": [{"name": ..., "closure": [paths]}]}``
(each root is hermesd or one extra package, its closure the Python packages it needs) and reads
every installed distribution's name and version from its ``*.dist-info/METADATA``. The same
version reached from several roots is fine; two versions fail with a message naming both store
paths and which roots need each. Standard library only.

    check_python_env.py ROOTS.json
"""

from __future__ import annotations

import json
import re
import sys
from email.parser import HeaderParser
from pathlib import Path
from typing import Any, NamedTuple


class Distribution(NamedTuple):
    name: str
    version: str
    path: str


def canonical(name: str) -> str:
    """PEP 503 normalised project name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def distributions(store_path: str, site_packages: str) -> list[Distribution]:
    """Every distribution installed in one store path's site-packages."""
    found = []
    site = Path(store_path) / site_packages
    metadata = sorted(site.glob("*.dist-info/METADATA")) + sorted(site.glob("*.egg-info/PKG-INFO"))
    for meta in metadata:
        headers = HeaderParser().parsestr(meta.read_text(encoding="utf-8", errors="replace"))
        if headers.get("Name"):
            found.append(Distribution(headers["Name"], headers.get("Version", "?"), store_path))
    return found


def conflicts(spec: dict[str, Any]) -> list[str]:
    """One message per distribution present in more than one version."""
    needed_by: dict[str, list[str]] = {}
    for root in spec["roots"]:
        for path in root["closure"]:
            needed_by.setdefault(path, [])
            if root["name"] not in needed_by[path]:
                needed_by[path].append(root["name"])
    versions: dict[str, dict[str, list[Distribution]]] = {}
    for path in needed_by:
        for dist in distributions(path, spec["sitePackages"]):
            versions.setdefault(canonical(dist.name), {}).setdefault(dist.version, []).append(dist)
    messages = []
    for name, by_version in sorted(versions.items()):
        if len(by_version) < 2:
            continue
        lines = [f"'{name}' would be in the environment in {len(by_version)} versions:"]
        for version, dists in sorted(by_version.items()):
            for dist in dists:
                roots = ", ".join(needed_by[dist.path])
                lines.append(f"  {version}  {dist.path}  (needed by {roots})")
        messages.append("\n".join(lines))
    return messages


ADVICE = (
    "hermesd and every package of services.hermes-agent.extraPythonPackages share one Python "
    "environment, so each distribution can be there in one version only. Build the plugin "
    "from hermesd's package set (the function form `extraPythonPackages = ps: [ ... ]` passes "
    "it), or override one package to the other's version."
)


def main(argv: list[str]) -> int:
    """Entry point: ``check_python_env.py ROOTS.json``."""
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    spec = json.loads(Path(argv[1]).read_text(encoding="utf-8"))
    messages = conflicts(spec)
    for message in messages:
        print(f"services.hermes-agent.extraPythonPackages: {message}", file=sys.stderr)
    if messages:
        print(ADVICE, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
