"""hermesd's ``agent.secret_sources``: what a secret-manager plugin subclasses (see `base`)."""

from hermesd.plugins.compat.agent.secret_sources.base import (
    SECRET_SOURCE_API_VERSION,
    ErrorKind,
    FetchResult,
    SecretSource,
)

__all__ = ["SECRET_SOURCE_API_VERSION", "ErrorKind", "FetchResult", "SecretSource"]
