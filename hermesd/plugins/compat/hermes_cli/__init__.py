"""hermesd's ``hermes_cli`` package: ``config`` and ``plugins`` only."""
