"""hermesd's ``gateway`` package: ``session_context`` only (hermesd has no messaging gateway)."""
