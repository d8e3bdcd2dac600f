"""The throw-away process `hermesd.plugins.lint` loads a plugin in: ``python -m
hermesd.daemon.lint_child FOLDER`` builds the daemon's registries in a temporary HERMES_HOME
(from the environment the linter gives it), loads the plugin and prints what went wrong as one
JSON line of findings. It lives here because loading needs the whole plugin host.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path

from hermesd.daemon.services import build_plugin_host
from hermesd.tools.schema import Finding, lint_tools


def findings_for_loaded_plugins(home: Path) -> list[Finding]:
    """Load every plugin the environment points at; what went wrong, as findings."""
    host = build_plugin_host(home, {}, os.environ)
    records = host.plugins.load_all()
    findings: list[Finding] = []
    for record in records:
        if record.state != "loaded":
            findings.append(Finding("error", "", "", f"the plugin did not load: {record.reason}"))
        for rejected in record.rejected_tools:
            findings.append(
                Finding("error", rejected.name, "", f"tool rejected: {rejected.reason}")
            )
        entries = [e for e in host.tools.entries() if e.owner == record.key]
        findings.extend(
            record.warnings or lint_tools((e.name, e.toolset, e.schema) for e in entries)
        )
    return findings


def main(argv: list[str]) -> int:
    """Print the findings as JSON; the folder itself arrives in HERMES_PLUGIN_PATH."""
    if len(argv) != 1:
        print(
            "usage: python -m hermesd.daemon.lint_child FOLDER (run by plugins lint)",
            file=sys.stderr,
        )
        return 2
    logging.disable(logging.CRITICAL)
    home = Path(os.environ["HERMES_HOME"])
    print(json.dumps([f.as_dict() for f in findings_for_loaded_plugins(home)]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
