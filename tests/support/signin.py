"""A stand-in identity service for the web page's provider sign-in tests: a dashboard auth
plugin written against the reference's interface (OAuth and password), and a tiny local
"authorize" endpoint that sends the browser straight back to the callback with a code.

The plugin's calls are recorded one per line in ``calls`` beside its ``__init__.py``."""

from __future__ import annotations

import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tests.support.plugin_factory import write_plugin

PROVIDER = """
import secrets, time, urllib.parse
from pathlib import Path
from hermes_cli.dashboard_auth import (
    DashboardAuthProvider, InvalidCodeError, InvalidCredentialsError, LoginStart,
    ProviderError, RefreshExpiredError, Session,
)

CALLS = Path(__file__).with_name("calls")
PASSWORDS = {"alice": "wonderland", "bob": "builder", "carol": "singer", "mallory": "evil"}


def note(line):
    with CALLS.open("a") as f:
        f.write(line + "\\n")


class Portal(DashboardAuthProvider):
    name = "portal"
    display_name = "Test Portal"
    supports_password = SUPPORTS_PASSWORD_FLAG

    def __init__(self):
        self.live = {}  # access token -> user
        self.refresh = {}  # refresh token -> (user, refreshes left)

    def _session(self, user, left=5):
        at, rt = "at-" + secrets.token_hex(8), "rt-" + secrets.token_hex(8)
        self.live[at] = user
        self.refresh[rt] = (user, left)
        lasts = 0 if user == "carol" else 3600  # carol's tokens are always due a refresh
        return Session(user, user + "@example.org", user.title(), "", self.name,
                       int(time.time()) + lasts, at, rt)

    def start_login(self, *, redirect_uri):
        note("start_login " + redirect_uri)
        state = secrets.token_urlsafe(16)
        query = urllib.parse.urlencode({"state": state, "redirect_uri": redirect_uri})
        return LoginStart(_IDP + "/authorize?" + query,
                          {"hermes_session_pkce": f"state={state};verifier=v-{state}"})

    def complete_login(self, *, code, state, code_verifier, redirect_uri):
        note("complete_login " + code)
        if code_verifier != "v-" + state:
            raise InvalidCodeError("verifier does not match")
        if code == "alice-code":
            return self._session("alice")
        raise InvalidCodeError("unknown code")

    def complete_password_login(self, *, username, password):
        note("complete_password_login " + username)
        if username == "down":
            raise ProviderError("directory offline")
        if username == "slow":
            time.sleep(30)
        if username == "crash":
            raise RuntimeError("the plugin tripped over itself")
        if PASSWORDS.get(username) != password:
            raise InvalidCredentialsError(username)
        return self._session(username, 2 if username == "carol" else 5)

    def verify_session(self, *, access_token):
        note("verify_session")
        user = self.live.get(access_token)
        return None if user is None else self._same(user, access_token)

    def _same(self, user, at):
        return Session(user, user + "@example.org", user.title(), "", self.name,
                       int(time.time()) + 3600, at, "")

    def refresh_session(self, *, refresh_token):
        note("refresh_session")
        user, left = self.refresh.pop(refresh_token, (None, 0))
        if user is None or left <= 0:
            raise RefreshExpiredError("refresh token is dead")
        return self._session(user, left - 1)

    def revoke_session(self, *, refresh_token):
        note("revoke_session " + self.refresh.get(refresh_token, ("?",))[0])
        self.refresh.pop(refresh_token, None)


def register(ctx):
    ctx.register_dashboard_auth_provider(Portal())
"""

USERS = "  auth_users:\n    alice: owner\n    bob@example.org: nobody\n    carol: owner\n"


def provider_plugin(home: Path, idp: str, password: bool) -> Path:
    """The ``portal`` provider in ``home``'s plugins (OAuth, or a password form); its folder."""
    text = PROVIDER.replace("SUPPORTS_PASSWORD_FLAG", str(password))
    write_plugin(home / "plugins", "portal", f"_IDP = {idp!r}\n" + text)
    return home / "plugins" / "portal"


def http_extra(timeout: float = 5) -> str:
    """The ``http`` lines naming the provider and who its people are."""
    return f"  auth_provider: portal\n  auth_timeout: {timeout}\n" + USERS


class _Authorize(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
        back = query["redirect_uri"][0]
        code = urllib.parse.urlencode({"code": "alice-code", "state": query["state"][0]})
        self.send_response(302)
        self.send_header("Location", f"{back}?{code}")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def identity_service() -> Iterator[str]:
    """A local ``/authorize`` that signs alice in at once; yields its base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Authorize)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
