"""hermesd's ``gateway`` package: ``session_context``, ``platforms.base``, ``config`` and
``session``."""
