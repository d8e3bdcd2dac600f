"""Mixed load: clients each sending ping, status, tools.call, session.list and chat turns.

The everyday suite runs 10 clients x 100 requests and wants 0 errors; ``bench/load.py`` runs
the full 50 x 1,000 and writes the per-method p50/p99 into docs/reliability.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.support.daemon import DaemonProcess
from tests.support.modelserver import ScriptedModelServer
from tests.support.reliability import load_table, model_config, run_load, turn_rules


@pytest.fixture
def model() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer(rules=turn_rules()) as server:
        yield server


def test_10_clients_x_100_mixed_requests_get_no_errors(
    start: Callable[..., DaemonProcess], model: ScriptedModelServer
) -> None:
    daemon = start(config=model_config(model.url))
    result = run_load(daemon.socket, clients=10, requests=100)
    assert result["errors"] == []
    assert result["requests"] == 1000
    assert len(result["latencies"]["chat"]) == 100
    assert all(len(v) >= 100 for v in result["latencies"].values())
    assert daemon.alive() and daemon.call("status")["turns_running"] == 0
    print(f"\nload 10x100 in {result['wall_s']:.1f} s\n{load_table(result)}")
