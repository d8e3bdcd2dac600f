"""hermesd: a Hermes-compatible agent daemon.

This package module stays import-free so that `hermesctl` can reuse the wire layer cheaply.
"""

__version__ = "0.1.0"
