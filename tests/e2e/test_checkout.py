"""The tests test this checkout: a daemon and a client started by a test import the code in
this repository, not a copy installed earlier into the virtualenv."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support.daemon import REPO, daemon_env, run_hermesctl
from tests.support.plugin_factory import write_plugin

WHERE = """
import json, sys

def register(ctx):
    def where(args, **kw):
        import hermesd
        return json.dumps({"hermesd": hermesd.__file__})
    ctx.register_tool("where_am_i", "probe", {"name": "where_am_i", "description": "where",
                      "parameters": {"type": "object", "properties": {}}}, where)
"""


def _inside_repo(path: str) -> bool:
    """In the checkout's own package folders (a virtualenv inside the checkout does not count)."""
    folder = Path(path).resolve().parent
    return folder in (REPO / "hermesd", REPO / "hermesctl")


def test_a_daemon_started_by_a_test_runs_this_checkout(start, home: Path) -> None:
    write_plugin(home / "plugins", "probe", WHERE)
    daemon = start(home=home)
    result = json.loads(daemon.call("tools.call", {"name": "where_am_i"})["result"])
    assert _inside_repo(result["hermesd"]), result


def test_hermesctl_started_by_a_test_runs_this_checkout() -> None:
    code = "import hermesctl, hermesd; print(hermesctl.__file__); print(hermesd.__file__)"
    env = daemon_env(REPO)  # the environment every test-started process gets
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        cwd="/",
        timeout=30,
        check=True,
    )
    files = out.stdout.split()
    assert len(files) == 2 and all(_inside_repo(f) for f in files), files
    assert run_hermesctl(["--help"]).returncode == 0
