"""hermesctl's commands, one module per area; ``AREAS`` is the order they appear in --help."""

from __future__ import annotations

from . import core

AREAS = [core]
