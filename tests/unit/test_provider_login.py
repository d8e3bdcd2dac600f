"""The pure pieces of the web page's provider sign-in: which providers the page offers, the
reference's compliance check, who a Session is, and the refresh rules of a page session."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from hermesd.http.auth_provider import ProviderAuth
from hermesd.http.login_routes import _segments
from hermesd.http.provider_api import (
    DashboardAuthProvider,
    LoginStart,
    ProviderError,
    RefreshExpiredError,
    Session,
    TokenPrincipal,
    assert_protocol_compliance,
    offers_login,
)
from hermesd.http.provider_login import LoginFailed, ProviderLogins


class TokensOnly(DashboardAuthProvider):
    name = "tokens"
    supports_token = True

    def verify_token(self, *, token: str) -> TokenPrincipal | None:
        return None


class Oauth(DashboardAuthProvider):
    name = "oauth"
    display_name = "OAuth"

    def __init__(self, lasts: int = 3600, refreshes: int = 1) -> None:
        self.lasts, self.refreshes = lasts, refreshes
        self.calls: list[str] = []
        self.down = False

    def session(self) -> Session:
        return Session(
            "alice", "a@x", "Alice", "", self.name, int(time.time()) + self.lasts, "at", "rt"
        )

    def start_login(self, *, redirect_uri: str) -> LoginStart:
        return LoginStart("https://idp/", {})

    def complete_login(
        self, *, code: str, state: str, code_verifier: str, redirect_uri: str
    ) -> Session:
        return self.session()

    def verify_session(self, *, access_token: str) -> Session | None:
        self.calls.append("verify")
        if self.down:
            raise ProviderError("idp down")
        return self.session()

    def refresh_session(self, *, refresh_token: str) -> Session:
        self.calls.append("refresh")
        if self.refreshes <= 0:
            raise RefreshExpiredError("dead")
        self.refreshes -= 1
        return self.session()

    def revoke_session(self, *, refresh_token: str) -> None:
        self.calls.append("revoke")


class Passwords(TokensOnly):
    supports_password = True

    def complete_password_login(self, *, username: str, password: str) -> Session:
        raise NotImplementedError


def _logins(provider: Any, users: dict[str, str] | None = None) -> ProviderLogins:
    settings = {
        "http.auth_provider": provider.name,
        "http.auth_timeout": 5,
        "http.auth_users": {"alice": "owner"} if users is None else users,
    }
    auth = ProviderAuth(settings.get, lambda: {provider.name: provider})
    return ProviderLogins(lambda: auth)


def test_a_tokens_only_provider_is_not_offered_on_the_login_page() -> None:
    assert not offers_login(TokensOnly())


def test_an_oauth_or_password_provider_is_offered() -> None:
    assert offers_login(Oauth()) and offers_login(Passwords())


def test_a_provider_without_sessions_is_not_offered() -> None:
    class NoSessions(Oauth):
        supports_session = False

    assert not offers_login(NoSessions())


def test_compliance_needs_the_session_methods_and_names() -> None:
    assert_protocol_compliance(Oauth)
    with pytest.raises(TypeError, match="display_name"):
        assert_protocol_compliance(TokensOnly)


def test_the_pkce_cookie_is_read_as_its_segments() -> None:
    assert _segments("state=a=b;verifier=v;junk") == {"state": "a=b", "verifier": "v"}


def test_a_session_is_who_auth_users_says_by_user_id_then_email() -> None:
    provider = Oauth()
    assert _logins(provider).identity(provider.session()).trust == "owner"  # type: ignore[union-attr]
    assert _logins(provider, {"a@x": "owner"}).identity(provider.session()) is not None
    assert _logins(provider, {}).identity(provider.session()) is None


def test_an_unlisted_person_is_refused_and_revoked() -> None:
    provider = Oauth()
    logins = _logins(provider, {})
    with pytest.raises(LoginFailed) as refused:
        asyncio.run(logins.admit(provider, provider.session()))
    assert refused.value.status == 403 and provider.calls == ["revoke"]


def test_a_fresh_login_is_not_verified_again_at_once() -> None:
    provider = Oauth()
    logins = _logins(provider)

    async def run() -> None:
        login = await logins.admit(provider, provider.session())
        assert await logins.identify(login) is not None

    asyncio.run(run())
    assert provider.calls == []


def test_a_session_near_expiry_is_refreshed_then_dropped_when_the_refresh_dies() -> None:
    provider = Oauth(lasts=0, refreshes=1)
    logins = _logins(provider)

    async def run() -> None:
        login = await logins.admit(provider, provider.session())
        assert await logins.identify(login) is not None
        assert await logins.identify(login) is None
        assert await logins.identify(login) is None  # forgotten: not asked again

    asyncio.run(run())
    assert provider.calls == ["refresh", "refresh"]


def test_a_provider_outage_while_verifying_is_a_503() -> None:
    provider = Oauth()
    logins = _logins(provider)

    async def run() -> None:
        login = await logins.admit(provider, provider.session())
        logins._logins[login].checked -= 3600  # due a verify
        provider.down = True
        with pytest.raises(LoginFailed) as failed:
            await logins.identify(login)
        assert failed.value.status == 503 and "idp down" in failed.value.message

    asyncio.run(run())
