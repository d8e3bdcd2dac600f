"""What a dashboard auth provider is: the interface plugins implement, its values and errors.

Declared here, in the HTTP layer that calls providers, so the door can tell the errors apart
by class; plugins import the same objects as ``hermes_cli.dashboard_auth`` (the compat module
re-exports them). The names, fields and keyword-only signatures follow the reference (Hermes
Agent 0.19, docs/hermes-compat.md row ``dashboard_auth``). One difference: the base class has
no abstract methods. A provider written only for tokens (``supports_token`` and
``verify_token``) instantiates without stubs, and `offers_login` says whether a provider has
an interactive side worth a button (it overrides ``start_login`` or takes passwords).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Session:
    """A signed-in person as the provider sees them, with its opaque tokens."""

    user_id: str
    email: str
    display_name: str
    org_id: str
    provider: str
    expires_at: int  # unix seconds when access_token stops being good
    access_token: str
    refresh_token: str


@dataclass(frozen=True)
class TokenPrincipal:
    """Who a bearer token stands for: ``owner`` or a login user (a member)."""

    principal: str
    provider: str = ""
    scopes: tuple[str, ...] = ()


@dataclass(frozen=True)
class LoginStart:
    """Where to send the browser to sign in, and the cookies to hold meanwhile.

    ``cookie_payload`` maps a cookie name to its value; the door sets each one short-lived,
    HttpOnly and SameSite=Lax. ``hermes_session_pkce`` holds ``state=…;verifier=…``, which
    the callback checks and hands back to ``complete_login``.
    """

    redirect_url: str
    cookie_payload: dict[str, str]


class ProviderError(Exception):
    """The identity service cannot be reached (HTTP 503; the person may try again)."""


class InvalidCodeError(Exception):
    """The code or state of an OAuth callback is not good (HTTP 400)."""


class InvalidCredentialsError(Exception):
    """A username and password were refused (HTTP 401 with a message that names neither)."""


class RefreshExpiredError(Exception):
    """The refresh token is dead: the page session ends and the person signs in again."""


class DashboardAuthProvider:
    """The base of a provider: a name, what it supports, and the calls the door makes."""

    name: str = ""
    display_name: str = ""
    supports_password: bool = False
    supports_token: bool = False
    supports_session: bool = True

    def start_login(self, *, redirect_uri: str) -> LoginStart:
        """Where the browser goes to sign in; the IdP sends it back to ``redirect_uri``."""
        raise NotImplementedError(f"{type(self).__name__} has no browser sign-in")

    def complete_login(
        self, *, code: str, state: str, code_verifier: str, redirect_uri: str
    ) -> Session:
        """The session the callback's ``code`` is worth."""
        raise NotImplementedError(f"{type(self).__name__} has no browser sign-in")

    def verify_session(self, *, access_token: str) -> Session | None:
        """The session ``access_token`` still stands for, or None (expired, unknown)."""
        raise NotImplementedError(f"{type(self).__name__} has no sessions")

    def refresh_session(self, *, refresh_token: str) -> Session:
        """A new session (rotated tokens) for ``refresh_token``."""
        raise NotImplementedError(f"{type(self).__name__} has no sessions")

    def revoke_session(self, *, refresh_token: str) -> None:
        """End the session of ``refresh_token`` at the provider (best effort)."""
        raise NotImplementedError(f"{type(self).__name__} has no sessions")

    def complete_password_login(self, *, username: str, password: str) -> Session:
        """The session a username and password are worth (``supports_password`` only)."""
        raise NotImplementedError(f"{type(self).__name__} takes no passwords")

    def verify_token(self, *, token: str) -> TokenPrincipal | None:
        """The principal of ``token``, or None when this provider does not know it."""
        raise NotImplementedError(f"{type(self).__name__} does not verify tokens")


SESSION_METHODS = ("start_login", "complete_login", "verify_session", "refresh_session")


def assert_protocol_compliance(cls: type) -> None:
    """Raise TypeError unless ``cls`` names itself and implements the session methods."""
    for attr in ("name", "display_name"):
        if not getattr(cls, attr, ""):
            raise TypeError(f"{cls.__name__} has no {attr}")
    for method in (*SESSION_METHODS, "revoke_session"):
        found = getattr(cls, method, None)
        if not callable(found) or found is getattr(DashboardAuthProvider, method):
            raise TypeError(f"{cls.__name__} does not implement {method}")
    abstract = getattr(cls, "__abstractmethods__", None)
    if abstract:
        raise TypeError(f"{cls.__name__} leaves {sorted(abstract)} unimplemented")


def offers_login(provider: object) -> bool:
    """Whether the login page offers ``provider``: a session side that is more than stubs."""
    if not getattr(provider, "supports_session", True):
        return False
    if getattr(provider, "supports_password", False):
        return callable(getattr(provider, "complete_password_login", None))
    start = getattr(type(provider), "start_login", None)
    return callable(start) and start is not DashboardAuthProvider.start_login
