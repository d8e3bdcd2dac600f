"""The Starlette application of the HTTP door: routes, bearer tokens, errors, health, metrics.

Every route but ``/health`` needs a bearer token (`hermesd.http.tokens`, or a plugin's
provider: `hermesd.http.auth_provider`); the identity it stands
for makes the RPC calls (`hermesd.http.door`). ``/metrics`` is Prometheus text built from the
daemon's own ``status`` (each number in it a gauge), the all-time totals of ``usage.get``
(tokens, cost), the door's counters and the event counters of `hermesd.http.metrics`.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import uvicorn
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from hermesd.http.auth_provider import ProviderAuth
from hermesd.http.common import BodyBounds, HttpError
from hermesd.http.door import Door
from hermesd.http.errors import error, from_rpc
from hermesd.http.login_routes import LoginRoutes
from hermesd.http.metrics import EventMetrics
from hermesd.http.openai_api import OpenAIRoutes
from hermesd.http.openapi import document
from hermesd.http.page import LOGIN_COOKIE, PageRoutes, cookie_token, csrf_refusal
from hermesd.http.provider_login import LoginFailed, ProviderLogins
from hermesd.http.session_feed import SessionFeed
from hermesd.http.sessions_api import SessionRoutes
from hermesd.http.tokens import Identity, authenticate, bearer
from hermesd.rpc.protocol import RpcError

log = logging.getLogger(__name__)

Endpoint = Callable[[Request], Awaitable[Response]]


class QuietServer(uvicorn.Server):
    """uvicorn without its signal handlers: the daemon's own decide when the door stops."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class HttpApp:
    """The routes over one `Door`, with the tokens of the moment (reloaded with the config)."""

    def __init__(
        self,
        door: Door,
        bounds: BodyBounds,
        metrics: EventMetrics,
        web: bool = True,
        uploads: BodyBounds | None = None,
    ) -> None:
        self.door = door
        self.counters = metrics
        self.provider_auth: ProviderAuth | None = None  # a plugin's tokens (auth_provider.py)
        self.logins = ProviderLogins(lambda: self.provider_auth)  # its page sign-ins
        self.tokens: list[tuple[bytes, Identity]] = []
        self.answered: Counter[str] = Counter()  # responses by status code
        self.refused = 0  # requests without a valid token
        self.openai = OpenAIRoutes(door, bounds)
        self.sessions = SessionRoutes(door, bounds, uploads or bounds)
        self.feed = SessionFeed()  # the list's changes (fed by the service while the door is on)
        s, o = self.sessions, self.openai
        routes = [
            Route("/health", self.health, methods=["GET"]),
            Route("/ready", self._auth(self.ready), methods=["GET"]),
            Route("/metrics", self._auth(self.metrics), methods=["GET"]),
            Route("/openapi.json", self._auth(self.openapi), methods=["GET"]),
            Route("/v1/models", self._auth(o.models), methods=["GET"]),
            Route("/v1/chat/completions", self._auth(o.chat_completions), methods=["POST"]),
            Route("/v1/responses", self._auth(o.responses), methods=["POST"]),
            Route("/v1/sessions", self._auth(s.list), methods=["GET"]),
            Route("/v1/sessions", self._auth(s.create), methods=["POST"]),
            Route("/v1/sessions/{session_id}", self._auth(s.get), methods=["GET"]),
            Route("/v1/sessions/{session_id}/messages", self._auth(s.history), methods=["GET"]),
            Route("/v1/sessions/{session_id}/messages", self._auth(s.send), methods=["POST"]),
            Route("/v1/sessions/{session_id}/events", self._auth(s.events), methods=["GET"]),
            Route("/v1/sessions/{session_id}/cancel", self._auth(s.cancel), methods=["POST"]),
            Route("/v1/sessions/{session_id}/approvals", self._auth(s.approvals), methods=["GET"]),
            Route(
                "/v1/sessions/{session_id}/approvals/{approval_id}",
                self._auth(s.respond),
                methods=["POST"],
            ),
            Route("/v1/sessions/{session_id}/clarify", self._auth(s.questions), methods=["GET"]),
            Route(
                "/v1/sessions/{session_id}/clarify/{question_id}",
                self._auth(s.answer),
                methods=["POST"],
            ),
            Route("/v1/rpc/{method}", self._auth(s.rpc), methods=["POST"]),
        ]
        if web:  # the web page (docs/web.md)
            signin = LoginRoutes(self.logins, bounds)
            p = PageRoutes(door, bounds, self._identify, self.logins, signin.view)
            routes += [
                Route("/", p.index, methods=["GET"]),
                Route("/login", p.login, methods=["POST"]),
                Route("/auth/login", signin.start, methods=["GET"]),
                Route("/auth/callback", signin.callback, methods=["GET"], name="auth_callback"),
                Route("/auth/password-login", signin.password, methods=["POST"]),
                Route("/logout", self._auth(p.logout), methods=["POST"]),
                Route("/web/{path:path}", p.asset, methods=["GET"]),
                Route("/v1/web/me", self._auth(p.me), methods=["GET"]),
                Route("/v1/web/usage", self._auth(p.usage), methods=["GET"]),
                Route("/v1/web/sessions/events", self._auth(self.feed.events), methods=["GET"]),
            ]
        self.app = Starlette(routes=routes)

    async def _caller(self, request: Request) -> Identity | Response:
        """Who is asking (the bearer token, the page's token or provider login), or a refusal."""
        header = request.headers.get("authorization")
        login = cookie_token(request, LOGIN_COOKIE)  # a provider sign-in (provider_login.py)
        cookie = login or cookie_token(request)  # the web page's login (page.py)
        if cookie is not None:
            refusal = csrf_refusal(request, cookie)
            if refusal is not None:
                return error(403, f"refused: {refusal}", "csrf")
            header = f"Bearer {cookie}"
        try:
            who = await (self.logins.identify(login) if login else self._identify(bearer(header)))
        except LoginFailed as exc:
            return error(exc.status, exc.message, "auth_provider")
        if who is None:
            self.refused += 1
            answer = error(401, "a valid bearer token is needed", "invalid_token")
            answer.headers["WWW-Authenticate"] = 'Bearer realm="hermesd"'
            return answer
        return who

    def _auth(self, endpoint: Endpoint) -> Endpoint:
        async def guarded(request: Request) -> Response:
            who = await self._caller(request)
            if isinstance(who, Response):
                self.answered[str(who.status_code)] += 1
                return who
            request.state.identity = who
            try:
                response = await endpoint(request)
            except HttpError as exc:
                response = error(exc.status, exc.message, exc.code)
            except RpcError as exc:
                response = from_rpc(exc)
            except ConnectionError as exc:
                response = error(503, str(exc), "unavailable")
            except Exception:
                log.exception("HTTP %s %s failed", request.method, request.url.path)
                response = error(500, "internal error; see the daemon log", "internal")
            self.answered[str(response.status_code)] += 1
            return response

        return guarded

    async def _identify(self, token: str) -> Identity | None:
        """Who a token stands for: the token file's, else the auth provider's, else None."""
        who = authenticate(self.tokens, f"Bearer {token}") if token else None
        if who is None and token and self.provider_auth is not None:
            who = await self.provider_auth.identify(token)
        return who

    async def health(self, request: Request) -> Response:
        """``/health``: the process answers (no token, nothing more said)."""
        return JSONResponse({"status": "ok"})

    async def ready(self, request: Request) -> Response:
        """``/ready``: the daemon answers ``status`` through the RPC layer."""
        status = await self.door.call(request.state.identity, "status")
        return JSONResponse({"status": "ready", "version": status.get("version")})

    async def openapi(self, request: Request) -> Response:
        """``/openapi.json``: generated from the RPC method table."""
        return JSONResponse(document())

    async def metrics(self, request: Request) -> Response:
        """``/metrics``: Prometheus text."""
        who = request.state.identity
        status = await self.door.call(who, "status")
        usage = await self.door.call(who, "usage.get", {"limit": 1})  # the identity's scope
        status["usage_total"] = usage.get("totals") or {}
        registry = CollectorRegistry()
        registry.register(_Snapshot(status, self))
        text = generate_latest(registry) + generate_latest(self.counters.registry)
        return Response(text, media_type="text/plain; version=0.0.4")


