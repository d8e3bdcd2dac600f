"""RPC declarations of the command.* and cli.* methods (see hermesd.protocol)."""

from __future__ import annotations
