"""hermesd's ``hermes_cli``: ``config``, ``plugins``, ``model_switch``, ``dashboard_auth``."""
