"""Compatibility name: the protocol now lives in `hermesd.rpc.protocol`."""

from hermesd.rpc.protocol import *  # noqa: F403
