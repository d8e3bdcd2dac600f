"""The login page's provider sign-in: ``/auth/login``, ``/auth/callback``, ``/auth/password-login``.

When ``http.auth_provider`` names a registered provider with a session side, the login page
offers it: a "Log in with …" link to ``GET /auth/login`` (OAuth: ``start_login`` with this
door's ``/auth/callback`` as ``redirect_uri``, then a 302 to the provider, its
``cookie_payload`` held in cookies for `FLOW_SECONDS`, path ``/auth/``), or, for a provider
that ``supports_password``, a username and password form posted to ``/auth/password-login``.
``GET /auth/callback`` checks ``state`` against the ``hermes_session_pkce`` cookie and asks
``complete_login``. Either way the `Session` goes through `ProviderLogins.admit` and the
browser gets page.py's login cookies. Failures come back as the login page with the status
the reference gives them (400 bad code or state, 401 credentials, 403 not in
``http.auth_users``, 503 the provider is down or slow); a client address gets
`PASSWORD_TRIES` password attempts a minute (then 429), as in the reference.
"""

from __future__ import annotations

import html
import logging
import time
import urllib.parse
from collections import deque

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from hermesd.http.common import BodyBounds, read_raw
from hermesd.http.page import LOGIN_COOKIE, login_page, same_origin, secured, set_page_cookies
from hermesd.http.provider_api import LoginStart
from hermesd.http.provider_login import PROVIDER_FAILED, LoginFailed, ProviderLogins

log = logging.getLogger(__name__)

FLOW_SECONDS = 600  # how long a started OAuth sign-in may take
PKCE_COOKIE = "hermes_session_pkce"  # the reference's name: state=…;verifier=…
FLOW_COOKIE = "hermesd_login_flow"  # the provider the flow was started with
FLOW_PATH = "/auth/"
PASSWORD_TRIES = 10  # password attempts per client address within PASSWORD_WINDOW (then 429)
PASSWORD_WINDOW = 60.0


