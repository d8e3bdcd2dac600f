"""The active memory provider's ``cli.py`` as ``hermesctl <provider> …``.

As in the reference, only the provider ``memory.provider`` selects offers commands, and only
from a folder provider's ``cli.py`` with a ``register_cli(subparser)`` function (its handler:
``<name>_command(args)`` if the module has one, else the ``func`` its parser sets). The module is
imported as a submodule of the provider's package (relative imports work), on a worker thread;
what it offers is handed to the daemon's command registry through `sink` as a plugin CLI
command owned by ``memory-provider:<name>``, so ``hermesctl <name> …`` runs it inside the daemon
like any plugin's (`hermesd.commands.cli_runner`). A cli.py that fails to import is a warning in
the log; the provider itself still works.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from typing import Any

from hermesd.plugins.memory_providers import ProviderFactory, description_of
from hermesd.runtime.workers import WorkerPool

log = logging.getLogger(__name__)

#: (owner, name, help, setup_fn, handler_fn, description) -> None
CliSink = Callable[[str, str, str, Callable[[Any], Any], Callable[[Any], Any] | None, str], None]


class ProviderCli:
    """What the active provider offers as a CLI command, kept in the daemon's registry."""

    def __init__(self, pool: WorkerPool) -> None:
        self.pool = pool
        self.sink: CliSink | None = None
        self.drop: Callable[[str], Any] | None = None  # owner -> its commands removed
        self.owner = ""

    def forget(self) -> None:
        """The selection changed: the previous provider's command goes."""
        if self.owner and self.drop is not None:
            self.drop(self.owner)
        self.owner = ""

    async def offer(self, name: str, factory: ProviderFactory) -> None:
        """Register ``hermesctl <name>`` when the provider's folder has a cli.py with
        ``register_cli``."""
        folder = factory.candidate.folder
        if self.sink is None or folder is None or not (folder / "cli.py").is_file():
            return
        try:
            module = await self.pool.run(
                lambda: _cli_module(factory), 30.0, key=f"memory-provider:{name}"
            )
        except Exception as exc:
            log.warning(
                "Memory provider '%s': %s/cli.py could not be imported: %s: %s; no hermesctl %s",
                name,
                folder,
                type(exc).__name__,
                exc,
                name,
                exc_info=True,
            )
            return
        setup = getattr(module, "register_cli", None)
        if not callable(setup):
            return
        handler = getattr(module, f"{name}_command", None)
        description = description_of(folder)
        self.forget()
        self.owner = f"memory-provider:{name}"
        self.sink(
            self.owner,
            name,
            description or f"Manage {name} memory plugin",
            setup,
            handler if callable(handler) else None,
            description,
        )


def _cli_module(factory: ProviderFactory) -> Any:
    package = factory.module()
    return importlib.import_module(f"{package.__name__}.cli")
