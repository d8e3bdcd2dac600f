"""hermesd: a Hermes-compatible agent daemon.

This package module stays import-free so that `hermesctl` can reuse the wire layer cheaply.
"""

__version__ = "0.1.0"
#: the Hermes plugin API hermesd implements (docs/hermes-compat.md): ``ctx``, hooks, manifests
HERMES_PLUGIN_API_VERSION = "0.19.0"
PLUGIN_API = f"hermes-agent {HERMES_PLUGIN_API_VERSION}"
