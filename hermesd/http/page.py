"""The web page of the HTTP door (docs/web.md): its files, the login cookie, CSRF, the CSP.

``GET /`` is the page for a browser holding the login cookie, the login form for anyone else.
``POST /login`` takes a token of the token file (or the auth provider's) from that form and
sets two cookies: ``hermesd_token`` (the token itself: ``HttpOnly``, ``SameSite=Strict``) and
``hermesd_csrf`` (readable by the page's script). A request authenticated by the cookie that
is not a GET must carry ``X-CSRF-Token`` equal to the CSRF value, which is an HMAC of the token
(so it survives a daemon restart and is worth nothing without the token), and an ``Origin``,
if sent, of this very host. Bearer-token clients never touch any of this. A sign-in through a
plugin's provider (login_routes.py) sets ``hermesd_login`` instead, an opaque login id
(``SameSite=Lax``, so it survives the identity service's redirect back), same CSRF rules.

The page's files are package data (``hermesd/http/web/``), served (gzip-compressed to a browser
that accepts it, with an ETag) with a strict
Content-Security-Policy: scripts, styles, images and connections from this origin only (images
also as ``data:``/``blob:`` URLs, the page's uploads and stored images), no inline script.
``GET /v1/web/usage`` adds what the page's chart needs and ``usage.get`` has not: the same
totals per day and model, one ``usage.get`` per local day through the caller's identity.
"""

from __future__ import annotations

import gzip
import hashlib
import hmac
import html
import time
import urllib.parse
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, RedirectResponse, Response

from hermesd.http.common import BodyBounds, HttpError, identity, read_raw
from hermesd.http.door import Door
from hermesd.http.provider_login import LoginFailed, ProviderLogins

WEB = Path(__file__).parent / "web"
TOKEN_COOKIE = "hermesd_token"
LOGIN_COOKIE = "hermesd_login"  # a provider sign-in's login id (provider_login.py)
CSRF_COOKIE = "hermesd_csrf"
CSRF_HEADER = "x-csrf-token"
SAFE = frozenset({"GET", "HEAD", "OPTIONS"})
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
    "connect-src 'self'; font-src 'self'; form-action 'self'; frame-ancestors 'none'; "
    "base-uri 'none'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-cache",
}
TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
}
MAX_DAYS = 92
_PACKED: dict[Path, tuple[float, bytes, str]] = {}  # file -> (mtime, gzip bytes, etag)


def _packed(path: Path) -> tuple[bytes, str]:
    """A page file gzip-compressed (kept until it changes) and its ETag."""
    mtime = path.stat().st_mtime
    held = _PACKED.get(path)
    if held is None or held[0] != mtime:
        raw = path.read_bytes()
        etag = '"' + hashlib.sha256(raw).hexdigest()[:20] + '-gz"'
        held = _PACKED[path] = (mtime, gzip.compress(raw, 9, mtime=0), etag)
    return held[1], held[2]


def csrf_value(token: str) -> str:
    """The CSRF value that goes with a login token."""
    return hmac.new(token.encode(), b"hermesd web csrf", hashlib.sha256).hexdigest()


def cookie_token(request: Request, name: str = TOKEN_COOKIE) -> str | None:
    """The login cookie's token, if the request has one and no Authorization header."""
    if request.headers.get("authorization") is not None:
        return None
    return request.cookies.get(name) or None


def set_page_cookies(
    response: Response, request: Request, name: str, value: str, samesite: Literal["lax", "strict"]
) -> None:
    """Sign the browser in: ``name`` holds ``value`` (HttpOnly), the CSRF cookie its HMAC."""
    https = request.url.scheme == "https"
    for cookie, text, hidden in ((name, value, True), (CSRF_COOKIE, csrf_value(value), False)):
        response.set_cookie(
            cookie, text, httponly=hidden, samesite=samesite, secure=https, path="/"
        )
    other = LOGIN_COOKIE if name == TOKEN_COOKIE else TOKEN_COOKIE
    if other in request.cookies:
        response.delete_cookie(other, path="/")


def csrf_refusal(request: Request, token: str) -> str | None:
    """Why a cookie-authenticated request may not go on (None: it may)."""
    if request.method in SAFE:
        return None
    if not same_origin(request):
        return "the request comes from another origin"
    sent = request.headers.get(CSRF_HEADER, "")
    if not hmac.compare_digest(sent.encode(), csrf_value(token).encode()):
        return "a missing or wrong X-CSRF-Token"
    return None


def same_origin(request: Request) -> bool:
    """Whether a browser's request comes from this very host (or sends no Origin)."""
    origin = request.headers.get("origin")
    if origin is None:
        return True  # not a browser's cross-site request (those send Origin on POST)
    host = request.headers.get("host", "")
    return origin in (f"http://{host}", f"https://{host}")


def secured(response: Response) -> Response:
    """``response`` with the page's security headers."""
    for name, value in HEADERS.items():
        response.headers.setdefault(name, value)
    return response