class _Snapshot:
    """One scrape: the numbers of ``status`` and the door's counters."""

    def __init__(self, status: dict[str, Any], app: HttpApp) -> None:
        self.status, self.app = status, app

    def collect(self) -> Any:
        for name, value in _numbers("hermesd", self.status):
            yield GaugeMetricFamily(name, "from the daemon's status", value=value)
        kinds = GaugeMetricFamily(
            "hermesd_connections_by_kind", "open connections by door", labels=["kind"]
        )
        kinds.add_metric(["socket"], float(self.status.get("connections") or 0))
        kinds.add_metric(["http"], float(len(self.app.door.links)))
        kinds.add_metric(["http_event_stream"], float(self.app.sessions.streams))
        yield kinds
        answered = CounterMetricFamily(
            "hermesd_http_responses", "HTTP responses by status code", labels=["code"]
        )
        for code, n in sorted(self.app.answered.items()):
            answered.add_metric([code], float(n))
        yield answered


_NAME = re.compile(r"[^a-zA-Z0-9_]")


def _numbers(prefix: str, value: Any) -> list[tuple[str, float]]:
    """Every number in a nested status map, named by its path."""
    if isinstance(value, bool):
        return [(prefix, float(value))]
    if isinstance(value, (int, float)):
        return [(prefix, float(value))]
    if isinstance(value, dict):
        out = []
        for key, inner in value.items():
            out += _numbers(f"{prefix}_{_NAME.sub('_', str(key))}", inner)
        return out
    return []
