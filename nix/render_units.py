#!/usr/bin/env python3
"""Write contrib/systemd/{,user/}hermesd.{socket,service} from nix/units.nix, or check them.

nix/units.nix is the one declaration of hermesd's unit directives; the NixOS module calls it with
store paths, and this script renders it with its defaults (a conventional /usr install) into the
shipped unit files. Standard library only; needs ``nix-instantiate``.

    python3 nix/render_units.py            # rewrite contrib/systemd/*
    python3 nix/render_units.py --check    # exit 1 when contrib/systemd/* are out of date
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

NIX_DIR = Path(__file__).resolve().parent
REPO = NIX_DIR.parent
CONTRIB = REPO / "contrib" / "systemd"
GENERATED = "Generated from nix/units.nix by nix/render_units.py; edit those, not this file."


def evaluate(params: str = "{ }") -> dict[str, Any]:
    """``import nix/units.nix <params>`` as JSON."""
    expr = (
        f"let u = import {NIX_DIR / 'units.nix'} {params}; "
        "in { inherit (u) socket service directives environment stateDirectory; }"
    )
    proc = subprocess.run(
        ["nix-instantiate", "--eval", "--strict", "--json", "--expr", expr],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"nix-instantiate failed:\n{proc.stderr}")
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def _value(value: str | list[str]) -> str:
    return " ".join(value) if isinstance(value, list) else value


def render(unit: dict[str, Any], generated_note: bool = True) -> str:
    """One unit file's text from ``{header, sections}``."""
    lines = [f"# {line}" for line in unit["header"]]
    if generated_note:
        lines.append(f"# {GENERATED}")
    for index, section in enumerate(unit["sections"]):
        if index:
            lines.append("")
        lines.append(f"[{section['name']}]")
        for entry in section["entries"]:
            if "key" in entry:
                lines.append(f"{entry['key']}={_value(entry['value'])}")
            elif entry["comment"]:
                lines.append(f"# {entry['comment']}")
            else:
                lines.append("")
    return "\n".join(lines) + "\n"


def rendered_files(params: str = "{ }") -> dict[str, str]:
    """File name → text for both units."""
    units = evaluate(params)
    return {"hermesd.socket": render(units["socket"]), "hermesd.service": render(units["service"])}


def all_files() -> dict[str, str]:
    """Path below contrib/systemd → text: the system pair and the per-user pair (user/)."""
    files = rendered_files()
    files.update({f"user/{n}": t for n, t in rendered_files('{ scope = "user"; }').items()})
    return files


def main(argv: list[str] | None = None) -> int:
    """Entry point: write or check the contrib units."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report files that differ")
    parser.add_argument("--out", type=Path, default=CONTRIB, help="directory (contrib/systemd)")
    args = parser.parse_args(argv)
    stale = []
    for name, text in all_files().items():
        path = args.out / name
        path.parent.mkdir(parents=True, exist_ok=True)
        current = path.read_text() if path.exists() else None
        if current == text:
            continue
        stale.append(name)
        if not args.check:
            path.write_text(text)
    if args.check and stale:
        print(f"out of date: {', '.join(stale)} (run python3 nix/render_units.py)", file=sys.stderr)
        return 1
    for name in stale:
        print(f"wrote {args.out / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
