"""hermesd's ``agent.context_compressor``: the summary prefixes plugins and front ends look for.

The prefixes are the reference's exact strings (a compaction summary starts with one of them);
hermesd's built-in compressor (``hermesd.context.compressor``) writes `SUMMARY_PREFIX`. The
reference's ``ContextCompressor`` class is the host's own engine, configured by the host: a
plugin selects it with ``context.engine: compressor``, it does not build one.
"""

from __future__ import annotations

from typing import Any

from hermesd.context.summary import LEGACY_SUMMARY_PREFIX, SUMMARY_PREFIX, is_summary_message
from hermesd.plugins import hostapi

__all__ = ["LEGACY_SUMMARY_PREFIX", "SUMMARY_PREFIX", "ContextCompressor", "is_summary_message"]


class ContextCompressor:
    """Not constructible by plugins in hermesd (the built-in is the host's, per session)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise hostapi.not_in_hermesd(
            "agent.context_compressor.ContextCompressor",
            "the built-in compressor is configured by compression.* and context.engine",
        )
