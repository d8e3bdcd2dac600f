"""A real Matrix homeserver for the tests: matrix-synapse on 127.0.0.1 with SQLite.

Synapse lives in its own virtualenv (``.venv/synapse``, made by ``scripts/bootstrap`` in test
mode) because its pins would fight hermesd's. ``Homeserver`` writes a small ``homeserver.yaml``
(no federation, no TLS, a registration shared secret, rate limits out of the way), starts it,
waits for ``/health``, registers users through the shared-secret admin API, and can be stopped
and started again on the same port and database (the reconnect tests).

``MatrixUser`` is the person's phone: a plain client-server API client over ``urllib``.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support.daemon import REPO, short_tmpdir

SERVER_NAME = "hermes.test"

# Test traffic comes in bursts from one address: every limiter gets out of the way.
_LOOSE = {"per_second": 10000, "burst_count": 10000}
_RATE_LIMITS = {
    "rc_message": _LOOSE,
    "rc_registration": _LOOSE,
    "rc_login": {"address": _LOOSE, "account": _LOOSE, "failed_attempts": _LOOSE},
    "rc_joins": {"local": _LOOSE, "remote": _LOOSE},
    "rc_joins_per_room": _LOOSE,
    "rc_invites": {"per_room": _LOOSE, "per_user": _LOOSE, "per_issuer": _LOOSE},
    "rc_admin_redaction": _LOOSE,
    "rc_media_create": _LOOSE,
    "rc_presence": {"per_user": _LOOSE},
    "rc_room_creation": _LOOSE,
}


def synapse_python() -> Path | None:
    """The interpreter of the virtualenv synapse is installed in, or None.

    ``HERMES_SYNAPSE_PYTHON`` names it; otherwise ``.venv/synapse`` in this checkout, or beside
    the running interpreter's virtualenv (a worktree run with another checkout's venv)."""
    named = os.environ.get("HERMES_SYNAPSE_PYTHON")
    candidates = [Path(named)] if named else []
    candidates += [REPO / ".venv/synapse/bin/python", Path(sys.prefix) / "synapse/bin/python"]
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return path
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _config(root: Path, port: int, shared_secret: str) -> dict[str, Any]:
    return {
        "server_name": SERVER_NAME,
        "pid_file": str(root / "homeserver.pid"),
        "public_baseurl": f"http://127.0.0.1:{port}/",
        "listeners": [
            {
                "port": port,
                "bind_addresses": ["127.0.0.1"],
                "type": "http",
                "tls": False,
                "x_forwarded": False,
                "resources": [{"names": ["client"], "compress": False}],
            }
        ],
        "database": {"name": "sqlite3", "args": {"database": str(root / "homeserver.db")}},
        "log_config": str(root / "log.yaml"),
        "media_store_path": str(root / "media"),
        "signing_key_path": str(root / "signing.key"),
        "registration_shared_secret": shared_secret,
        "macaroon_secret_key": secrets.token_hex(16),
        "form_secret": secrets.token_hex(16),
        "report_stats": False,
        "enable_metrics": False,
        "trusted_key_servers": [],
        "suppress_key_server_warning": True,
        "federation_domain_whitelist": [],
        "presence": {"enabled": False},
        "url_preview_enabled": False,
        **_RATE_LIMITS,
    }


def _log_config(log_path: Path) -> dict[str, Any]:
    return {
        "version": 1,
        "formatters": {"plain": {"format": "%(asctime)s %(name)s %(levelname)s %(message)s"}},
        "handlers": {
            "file": {
                "class": "logging.FileHandler",
                "filename": str(log_path),
                "formatter": "plain",
            }
        },
        "root": {"level": "WARNING", "handlers": ["file"]},
        "disable_existing_loggers": False,
    }


class Homeserver:
    """One synapse process with its own directory, port and database."""

    def __init__(self, python: Path, root: Path | None = None) -> None:
        self.python = python
        self.root = root or short_tmpdir("syn-")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.shared_secret = secrets.token_hex(16)
        self.proc: subprocess.Popen[bytes] | None = None
        self._names = itertools.count(1)
        # JSON is YAML: no YAML writer needed for synapse's config files
        (self.root / "homeserver.yaml").write_text(
            json.dumps(_config(self.root, self.port, self.shared_secret))
        )
        (self.root / "log.yaml").write_text(json.dumps(_log_config(self.root / "synapse.log")))

    def _run(self, *extra: str) -> subprocess.Popen[bytes]:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        argv = [str(self.python), "-m", "synapse.app.homeserver"]
        argv += ["--config-path", str(self.root / "homeserver.yaml"), *extra]
        out = open(self.root / "stdout.log", "ab")  # noqa: SIM115 - the child owns it
        with out:
            return subprocess.Popen(
                argv, env=env, cwd=self.root, stdout=out, stderr=subprocess.STDOUT
            )

    def start(self, timeout: float = 120.0) -> None:
        """Start synapse (its signing key made on the first start) and wait for /health."""
        if not (self.root / "signing.key").exists():
            keys = self._run("--generate-keys")
            if keys.wait(60) != 0:
                raise RuntimeError(f"synapse --generate-keys failed:\n{self.logs()}")
        self.proc = self._run()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"synapse exited with {self.proc.returncode}:\n{self.logs()}")
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as resp:
                    if resp.status == 200:
                        return
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"synapse not healthy in {timeout}s:\n{self.logs()}")

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM synapse and wait for it (SIGKILL past ``timeout``)."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def restart(self) -> None:
        self.stop()
        self.start()

    def logs(self) -> str:
        parts = []
        for name in ("stdout.log", "synapse.log"):
            path = self.root / name
            if path.exists():
                parts.append(path.read_text(errors="replace")[-6000:])
        return "\n".join(parts)

    def register(self, name: str | None = None, admin: bool = False) -> MatrixUser:
        """A new user through the shared-secret admin API, logged in (its access token)."""
        name = name or f"user{next(self._names)}-{secrets.token_hex(3)}"
        password = secrets.token_hex(12)
        endpoint = f"{self.url}/_synapse/admin/v1/register"
        nonce = http_json("GET", endpoint)["nonce"]
        mac = hmac.new(self.shared_secret.encode(), digestmod=hashlib.sha1)
        mac.update(b"\x00".join([nonce.encode(), name.encode(), password.encode()]))
        mac.update(b"\x00admin" if admin else b"\x00notadmin")
        body = {
            "nonce": nonce,
            "username": name,
            "password": password,
            "admin": admin,
            "mac": mac.hexdigest(),
        }
        reply = http_json("POST", endpoint, body)
        return MatrixUser(self.url, reply["user_id"], reply["access_token"], password)


def http_json(
    method: str,
    url: str,
    body: dict[str, Any] | None = None,
    token: str | None = None,
    timeout: float = 30.0,
) -> Any:
    """One client-server API call; the JSON reply (an HTTP error raises with its body)."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as err:
        raise RuntimeError(f"{method} {url}: {err.code} {err.read().decode()}") from None


