"""Bearer tokens of the HTTP door and who each one is (docs/clients.md, "The token file").

The token file holds one token per line, optionally ``NAME:TOKEN``. A bare token, or one named
after the daemon's own user (or root), is the daemon's owner; ``NAME`` naming another login
user is that user as a member, exactly as its processes are on the socket (its own sessions,
no approving unless listed in ``approvals.approvers``). A line naming no user is skipped with a
warning. Tokens are compared in constant time; no token, no access (beyond ``/health``).
"""

from __future__ import annotations

import hmac
import logging
import os
import pwd
from dataclasses import dataclass
from pathlib import Path

from hermesd.caller import MEMBER, OWNER

log = logging.getLogger(__name__)

MIN_TOKEN = 16  # characters: a shorter token is refused (guessable)


@dataclass(frozen=True, slots=True)
class Identity:
    """Who a token stands for: a uid and its trust (owner or member), and a name for logs."""

    uid: int
    trust: str
    name: str


def identity_of(name: str) -> Identity | None:
    """The identity a token file's NAME stands for ("": the owner), or None (no such user)."""
    own = os.geteuid()
    if not name:
        return Identity(own, OWNER, _login(own))
    try:
        uid = int(name) if name.isdigit() else pwd.getpwnam(name).pw_uid
    except KeyError:
        return None
    return Identity(uid, OWNER if uid in (own, 0) else MEMBER, name)


def _login(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def parse(text: str, source: str = "token file") -> list[tuple[bytes, Identity]]:
    """The (token, identity) pairs of a token file's text; bad lines are logged and skipped."""
    found: list[tuple[bytes, Identity]] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, token = line.rpartition(":")
        name = name.strip() if sep else ""
        token = token.strip()
        if len(token) < MIN_TOKEN:
            log.warning(
                "%s line %d: token shorter than %d characters; skipped", source, number, MIN_TOKEN
            )
            continue
        who = identity_of(name)
        if who is None:
            log.warning("%s line %d: no user %r; skipped", source, number, name)
            continue
        found.append((token.encode(), who))
    return found


def load(path: Path) -> list[tuple[bytes, Identity]]:
    """The tokens of the file at ``path`` (raises OSError when it cannot be read)."""
    return parse(path.read_text(encoding="utf-8"), str(path))


def authenticate(tokens: list[tuple[bytes, Identity]], header: str | None) -> Identity | None:
    """The identity of an ``Authorization: Bearer …`` header, or None.

    Every token is compared, in constant time, whatever matched before: the time taken says
    nothing about which prefix was right.
    """
    given = bearer(header).encode()
    if not given:
        return None
    match: Identity | None = None
    for token, who in tokens:
        if hmac.compare_digest(token, given) and match is None:
            match = who
    return match


def bearer(header: str | None) -> str:
    """The token of an ``Authorization: Bearer …`` header ("" when there is none)."""
    if not header or header[:7].lower() != "bearer ":
        return ""
    return header[7:].strip()
