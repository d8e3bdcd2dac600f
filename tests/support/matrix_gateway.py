"""A hermesd whose gateway talks to the test homeserver as a Matrix bot account.

``matrix_config`` is the ``gateway.platforms.matrix`` section (the bot's access token in a
file, as a person would keep it); ``start_matrix_daemon`` starts a daemon with it and waits
until the adapter has synced, so a test's first message is not lost to start-up.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from tests.support.daemon import DaemonProcess, short_tmpdir
from tests.support.modelserver import model_config
from tests.support.synapse import Homeserver, MatrixUser


def matrix_config(
    server: Homeserver,
    bot: MatrixUser,
    owners: list[str] = (),  # type: ignore[assignment]
    allow: list[str] = (),  # type: ignore[assignment]
    extra: str = "",
    password: bool = False,
    gateway: dict[str, Any] | None = None,
    **adapter: Any,
) -> str:
    """config.yaml's ``gateway`` section for ``bot`` on ``server``, logging in with its access
    token in a file (``password=True``: with its password in a file); ``adapter`` adds keys of
    ``gateway.platforms.matrix`` (e.g. ``encryption=True``), ``gateway`` keys of ``gateway``
    itself, ``extra`` top-level text."""
    secret = short_tmpdir("mxt-") / "secret"
    secret.write_text((bot.password if password else bot.token) + "\n")
    secret.chmod(0o600)
    key = "password_file" if password else "token_file"
    return (
        "gateway:\n"
        + "".join(f"  {key}: {json.dumps(value)}\n" for key, value in (gateway or {}).items())
        + "  platforms:\n"
        "    matrix:\n"
        "      enabled: true\n"
        f"      homeserver: {server.url}\n"
        f"      user_id: '{bot.user_id}'\n"
        f"      {key}: {secret}\n"
        f"      owners: {json.dumps(list(owners))}\n"
        f"      allow: {json.dumps(list(allow))}\n"
        "      reconnect_initial_seconds: 0.5\n"
        "      reconnect_max_seconds: 2\n"
        + "".join(f"      {key}: {json.dumps(value)}\n" for key, value in adapter.items())
        + extra
    )


def start_matrix_daemon(
    start: Callable[..., DaemonProcess],
    model_url: str,
    server: Homeserver,
    bot: MatrixUser,
    owners: list[str] = (),  # type: ignore[assignment]
    allow: list[str] = (),  # type: ignore[assignment]
    extra: str = "",
    adapter: dict[str, Any] | None = None,
    gateway: dict[str, Any] | None = None,
    **kwargs: Any,
) -> DaemonProcess:
    """A daemon with the scripted model and the Matrix adapter, connected."""
    section = matrix_config(server, bot, owners, allow, gateway=gateway, **(adapter or {}))
    daemon = start(config=model_config(model_url) + section + extra, **kwargs)
    wait_connected(daemon)
    return daemon


def wait_connected(daemon: DaemonProcess, timeout: float = 30.0) -> dict[str, Any]:
    """Poll ``gateway.status`` until the matrix adapter reports ``connected``."""
    deadline = time.monotonic() + timeout
    while True:
        status = daemon.call("gateway.status")
        for platform in status.get("platforms", []):
            if platform.get("name") == "matrix" and platform.get("state") == "connected":
                return dict(platform)
        if time.monotonic() > deadline:
            raise AssertionError(f"matrix not connected: {status}\n{daemon.log()[-3000:]}")
        time.sleep(0.1)
