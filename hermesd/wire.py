"""Compatibility name: the framing layer now lives in `hermesd.rpc.wire`."""

from hermesd.rpc.wire import *  # noqa: F403
from hermesd.rpc.wire import (  # noqa: F401  (names a star import leaves out)
    _default,
    _packer_opts,
)
