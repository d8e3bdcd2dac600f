#!/usr/bin/env python3
"""Validate a rendered config.yaml with hermesd's own schema, at build time.

nix/module.nix runs this with the Python environment the service uses, so a wrong type in
`services.hermes-agent.settings` fails `nixos-rebuild` with hermesd's message naming the key
instead of a service that exits 78 at boot. Unknown keys (plugins' own sections) only warn.
The socket group is not looked up: it is created on the target system, not in the build.

    check_config.py CONFIG.yaml [OPTION]

OPTION names the option the settings came from in messages (default services.hermes-agent.settings;
the Home-Manager module passes programs.hermes-agent.settings).
"""

from __future__ import annotations

import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    """Entry point: ``check_config.py CONFIG.yaml [OPTION]``."""
    if len(argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    from hermesd.daemon import config

    path = Path(argv[1])
    option = argv[2] if len(argv) == 3 else "services.hermes-agent.settings"
    try:
        cfg = config.parse(path.read_text(encoding="utf-8"), path)
    except config.ConfigError as exc:
        print(f"{option}: {exc}", file=sys.stderr)
        return config.EX_CONFIG
    for warning in cfg.warnings:
        print(f"{option}: warning: {warning}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
