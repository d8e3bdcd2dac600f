"""hermesd's ``agent.redact``: secret redaction (hermesd's own, `hermesd.redact`)."""

from __future__ import annotations

from typing import Any

from hermesd import redact


def redact_sensitive_text(
    text: Any, force: bool = False, redact_url_credentials: bool = True, **_: Any
) -> Any:
    """``text`` with known secrets and credential-looking values masked; non-text unchanged."""
    if not isinstance(text, str) or not text:
        return text
    return redact.redact(text)
