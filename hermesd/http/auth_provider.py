"""`ProviderAuth`: a plugin's ``register_dashboard_auth_provider`` as a token source of the door.

A bearer token the token file does not hold is offered to the provider ``http.auth_provider``
names (docs/clients.md, "Tokens from a plugin"). Its ``verify_token(token=...)`` is a plain
call that may do I/O, so it runs on a thread of its own with ``http.auth_timeout`` (at most
`MAX_ASKING` at once). It answers a
principal (an object with ``principal``, or a string): ``owner`` is the daemon's owner, another
name a login user as a member, exactly as a ``NAME:`` in the token file; None, an error, a
timeout or a name that is no user refuses the request. A provider without ``supports_token`` is
never asked. Answers are not cached: the provider decides each request (revocation is instant).
`ProviderAuth.ask` is the same thread-and-timeout for the page's sign-in (provider_login.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Any

from hermesd.http.provider_api import ProviderError, offers_login
from hermesd.http.tokens import Identity, identity_of

log = logging.getLogger(__name__)

MAX_ASKING = 16  # provider calls at once; more requests wait (within their timeout)


class ProviderAuth:
    """Looks up the selected provider each request (plugins load, unload and reload)."""

    def __init__(
        self, settings: Callable[[str], Any], providers: Callable[[], dict[str, Any]]
    ) -> None:
        self.settings = settings
        self._providers = providers
        self._slots = asyncio.Semaphore(MAX_ASKING)

    def provider(self) -> Any | None:
        """The provider ``http.auth_provider`` names, when it is registered and takes tokens."""
        name = self.settings("http.auth_provider")
        if not name:
            return None
        found = self._providers().get(str(name))
        if found is None or not getattr(found, "supports_token", False):
            return None
        return found

    def session_provider(self) -> Any | None:
        """The provider ``http.auth_provider`` names, when the login page offers it."""
        name = self.settings("http.auth_provider")
        found = self._providers().get(str(name)) if name else None
        return found if found is not None and offers_login(found) else None

    def timeout(self) -> float:
        """Seconds a provider call may take (``http.auth_timeout``)."""
        return float(self.settings("http.auth_timeout"))

    async def ask(self, call: Callable[[], Any]) -> Any:
        """``call()`` (plugin code) on a thread, within the timeout; raises what it raised."""
        async with asyncio.timeout(self.timeout()):
            async with self._slots:
                return await in_thread(call)

    async def identify(self, token: str) -> Identity | None:
        """The identity the provider maps ``token`` to, or None (refused)."""
        provider = self.provider()
        if provider is None or not token:
            return None
        try:
            answer = await self.ask(lambda: provider.verify_token(token=token))
        except TimeoutError:
            log.warning(
                "HTTP auth provider %s did not answer in %ss", _name(provider), self.timeout()
            )
            return None
        except Exception as exc:
            if isinstance(exc, ProviderError):  # its store is down: no traceback
                log.warning("HTTP auth provider %s: %s; refused", _name(provider), exc)
                return None
            log.exception("HTTP auth provider %s failed; the request is refused", _name(provider))
            return None
        if answer is None:
            return None
        who = answer if isinstance(answer, str) else getattr(answer, "principal", None)
        if not isinstance(who, str) or not who:
            log.warning("HTTP auth provider %s answered no principal name", _name(provider))
            return None
        identity = identity_of("" if who == "owner" else who)
        if identity is None:
            log.warning("HTTP auth provider %s named %r, no user; refused", _name(provider), who)
        return identity


def _name(provider: Any) -> str:
    return str(getattr(provider, "name", type(provider).__name__))


async def in_thread(call: Callable[[], Any]) -> Any:
    """``call()`` on a daemon thread of its own: one that hangs holds up no stop."""
    loop = asyncio.get_running_loop()
    answer: asyncio.Future[Any] = loop.create_future()

    def settle(value: Any, error: BaseException | None) -> None:
        if answer.done():
            return
        if error is not None:
            answer.set_exception(error)
        else:
            answer.set_result(value)

    def run() -> None:
        error: BaseException | None = None
        try:
            value = call()
        except BaseException as exc:  # handed to the waiting request, which logs it
            value, error = None, exc
        with contextlib.suppress(RuntimeError):  # the daemon stopped meanwhile: nobody waits
            loop.call_soon_threadsafe(settle, value, error)

    threading.Thread(target=run, name="http-auth-provider", daemon=True).start()
    return await answer
