"""`EventMetrics`: Prometheus counters fed by the daemon's own events while the HTTP door is on.

The session registry hands every turn event to `EventMetrics.event` and the cron service each
finished run's status to `EventMetrics.cron_run`; each is a dict lookup and a counter increment,
so the turn's hot path pays next to nothing. ``/metrics`` (`hermesd.http.app`) adds this
registry's text to the snapshot of ``status``. Counters count from the door's start.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram

# seconds: a model request is a stream, from a fraction of a second to minutes
LATENCY_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
OTHER_TOOL = "other"  # the tool label of calls to names no registered tool has


class EventMetrics:
    """The counters and the model latency histogram, in a registry of their own."""

    def __init__(self, tool_known: Callable[[str], bool]) -> None:
        self._tool_known = tool_known
        self.registry = CollectorRegistry()
        r = self.registry
        self.turns_started = Counter("hermesd_turns_started", "turns started", registry=r)
        self.turns_finished = Counter(
            "hermesd_turns_finished", "turns finished by status", ["status"], registry=r
        )
        self.tool_calls = Counter(
            "hermesd_tool_calls", "tool calls by tool and outcome", ["tool", "outcome"], registry=r
        )
        self.model_latency = Histogram(
            "hermesd_model_request_seconds",
            "model requests that answered, from sending to the end of the stream",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.model_errors = Counter(
            "hermesd_model_errors",
            "failed model requests: retried ones, and those that ended a turn (by error type)",
            ["kind"],
            registry=r,
        )
        self.cron_runs = Counter("hermesd_cron_runs", "cron runs by result", ["result"], registry=r)
        self._by_type: dict[str, Callable[[dict[str, Any]], None]] = {
            "turn.started": self._turn_started,
            "turn.finished": self._turn_finished,
            "tool.finished": self._tool_finished,
            "usage": self._usage,
            "model.retry": self._retry,
        }

    def event(self, event: dict[str, Any]) -> None:
        """Count one session event (most types count nothing)."""
        handle = self._by_type.get(event.get("type", ""))
        if handle is not None:
            handle(event)

    def cron_run(self, status: str) -> None:
        """Count one finished cron run."""
        self.cron_runs.labels(status).inc()

    def _turn_started(self, event: dict[str, Any]) -> None:
        self.turns_started.inc()

    def _turn_finished(self, event: dict[str, Any]) -> None:
        self.turns_finished.labels(str(event.get("status"))).inc()
        error_type = str(event.get("error_type") or "")
        if error_type.startswith("Model"):  # hermesd.model.errors: ModelRequestFailed, ...
            self.model_errors.labels(error_type).inc()

    def _tool_finished(self, event: dict[str, Any]) -> None:
        # the tool's name comes from the model: a label per name it makes up would grow the
        # series without bound, so only registered tools have their own
        name = str(event.get("name"))
        tool = name if self._tool_known(name) else OTHER_TOOL
        self.tool_calls.labels(tool, str(event.get("status"))[:32]).inc()

    def _usage(self, event: dict[str, Any]) -> None:
        took = event.get("duration_ms")
        if isinstance(took, (int, float)):
            self.model_latency.observe(took / 1000)

    def _retry(self, event: dict[str, Any]) -> None:
        self.model_errors.labels("retried").inc()
