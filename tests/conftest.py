"""Shared fixtures: every test that needs a daemon gets a real hermesd process of its own."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.support.daemon import (
    DaemonProcess,
    checkout_pythonpath,
    remove_scratch_dirs,
    short_tmpdir,
    start_daemon,
)
from tests.support.modelserver import ScriptedModelServer

# Every process a test starts (a daemon, hermesctl, a helper script) imports this checkout.
os.environ["PYTHONPATH"] = checkout_pythonpath(os.environ.get("PYTHONPATH"))


@pytest.fixture
def start() -> Iterator[Callable[..., DaemonProcess]]:
    """Factory: ``start(config=..., env=...)`` runs a hermesd that is stopped after the test."""
    started: list[DaemonProcess] = []

    def _start(*args: Any, **kwargs: Any) -> DaemonProcess:
        daemon = start_daemon(*args, **kwargs)
        started.append(daemon)
        return daemon

    yield _start
    for daemon in started:
        if daemon.alive():
            daemon.stop()


@pytest.fixture
def daemon(start: Callable[..., DaemonProcess]) -> DaemonProcess:
    """A hermesd with an empty HERMES_HOME and default configuration."""
    return start()


@pytest.fixture(autouse=True)
def _clean_model_script(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test that fails midway must not leave scripted model steps for the next one."""
    # Taken before the test runs, so the model server is torn down after this fixture.
    model = request.getfixturevalue("model") if "model" in request.fixturenames else None
    yield
    clear = getattr(model, "clear_script", None)
    if clear is not None:
        clear()


@pytest.fixture(autouse=True)
def _close_raw_peers() -> Iterator[None]:
    """Raw test connections are closed when their test ends, not when collected."""
    yield
    from tests.support.raw import close_all

    close_all()


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedModelServer]:
    """The scripted model, one per test module (a module needing a fresh one per test, or
    rules, defines its own ``model``)."""
    with ScriptedModelServer() as server:
        yield server


@pytest.fixture(scope="module")
def shared_daemon() -> Iterator[DaemonProcess]:
    """One hermesd for every test of a module (for property tests with many examples)."""
    daemon = start_daemon()
    yield daemon
    if daemon.alive():
        daemon.stop()


@pytest.fixture
def home():
    """A short, empty HERMES_HOME."""
    return short_tmpdir()


_MARKERS = ("unit", "e2e", "reliability", "nix")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test with its directory's name (``tests/unit`` → ``unit``), so ``-m`` selects."""
    for item in items:
        parts = item.path.parts
        for marker in _MARKERS:
            if marker in parts:
                item.add_marker(marker)
                break


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Scratch directories (homes, sockets, repos) go with the session (HERMES_KEEP_TMP=1 keeps
    them)."""
    remove_scratch_dirs()


@pytest.fixture(scope="session")
def homeserver() -> Iterator[Any]:
    """A real Matrix homeserver (synapse, SQLite) on 127.0.0.1, one per test process; tests
    register their own users (tests/support/synapse.py)."""
    from tests.support.synapse import Homeserver, synapse_python

    python = synapse_python()
    if python is None:
        reason = "matrix-synapse is not installed in .venv/synapse (scripts/bootstrap does it)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    server = Homeserver(python)
    server.start()
    yield server
    server.stop()
