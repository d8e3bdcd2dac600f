"""RPC declarations of the approvals.* methods (see hermesd.protocol)."""

from __future__ import annotations
