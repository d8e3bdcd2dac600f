"""Modules under the reference's import names, for plugins (`hermesd.plugins.hostapi`).

This folder itself goes on ``sys.path`` (at its end) inside the daemon only, so ``import
hermes_cli.config`` finds ``hermes_cli/config.py`` here. Nothing imports it as
``hermesd.plugins.compat`` except the type checker and the tests.
"""
