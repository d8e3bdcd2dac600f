"""The two calls compression makes into the memory provider manager (`MemoryProviders`):
``on_pre_compress(session_id, messages) -> str`` (isolated: a provider that raises or hangs
gives "" and a log line) and ``on_session_switch(old, new, reason="compression")``. Nothing in
the daemon compresses yet (issue 22), so they are driven here on the recorder provider
(tests/data/memory_providers/recorder) loaded the daemon's way, on a real worker pool.
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hermesd.memory import providers as providers_module
from hermesd.memory.providers import MemoryProviders
from hermesd.plugins.memory_providers import ProviderRegistrations
from hermesd.runtime.workers import WorkerPool

RECORDER = Path(__file__).parents[1] / "data" / "memory_providers" / "recorder"


class _Config(dict[str, Any]):
    pass


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    shutil.copytree(RECORDER, tmp_path / "plugins" / "recorder")
    monkeypatch.setenv("HERMES_HOME", str(tmp_path))
    saved_path, saved_modules = list(sys.path), set(sys.modules)
    yield tmp_path
    sys.path[:] = saved_path  # the reference modules the provider imported go again
    for name in set(sys.modules) - saved_modules:
        del sys.modules[name]


def _calls(home: Path, method: str) -> list[dict[str, Any]]:
    path = home / "recorder.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [c for c in map(json.loads, lines) if c["method"] == method]


def _run(home: Path, scenario: Any) -> Any:
    async def main() -> Any:
        pool = WorkerPool(4)
        config = _Config({"memory.provider": "recorder"})
        providers = MemoryProviders(home, config, pool, {}, ProviderRegistrations())
        try:
            return await scenario(providers)
        finally:
            await providers.close()
            pool.shutdown()

    return asyncio.run(main())


MESSAGES = [{"role": "user", "content": "my cat is Miso"}, {"role": "assistant", "content": "ok"}]


def test_pre_compress_returns_the_providers_text(home: Path) -> None:
    async def scenario(p: MemoryProviders) -> str:
        await p.start("s1")
        return await p.on_pre_compress("s1", MESSAGES)

    assert _run(home, scenario) == "RECORDER: keep the cat's name."
    assert _calls(home, "on_pre_compress")[0]["args"] == [MESSAGES]


def test_pre_compress_of_a_session_without_a_provider_is_empty(home: Path) -> None:
    async def scenario(p: MemoryProviders) -> str:
        return await p.on_pre_compress("nobody", MESSAGES)

    assert _run(home, scenario) == ""
    assert _calls(home, "on_pre_compress") == []


def test_a_raising_pre_compress_gives_empty_text_and_a_log_line(
    home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (home / "recorder-mode.json").write_text(json.dumps({"raise": ["on_pre_compress"]}))

    async def scenario(p: MemoryProviders) -> str:
        await p.start("s1")
        return await p.on_pre_compress("s1", MESSAGES)

    with caplog.at_level(logging.WARNING):
        assert _run(home, scenario) == ""
    assert "Memory provider 'recorder' on_pre_compress() failed: RuntimeError" in caplog.text


def test_a_hanging_pre_compress_is_abandoned(
    home: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(providers_module, "PRE_COMPRESS_TIMEOUT", 0.3)
    (home / "recorder-mode.json").write_text(json.dumps({"hang": ["on_pre_compress"]}))

    async def scenario(p: MemoryProviders) -> str:
        await p.start("s1")
        return await p.on_pre_compress("s1", MESSAGES)

    with caplog.at_level(logging.WARNING):
        assert _run(home, scenario) == ""
    assert "'recorder' on_pre_compress() did not return within 0.3s; abandoned" in caplog.text


def test_a_compression_switch_tells_the_provider_with_the_reference_arguments(
    home: Path,
) -> None:
    async def scenario(p: MemoryProviders) -> None:
        await p.start("s1")
        p.on_session_switch("s1", "s1", reason="compression")  # in place: the same id
        p.on_session_switch("s1", "s2", reason="compression")  # rotated to a child
        active = await p.start("s2")  # the next turn waits for the switch to be told
        assert active is not None and active.session_id == "s2"

    _run(home, scenario)
    switches = _calls(home, "on_session_switch")
    assert [(c["args"], c["kwargs"]) for c in switches] == [
        (["s1"], {"parent_session_id": "s1", "reset": False, "reason": "compression"}),
        (["s2"], {"parent_session_id": "s1", "reset": False, "reason": "compression"}),
    ]
    assert len(_calls(home, "initialize")) == 1  # one instance, moved along
