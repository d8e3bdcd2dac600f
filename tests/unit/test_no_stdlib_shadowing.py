"""No script folder holds a module named like a standard-library one.

A program run by path gets its own folder first on ``sys.path``: ``tests/support/http.py``
once made every MCP server started from ``tests/support/`` fail at ``import http.client``.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FOLDERS = ["tests/support", "bench", "scripts", "plugins", "hermesd/mcp", "hermesd/tools"]


def test_no_module_beside_a_script_shadows_the_standard_library() -> None:
    shadowing = [
        str(path.relative_to(REPO))
        for folder in FOLDERS
        for path in sorted((REPO / folder).glob("*"))
        if (path.suffix == ".py" and path.stem in sys.stdlib_module_names)
        or (path.is_dir() and path.name in sys.stdlib_module_names)
    ]
    assert not shadowing, f"named like a standard-library module: {shadowing}"
