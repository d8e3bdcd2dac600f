"""`ProviderLogins`: web page sessions signed in through a plugin's dashboard auth provider.

A successful ``complete_login`` or ``complete_password_login`` gives a `Session`; the person
it names becomes an identity through ``http.auth_users`` (the Session's ``user_id`` or
``email`` → ``owner`` or a login user, a member): nobody unlisted gets in, and nobody gets
more than that line gives. The provider's tokens stay in the daemon: the browser holds only
an opaque login id (page.py's ``hermesd_login`` cookie). Each request re-checks the session
with ``verify_session`` at most every `RECHECK` seconds, refreshes it `REFRESH_BEFORE`
seconds before it expires (one refresh at a time per login: providers rotate refresh
tokens), and forgets it when the refresh token is dead. Logins live in memory, so a daemon
restart signs everyone out. Every provider call is plugin code: `ProviderAuth.ask` runs it
on a thread within ``http.auth_timeout``, and its failures become a `LoginFailed` with the
HTTP status the reference gives them (docs/web.md, "Logging in with a provider").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from hermesd.http.auth_provider import ProviderAuth
from hermesd.http.provider_api import (
    InvalidCodeError,
    InvalidCredentialsError,
    ProviderError,
    RefreshExpiredError,
    Session,
)
from hermesd.http.tokens import Identity, identity_of

log = logging.getLogger(__name__)

RECHECK = 15.0  # seconds a verified session is trusted before verify_session is asked again
REFRESH_BEFORE = 60  # seconds before expires_at when the session is refreshed
MAX_LOGINS = 1000  # page sessions held; the oldest goes first
BAD_CREDENTIALS = "That username and password are not valid here."
PROVIDER_FAILED = "The sign-in provider failed; see the daemon log."


class LoginFailed(Exception):
    """A sign-in step failed: the HTTP status and a sentence for the person."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


@dataclass
class _Login:
    provider: str
    session: Session
    checked: float  # time.monotonic() of the last verify, refresh or sign-in
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class ProviderLogins:
    """The page sessions of the moment, by login id."""

    def __init__(self, auth: Callable[[], ProviderAuth | None]) -> None:
        self._auth = auth  # the door's of the moment (None until the door starts)
        self._logins: dict[str, _Login] = {}

    def provider(self) -> Any | None:
        """The provider the login page offers, or None."""
        auth = self._auth()
        return auth.session_provider() if auth is not None else None

    async def call(self, what: str, run: Callable[[], Any]) -> Any:
        """A provider call, its failures turned into `LoginFailed` (RefreshExpiredError passes)."""
        auth = self._auth()
        if auth is None:
            raise LoginFailed(503, "The sign-in service is not available.")
        try:
            return await auth.ask(run)
        except RefreshExpiredError:
            raise
        except TimeoutError:
            log.warning("HTTP auth provider: %s did not answer in %ss", what, auth.timeout())
            raise LoginFailed(503, "The sign-in service did not answer in time.") from None
        except ProviderError as exc:
            log.warning("HTTP auth provider: %s: unavailable: %s", what, exc)
            raise LoginFailed(503, f"The sign-in service is unavailable: {exc}") from None
        except InvalidCodeError as exc:
            log.warning("HTTP auth provider: %s: invalid code: %s", what, exc)
            raise LoginFailed(400, f"The sign-in could not be completed: {exc}") from None
        except InvalidCredentialsError:
            log.info("HTTP auth provider: %s: credentials refused", what)
            raise LoginFailed(401, BAD_CREDENTIALS) from None
        except Exception:
            log.exception("HTTP auth provider: %s failed", what)
            raise LoginFailed(500, PROVIDER_FAILED) from None

    def identity(self, session: Session) -> Identity | None:
        """Who ``session``'s person is here, by ``http.auth_users`` (None: not admitted)."""
        auth = self._auth()
        users = (auth.settings("http.auth_users") if auth is not None else None) or {}
        name = users.get(session.user_id) or (users.get(session.email) if session.email else None)
        if not isinstance(name, str) or not name:
            return None
        who = identity_of("" if name == "owner" else name)
        if who is None:
            log.warning("http.auth_users maps %r to %r, no user; refused", session.user_id, name)
        return who

    async def admit(self, provider: Any, session: Any) -> str:
        """A new login id for a freshly signed-in ``session`` (LoginFailed 403: not listed)."""
        if not isinstance(session, Session):
            log.error("HTTP auth provider answered %r, not a Session", type(session).__name__)
            raise LoginFailed(500, PROVIDER_FAILED)
        who = self.identity(session)
        if who is None:
            log.warning(
                "HTTP auth provider: %r (%s) signed in but is not in http.auth_users; refused",
                session.user_id,
                session.email,
            )
            await self._revoke(provider, session.refresh_token)
            raise LoginFailed(403, "This account may not use this daemon.")
        login = secrets.token_urlsafe(32)
        while len(self._logins) >= MAX_LOGINS:
            self._logins.pop(next(iter(self._logins)))
        self._logins[login] = _Login(str(provider.name), session, time.monotonic())
        log.info("web page: %s signed in (%s) as %s", session.user_id, provider.name, who.name)
        return login

    async def identify(self, login: str) -> Identity | None:
        """Who the login id ``login`` is now (None: signed out); LoginFailed when unsure."""
        held = self._logins.get(login)
        if held is None:
            return None
        provider = self.provider()
        if provider is None or str(provider.name) != held.provider:
            self._logins.pop(login, None)  # the provider went away or was changed
            return None
        async with held.lock:
            session = await self._current(provider, held)
        if session is None:
            self._logins.pop(login, None)
            return None
        return self.identity(session)

    async def _current(self, provider: Any, held: _Login) -> Session | None:
        """``held``'s session, verified recently and refreshed before it expires."""
        if held.session.expires_at - time.time() < REFRESH_BEFORE:
            return await self._refresh(provider, held)
        if time.monotonic() - held.checked < RECHECK:
            return held.session
        token = held.session.access_token
        seen: Any = await self.call(
            "verify_session", lambda: provider.verify_session(access_token=token)
        )
        if seen is None:
            return await self._refresh(provider, held)
        if not isinstance(seen, Session):
            log.error("HTTP auth provider: verify_session answered %r", type(seen).__name__)
            raise LoginFailed(500, PROVIDER_FAILED)
        current: Session = seen
        if not current.refresh_token:  # a verify may not repeat the refresh token: keep ours
            current = replace(current, refresh_token=held.session.refresh_token)
        held.session, held.checked = current, time.monotonic()
        return current

    async def _refresh(self, provider: Any, held: _Login) -> Session | None:
        token = held.session.refresh_token
        if not token:
            return None
        try:
            fresh = await self.call(
                "refresh_session", lambda: provider.refresh_session(refresh_token=token)
            )
        except RefreshExpiredError as exc:
            log.info("web page: %s's session ended (%s)", held.session.user_id, exc)
            return None
        if not isinstance(fresh, Session):
            log.error("HTTP auth provider: refresh_session answered %r", type(fresh).__name__)
            return None
        held.session, held.checked = fresh, time.monotonic()
        return fresh

    async def logout(self, login: str) -> None:
        """Forget ``login`` and revoke its session at the provider (best effort)."""
        held = self._logins.pop(login, None)
        provider = self.provider()
        if held is not None and provider is not None and str(provider.name) == held.provider:
            await self._revoke(provider, held.session.refresh_token)

    async def _revoke(self, provider: Any, token: str) -> None:
        with contextlib.suppress(LoginFailed, RefreshExpiredError):  # logged by call()
            await self.call("revoke_session", lambda: provider.revoke_session(refresh_token=token))