class MatrixUser:
    """A person's Matrix client: rooms, messages, and waiting for what others post."""

    def __init__(self, base: str, user_id: str, token: str, password: str) -> None:
        self.base = base
        self.user_id = user_id
        self.token = token
        self.password = password
        self._since: str | None = None
        self._txn = itertools.count(1)
        #: every m.room.message seen by ``sync``, as (room_id, event)
        self.seen: list[tuple[str, dict[str, Any]]] = []
        #: (room_id, user_id) of everyone ``sync`` has seen typing
        self.typing: set[tuple[str, str]] = set()

    def api(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        return http_json(method, f"{self.base}/_matrix/client/v3{path}", body, self.token)

    def create_room(
        self, invite: list[str] | None = None, name: str = "hermes", is_direct: bool = False
    ) -> str:
        """A private room with ``invite`` invited (a direct chat with ``is_direct``); its id."""
        body: dict[str, Any] = {"preset": "private_chat", "invite": list(invite or [])}
        if is_direct:
            body.update(preset="trusted_private_chat", is_direct=True)
        else:
            body["name"] = name
        return str(self.api("POST", "/createRoom", body)["room_id"])

    def invite(self, room_id: str, user_id: str) -> None:
        self.api("POST", f"/rooms/{_q(room_id)}/invite", {"user_id": user_id})

    def join(self, room_id: str) -> None:
        self.api("POST", f"/join/{_q(room_id)}", {})

    def send(self, room_id: str, text: str, **extra: Any) -> str:
        """Post a text message; its event id."""
        content = {"msgtype": "m.text", "body": text, **extra}
        path = f"/rooms/{_q(room_id)}/send/m.room.message/t{time.time_ns()}-{next(self._txn)}"
        return str(self.api("PUT", path, content)["event_id"])

    def upload(self, data: bytes, content_type: str, filename: str) -> str:
        """Put ``data`` in the media repository; its ``mxc://`` URI."""
        query = urllib.parse.urlencode({"filename": filename})
        req = urllib.request.Request(
            f"{self.base}/_matrix/media/v3/upload?{query}", data=data, method="POST"
        )
        req.add_header("Content-Type", content_type)
        req.add_header("Authorization", f"Bearer {self.token}")
        with urllib.request.urlopen(req, timeout=30) as resp:
            return str(json.loads(resp.read())["content_uri"])

    def members(self, room_id: str) -> list[str]:
        """User ids joined to the room."""
        reply = self.api("GET", f"/rooms/{_q(room_id)}/joined_members")
        return sorted(reply["joined"])

    def sync(self, timeout_ms: int = 1000) -> None:
        """One /sync round; new room messages are appended to ``seen``."""
        query = {"timeout": str(timeout_ms)}
        if self._since:
            query["since"] = self._since
        else:
            # the first sync starts from now: history is not what a test waits for
            query["filter"] = json.dumps({"room": {"timeline": {"limit": 0}}})
        reply = self.api("GET", "/sync?" + urllib.parse.urlencode(query))
        self._since = reply["next_batch"]
        for room_id, room in reply.get("rooms", {}).get("join", {}).items():
            for event in room.get("timeline", {}).get("events", []):
                if event.get("type") == "m.room.message":
                    self.seen.append((room_id, event))
            for event in room.get("ephemeral", {}).get("events", []):
                if event.get("type") == "m.typing":
                    self.typing.update((room_id, u) for u in event["content"]["user_ids"])

    def wait_for(
        self,
        room_id: str,
        match: Callable[[dict[str, Any]], bool] | None = None,
        timeout: float = 30.0,
        sender: str | None = None,
    ) -> dict[str, Any]:
        """The first message in ``room_id`` not from us (or from ``sender``) that ``match``es;
        it is consumed (others stay, so two awaited messages may come in either order)."""
        deadline = time.monotonic() + timeout
        while True:
            for i, (rid, event) in enumerate(self.seen):
                from_ok = event["sender"] == sender if sender else event["sender"] != self.user_id
                if rid == room_id and from_ok and (match is None or match(event)):
                    del self.seen[i]
                    return event
            left = deadline - time.monotonic()
            if left <= 0:
                got = [(r, e["sender"], e["content"].get("body")) for r, e in self.seen]
                raise AssertionError(f"no matching message in {room_id} in {timeout}s: {got}")
            try:
                self.sync(timeout_ms=int(min(left, 5) * 1000))
            except (RuntimeError, OSError):
                time.sleep(0.5)  # the homeserver restarting under a test


def _q(room_id: str) -> str:
    return urllib.parse.quote(room_id, safe="")
