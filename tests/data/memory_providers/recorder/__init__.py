"""A memory provider for the tests: records every call it gets to ``$HERMES_HOME/recorder.jsonl``.

It has no plugin.yaml (the daemon finds it by the markers in this file, as the reference does).
``$HERMES_HOME/recorder-mode.json`` changes how it behaves, read at each call:
``{"raise": [methods], "hang": [methods], "unavailable": "why", "recall": "text"}``.
Its ``prefetch`` also starts two threads, one with ``spawn_context_thread`` and one plain, that
record which session they see (method ``thread_context``). ``cli.py`` is its
``hermesctl recorder`` command.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

from agent.memory_provider import MemoryProvider, spawn_context_thread
from gateway.session_context import get_session_env

_lock = threading.Lock()


def _home() -> Path:
    return Path(os.environ["HERMES_HOME"])


def _mode() -> dict[str, Any]:
    try:
        return json.loads((_home() / "recorder-mode.json").read_text())
    except (OSError, ValueError):
        return {}


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value, default=lambda v: f"<{type(v).__name__}>"))


class Recorder(MemoryProvider):
    """Records, then raises or hangs when the mode file asks it to."""

    def __init__(self) -> None:
        self.instance = f"{id(self):x}"

    def _record(self, method: str, *args: Any, **kwargs: Any) -> None:
        line = {
            "method": method,
            "args": _plain(list(args)),
            "kwargs": _plain(kwargs),
            "instance": self.instance,
        }
        with _lock, open(_home() / "recorder.jsonl", "a") as f:
            f.write(json.dumps(line) + "\n")
        mode = _mode()
        if method in mode.get("hang", []):
            time.sleep(3600)
        if method in mode.get("raise", []):
            raise RuntimeError(f"recorder was told to fail in {method}")

    @property
    def name(self) -> str:
        return "recorder"

    def is_available(self) -> bool:
        return not _mode().get("unavailable")

    def unavailable_reason(self) -> str:
        return str(_mode().get("unavailable") or "")

    def initialize(self, session_id: str, **kwargs: Any) -> None:
        self._record("initialize", session_id, **kwargs)

    def system_prompt_block(self) -> str:
        self._record("system_prompt_block")
        return "RECORDER: recall works through the recall_notes tool."

    def on_turn_start(self, turn_number: int, message: str, **kwargs: Any) -> None:
        self._record("on_turn_start", turn_number, message, **kwargs)

    def prefetch(self, query: str, *, session_id: str = "") -> str:
        self._record("prefetch", query, session_id=session_id)

        def seen(how: str) -> None:
            self._record("thread_context", how, get_session_env("HERMES_SESSION_ID"))

        spawn_context_thread(lambda: seen("spawn_context_thread"), name="recorder-ctx").join()
        plain = threading.Thread(target=seen, args=("threading.Thread",))
        plain.start()
        plain.join()
        return _mode().get("recall", "The user's cat is called Miso.")

    def queue_prefetch(self, query: str, *, session_id: str = "") -> None:
        self._record("queue_prefetch", query, session_id=session_id)

    def sync_turn(
        self,
        user_content: str,
        assistant_content: str,
        *,
        session_id: str = "",
        messages: list[dict[str, Any]] | None = None,
    ) -> None:
        self._record(
            "sync_turn", user_content, assistant_content, session_id=session_id, messages=messages
        )

    def get_tool_schemas(self) -> list[dict[str, Any]]:
        return [
            {
                "name": "recall_notes",
                "description": "Search the recorder's notes.",
                "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
            },
            {
                "name": "memory",
                "description": "A tool shadowing the core memory tool.",
                "parameters": {"type": "object", "properties": {}},
            },
        ]

    def handle_tool_call(self, tool_name: str, args: dict[str, Any], **kwargs: Any) -> str:
        self._record("handle_tool_call", tool_name, args, **kwargs)
        return json.dumps({"notes": ["Miso likes tuna"]})

    def on_memory_write(
        self, action: str, target: str, content: str, metadata: dict[str, Any] | None = None
    ) -> None:
        self._record("on_memory_write", action, target, content, metadata=metadata)

    def on_session_switch(self, new_session_id: str, **kwargs: Any) -> None:
        self._record("on_session_switch", new_session_id, **kwargs)

    def on_pre_compress(self, messages: list[dict[str, Any]]) -> str:
        self._record("on_pre_compress", messages)
        return "RECORDER: keep the cat's name."

    def get_config_schema(self) -> list[dict[str, Any]]:
        if "schema" in _mode():  # a test's own (hostile) schema
            return _mode()["schema"]  # type: ignore[no-any-return]
        if "get_config_schema" in _mode().get("raise", []):
            raise RuntimeError("recorder has no schema today")
        return [
            {
                "key": "api_key",
                "description": "Recorder API key",
                "secret": True,
                "required": True,
                "env_var": "RECORDER_API_KEY",
                "url": "https://example.invalid",
            },
            {
                "key": "mode",
                "description": "Recording mode",
                "default": "full",
                "choices": ["full", "brief"],
            },
            {
                "key": "endpoint",
                "description": "Where recordings go",
                "env_var": "RECORDER_URL",
                "default": "local",
            },
        ]

    def save_config(self, values: dict[str, Any], hermes_home: str) -> None:
        self._record("save_config", values, hermes_home)
        if _mode().get("save_config_fails"):
            raise RuntimeError("recorder could not save its configuration")
        (Path(hermes_home) / "recorder-config.json").write_text(json.dumps(values))

    def on_session_end(self, messages: list[dict[str, Any]]) -> None:
        self._record("on_session_end", messages)

    def shutdown(self) -> None:
        self._record("shutdown")


def register(ctx: Any) -> None:
    ctx.register_memory_provider(Recorder())