def login_page(status: int = 200, message: str = "", offer: str = "") -> Response:
    """The login form; ``message`` is shown as its error, ``offer`` is a provider's sign-in."""
    text = (WEB / "login.html").read_text("utf-8").replace("<!--provider-->", offer)
    if message:
        text = text.replace(
            "<!--message-->",
            f'<p class="error" role="alert" id="login-error">{html.escape(message)}</p>',
        )
    return secured(Response(text, status, media_type=TYPES[".html"]))


class PageRoutes:
    """``/``, ``/login``, ``/logout``, ``/web/{file}`` and ``/v1/web/usage``."""

    def __init__(
        self,
        door: Door,
        bounds: BodyBounds,
        check: Any,
        logins: ProviderLogins,
        view: Callable[[int, str], Response],
    ) -> None:
        self.door = door
        self.bounds = bounds
        self.check = check  # async (token) -> Identity | None: the door's own token check
        self.logins = logins  # provider sign-ins (provider_login.py)
        self.view = view  # (status, message) -> the login page (with a provider's offer)

    async def index(self, request: Request) -> Response:
        login = request.cookies.get(LOGIN_COOKIE)
        token = request.cookies.get(TOKEN_COOKIE)
        try:
            if login and await self.logins.identify(login) is not None:
                return secured(FileResponse(WEB / "index.html", media_type=TYPES[".html"]))
        except LoginFailed as exc:
            return self.view(exc.status, exc.message)
        if not token or await self.check(token) is None:
            answer: Response = self.view(200, "")
            if login:
                answer.delete_cookie(LOGIN_COOKIE, path="/")
            return answer
        return secured(FileResponse(WEB / "index.html", media_type=TYPES[".html"]))

    async def asset(self, request: Request) -> Response:
        name = request.path_params["path"]
        path = (WEB / name).resolve()
        if WEB.resolve() not in path.parents or not path.is_file() or path.suffix not in TYPES:
            return secured(Response("not found", 404, media_type="text/plain"))
        if "gzip" not in request.headers.get("accept-encoding", ""):
            return secured(FileResponse(path, media_type=TYPES[path.suffix]))
        body, etag = _packed(path)  # a slow link gets the libraries at about a third
        headers = {"ETag": etag, "Vary": "Accept-Encoding"}
        if request.headers.get("if-none-match") == etag:
            return secured(Response(status_code=304, headers=headers))
        headers["Content-Encoding"] = "gzip"
        return secured(Response(body, media_type=TYPES[path.suffix], headers=headers))

    async def login(self, request: Request) -> Response:
        if not same_origin(request):
            return self.view(403, "This form must be sent from this page.")
        form = urllib.parse.parse_qs(
            (await read_raw(request, self.bounds)).decode("utf-8", "replace")
        )
        token = (form.get("token") or [""])[0].strip()
        if not token or await self.check(token) is None:
            return self.view(401, "That token is not valid here.")
        answer = RedirectResponse("/", status_code=303)
        set_page_cookies(answer, request, TOKEN_COOKIE, token, "strict")
        return secured(answer)

    async def logout(self, request: Request) -> Response:
        """Forget the cookies (a cookie-authenticated POST: the CSRF check has passed) and a
        provider sign-in's session (``revoke_session``, best effort)."""
        login = cookie_token(request, LOGIN_COOKIE)
        if login:
            await self.logins.logout(login)
        answer = RedirectResponse("/", status_code=303)
        for name in (TOKEN_COOKIE, LOGIN_COOKIE, CSRF_COOKIE):
            answer.delete_cookie(name, path="/")
        return secured(answer)

    async def me(self, request: Request) -> Response:
        """``GET /v1/web/me``: who the caller is, for the page's header."""
        who = identity(request)
        return JSONResponse({"name": who.name, "trust": who.trust, "uid": who.uid})

    async def usage(self, request: Request) -> Response:
        """``GET /v1/web/usage?days=N``: ``usage.get``'s totals per local day and model."""
        raw = request.query_params.get("days", "30")
        if not raw.isdigit() or not 1 <= int(raw) <= MAX_DAYS:
            raise HttpError(400, f"days must be 1-{MAX_DAYS}", "invalid_params")
        who = identity(request)
        today = datetime.now().astimezone().replace(hour=0, minute=0, second=0, microsecond=0)
        days = []
        for back in range(int(raw) - 1, -1, -1):
            start = today - timedelta(days=back)
            end = start + timedelta(days=1)
            got = await self.door.call(
                who, "usage.get", {"since": start.timestamp(), "until": end.timestamp()}
            )
            days.append(
                {
                    "day": start.date().isoformat(),
                    "totals": got.get("totals") or {},
                    "by_model": got.get("by_model") or [],
                }
            )
        latest = days[-1]
        whole = await self.door.call(who, "usage.get", {"limit": 1})
        return JSONResponse(
            {
                "days": days,
                "today": whole.get("today") or latest["totals"],
                "month": whole.get("month") or {},
                "budget": whole.get("budget") or {},
                "generated_at": time.time(),
            }
        )
