"""Plugins schedule jobs through the reference's ``cron.jobs`` module, inside the daemon.

A folder plugin that imports ``cron.jobs`` at its top, and hermes-dreaming 0.3.2 from PyPI
(installed into a test-only directory) whose ``/dreaming install-cron`` creates its nightly job.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cron import start_cron
from tests.support.daemon import checkout_pythonpath, short_tmpdir
from tests.support.modelserver import ScriptedModelServer, reply
from tests.support.plugin_factory import write_plugin

SCHEDULER_PLUGIN = """
from cron.jobs import create_job, list_jobs


def register(ctx):
    def plan(raw_args):
        words = raw_args.split(maxsplit=1)
        if words and words[0] == "script":
            try:
                create_job("x", "1h", script="collect.py")
            except NotImplementedError as exc:
                return f"refused: {exc}"
        if words and words[0] == "bad":
            try:
                create_job("x", "someday")
            except ValueError as exc:
                return f"invalid: {exc}"
        job = create_job(prompt="PLUGIN-1 tidy up", schedule="every 6h", name="tidy")
        names = [j["name"] for j in list_jobs()]
        return f"{job['id']} {job['schedule_display']} {names}"

    ctx.register_command("plan", plan, description="schedule a tidy-up")
"""


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer(rules=lambda request: reply("done")) as server:
        yield server


def test_a_plugin_imports_cron_jobs_and_creates_a_job(start, model, home) -> None:
    write_plugin(home / "plugins", "planner", SCHEDULER_PLUGIN)
    daemon = start_cron(start, model, home=home)
    output = daemon.call("command.run", {"line": "/plan"})["output"]
    job = daemon.call("cron.list")["jobs"][0]
    assert output == f"{job['id']} every 360m ['tidy']"
    assert (job["name"], job["prompt"], job["state"]) == ("tidy", "PLUGIN-1 tidy up", "scheduled")


def test_cron_jobs_refuses_what_hermesd_does_not_do_and_bad_schedules(start, model, home) -> None:
    write_plugin(home / "plugins", "planner", SCHEDULER_PLUGIN)
    daemon = start_cron(start, model, home=home)
    refused = daemon.call("command.run", {"line": "/plan script"})["output"]
    assert refused == "refused: hermesd's cron does not support script (docs/cron.md)"
    invalid = daemon.call("command.run", {"line": "/plan bad"})["output"]
    assert invalid.startswith("invalid: invalid schedule 'someday'")


REGISTER_TIME_PLUGIN = """
from cron.jobs import create_job, list_jobs


def register(ctx):
    if not any(j["name"] == "nightly-digest" for j in list_jobs(include_disabled=True)):
        create_job("REGISTER-1 digest", "0 2 * * *", name="nightly-digest")
"""


def test_a_plugin_may_create_its_job_once_in_register(start, model, home) -> None:
    write_plugin(home / "plugins", "digest", REGISTER_TIME_PLUGIN)
    daemon = start_cron(start, model, home=home)
    daemon.call("plugins.list")  # waits for the plugins, which load after start-up
    assert [j["name"] for j in daemon.call("cron.list")["jobs"]] == ["nightly-digest"]
    daemon.stop()
    again = start_cron(start, model, home=home)
    again.call("plugins.list")  # its register() has run: a second job would show now
    assert [j["name"] for j in again.call("cron.list")["jobs"]] == ["nightly-digest"]


def test_cron_is_not_importable_outside_the_daemon() -> None:
    probe = subprocess.run(
        [sys.executable, "-c", "import cron.jobs"], capture_output=True, text=True, check=False
    )
    assert probe.returncode != 0 and "ModuleNotFoundError" in probe.stderr


@pytest.fixture(scope="module")
def dreaming_site() -> Path:
    """hermes-dreaming 0.3.2 and its dependencies, pip-installed into a scratch directory."""
    target = short_tmpdir("dream-")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--target",
            str(target),
            "hermes-dreaming==0.3.2",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"hermes-dreaming 0.3.2 could not be installed from PyPI: {done.stderr[-300:]}")
    return target


def test_dreaming_install_cron_creates_its_nightly_job(start, model, home, dreaming_site) -> None:
    user_home = short_tmpdir("user-")
    env = {"PYTHONPATH": checkout_pythonpath(str(dreaming_site)), "HOME": str(user_home)}
    daemon = start_cron(start, model, home=home, env=env)
    first = daemon.call("command.run", {"line": "/dreaming install-cron"})["output"]
    assert "Cron job registered" in first, first
    jobs = daemon.call("cron.list")["jobs"]
    assert [(j["name"], j["schedule_display"], j["prompt"]) for j in jobs] == [
        ("hermes-dreaming", "0 3 * * *", "/dreaming run")
    ]
    assert f"`{jobs[0]['id']}`" in first
    second = daemon.call("command.run", {"line": "/dreaming install-cron"})["output"]
    assert "Already installed" in second
    assert len(daemon.call("cron.list")["jobs"]) == 1