class LoginRoutes:
    """The provider sign-in routes over one `ProviderLogins`."""

    def __init__(self, logins: ProviderLogins, bounds: BodyBounds) -> None:
        self.logins = logins
        self.bounds = bounds
        self._tries: dict[str, deque[float]] = {}  # client address -> recent password attempts

    def view(self, status: int = 200, message: str = "") -> Response:
        """The login page, with the configured provider's sign-in when there is one."""
        return login_page(status, message, self._offer())

    def _offer(self) -> str:
        provider = self.logins.provider()
        if provider is None:
            return ""
        label = html.escape(str(getattr(provider, "display_name", "") or provider.name))
        if getattr(provider, "supports_password", False):
            return (
                '<form method="post" action="/auth/password-login" id="password-form">'
                f"<h2>Log in with {label}</h2>"
                '<label for="username">Username</label>'
                '<input id="username" name="username" autocomplete="username" required>'
                '<label for="password">Password</label>'
                '<input id="password" name="password" type="password" '
                'autocomplete="current-password" required>'
                f'<button type="submit" id="password-login">Log in with {label}</button>'
                '</form><p class="hint">or with a token:</p>'
            )
        return (
            f'<p><a class="button" id="provider-login" href="/auth/login">Log in with {label}</a>'
            '</p><p class="hint">or with a token:</p>'
        )

    async def start(self, request: Request) -> Response:
        """``GET /auth/login``: ``start_login``, then off to the identity service."""
        provider = self.logins.provider()
        if provider is None or getattr(provider, "supports_password", False):
            return self.view(404, "There is no sign-in service to go to.")
        callback = str(request.url_for("auth_callback"))
        try:
            begun = await self.logins.call(
                "start_login", lambda: provider.start_login(redirect_uri=callback)
            )
        except LoginFailed as exc:
            return self.view(exc.status, exc.message)
        if not isinstance(begun, LoginStart) or not _web_url(begun.redirect_url):
            log.error("HTTP auth provider %s: start_login gave no redirect URL", provider.name)
            return self.view(500, PROVIDER_FAILED)
        answer = RedirectResponse(begun.redirect_url, status_code=302)
        flow = {**begun.cookie_payload, FLOW_COOKIE: str(provider.name)}
        https = request.url.scheme == "https"
        for name, value in flow.items():
            answer.set_cookie(
                name,
                str(value),
                max_age=FLOW_SECONDS,
                httponly=True,
                samesite="lax",
                secure=https,
                path=FLOW_PATH,
            )
        return secured(answer)

    async def callback(self, request: Request) -> Response:
        """``GET /auth/callback?code=…&state=…``: ``complete_login`` and sign the browser in."""
        answer = await self._callback(request)
        for name in request.cookies:
            if name in (PKCE_COOKIE, FLOW_COOKIE):
                answer.delete_cookie(name, path=FLOW_PATH)
        return answer

    async def _callback(self, request: Request) -> Response:
        provider = self.logins.provider()
        query = request.query_params
        flow = request.cookies.get(FLOW_COOKIE)
        if provider is None or flow != str(provider.name):
            return self.view(400, "This sign-in was not started here, or it took too long.")
        if query.get("error"):
            detail = query.get("error_description") or query["error"]
            return self.view(400, f"The sign-in service refused: {detail}")
        held = _segments(request.cookies.get(PKCE_COOKIE, ""))
        state, code = query.get("state", ""), query.get("code", "")
        if not state or state != held.get("state"):
            return self.view(400, "The sign-in's state does not match; please start again.")
        callback = str(request.url_for("auth_callback"))
        verifier = held.get("verifier", "")
        try:
            session = await self.logins.call(
                "complete_login",
                lambda: provider.complete_login(
                    code=code, state=state, code_verifier=verifier, redirect_uri=callback
                ),
            )
            login = await self.logins.admit(provider, session)
        except LoginFailed as exc:
            return self.view(exc.status, exc.message)
        return _signed_in(request, login)

    async def password(self, request: Request) -> Response:
        """``POST /auth/password-login`` (a form): ``complete_password_login``."""
        provider = self.logins.provider()
        if provider is None or not getattr(provider, "supports_password", False):
            return self.view(404, "This daemon takes no passwords.")
        if not same_origin(request):
            return self.view(403, "This form must be sent from this page.")
        if self._too_many(request.client.host if request.client else ""):
            return self.view(429, "Too many attempts; wait a minute and try again.")
        form = urllib.parse.parse_qs(
            (await read_raw(request, self.bounds)).decode("utf-8", "replace")
        )
        username = (form.get("username") or [""])[0].strip()
        password = (form.get("password") or [""])[0]
        if not username or not password:
            return self.view(400, "Both a username and a password are needed.")
        try:
            session = await self.logins.call(
                "complete_password_login",
                lambda: provider.complete_password_login(username=username, password=password),
            )
            login = await self.logins.admit(provider, session)
        except LoginFailed as exc:
            return self.view(exc.status, exc.message)
        return _signed_in(request, login)

    def _too_many(self, address: str) -> bool:
        """Whether ``address`` has used up its password attempts (this one counts)."""
        now = time.monotonic()
        if len(self._tries) > 4096:  # forget addresses that have gone quiet
            self._tries = {a: t for a, t in self._tries.items() if now - t[-1] < PASSWORD_WINDOW}
        recent = self._tries.setdefault(address, deque())
        while recent and now - recent[0] > PASSWORD_WINDOW:
            recent.popleft()
        if len(recent) >= PASSWORD_TRIES:
            return True
        recent.append(now)
        return False


def _signed_in(request: Request, login: str) -> Response:
    answer = RedirectResponse("/", status_code=303)
    set_page_cookies(answer, request, LOGIN_COOKIE, login, "lax")
    return secured(answer)


def _segments(text: str) -> dict[str, str]:
    """``a=1;b=2`` as a dict (the reference's cookie shape)."""
    return dict(part.split("=", 1) for part in text.split(";") if "=" in part)


def _web_url(url: object) -> bool:
    return isinstance(url, str) and urllib.parse.urlsplit(url).scheme in ("http", "https")
