"""Who may talk to the agent from a chat, and as whom.

Each platform has two allow-lists of platform user ids in config.yaml: ``owners`` act as the
daemon's owner (they may answer approvals, run owner-only commands), ``allow`` act as the local
user ``as_user`` names, or, when ``allow`` is a mapping, the local user each id maps to (a
member: their sessions are theirs, approvals go to the owner, and owner-only methods refuse
them as they refuse that user's socket; members acting as the same local user share what that
user may see). Anyone else who writes in a
direct chat gets a pairing code (the reference's flow: 8 characters from an alphabet without
0/O/1/I, valid an hour, at most 3 waiting per platform, one per user per 10 minutes); the owner
admits them with ``hermesctl gateway pair CODE`` and they become members. Paired users are kept
in ``$HERMES_HOME/gateway/paired.json``. A chat user is never more than the identity they map
to: every call they cause goes through the RPC access gate as that identity.
"""

from __future__ import annotations

import json
import logging
import os
import pwd
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hermesd.caller import MEMBER, OWNER
from hermesd.gateway.sessions import write_private_json

log = logging.getLogger(__name__)

ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"
CODE_LENGTH = 8
CODE_TTL = 3600.0
RATE_LIMIT = 600.0
MAX_PENDING = 3


@dataclass(frozen=True)
class ChatIdentity:
    """Who a chat user acts as: a uid and its trust (owner or member), a name for logs."""

    uid: int
    trust: str
    name: str


@dataclass
class PairingRequest:
    """A code waiting for the owner."""

    code: str
    platform: str
    user_id: str
    user_name: str
    expires: float


class ChatUsers:
    """Allow-lists, paired users and pairing codes of every platform."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.owners: dict[str, set[str]] = {}
        self.allowed: dict[str, dict[str, str]] = {}  # platform -> user id -> local user
        self.member_as: dict[str, str] = {}
        self.paired: dict[str, dict[str, str]] = {}  # platform -> user id -> name
        self.pending: dict[str, PairingRequest] = {}
        self._asked: dict[tuple[str, str], float] = {}

    def configure(self, platform: str, settings: dict[str, Any]) -> None:
        """Take one platform's ``owners``, ``allow`` and ``as_user``."""
        self.owners[platform] = {str(u) for u in settings.get("owners") or []}
        allow = settings.get("allow") or []
        default = str(settings.get("as_user") or "nobody")
        # a list (each as as_user) or a mapping of user id to the local user they act as
        pairs = allow.items() if isinstance(allow, dict) else ((u, default) for u in allow)
        self.allowed[platform] = {str(u): str(who or default) for u, who in pairs}
        self.member_as[platform] = default

    def load(self) -> None:
        """Read the paired users (at start)."""
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            log.warning("gateway: cannot read %s (%s): no paired users", self.path, exc)
            return
        if isinstance(data, dict):
            self.paired = {
                str(p): {str(u): str(n) for u, n in users.items()}
                for p, users in data.items()
                if isinstance(users, dict)
            }

    def identity(self, platform: str, user_id: str | None) -> ChatIdentity | None:
        """Who ``user_id`` acts as on ``platform``; None for someone not admitted."""
        if not user_id:
            return None
        if user_id in self.owners.get(platform, ()):
            own = os.geteuid()
            return ChatIdentity(own, OWNER, f"{platform}:{user_id} (owner)")
        who = self.allowed.get(platform, {}).get(user_id)
        if who is None and user_id in self.paired.get(platform, {}):
            who = self.member_as.get(platform, "nobody")
        if who is not None:
            return ChatIdentity(_uid_of(who), MEMBER, f"{platform}:{user_id} (as {who})")
        return None

    def request_code(self, platform: str, user_id: str, user_name: str) -> str | None:
        """A pairing code for ``user_id``; None when rate-limited or too many are waiting."""
        now = time.time()
        self._expire(now)
        if now - self._asked.get((platform, user_id), 0.0) < RATE_LIMIT:
            return None
        self._asked[(platform, user_id)] = now
        for request in self.pending.values():
            if (request.platform, request.user_id) == (platform, user_id):
                return request.code
        if sum(1 for r in self.pending.values() if r.platform == platform) >= MAX_PENDING:
            return None
        code = "".join(secrets.choice(ALPHABET) for _ in range(CODE_LENGTH))
        self.pending[code] = PairingRequest(code, platform, user_id, user_name, now + CODE_TTL)
        log.info("gateway: pairing requested by %s user %s", platform, user_id)
        return code

    def pair(self, code: str) -> PairingRequest:
        """Admit the user behind ``code``; raises KeyError for an unknown or expired code."""
        self._expire(time.time())
        request = self.pending.pop(code.strip().upper())
        self.paired.setdefault(request.platform, {})[request.user_id] = request.user_name
        write_private_json(self.path, self.paired)
        log.info("gateway: %s user %s paired", request.platform, request.user_id)
        return request

    def _expire(self, now: float) -> None:
        for code in [c for c, r in self.pending.items() if r.expires <= now]:
            del self.pending[code]

    def summary(self) -> dict[str, Any]:
        """Counts and waiting codes' users (never the codes) for ``gateway.status``."""
        return {
            "paired": {p: sorted(u) for p, u in self.paired.items()},
            "pairing_pending": [
                {"platform": r.platform, "user_id": r.user_id, "user_name": r.user_name}
                for r in self.pending.values()
            ],
        }


def _uid_of(name: str) -> int:
    try:
        return int(name) if name.isdigit() else pwd.getpwnam(name).pw_uid
    except KeyError:
        return 65534  # nobody
