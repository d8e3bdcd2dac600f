"""``sandbox.allowed_domains``: which hosts a tool's process may reach through the egress proxy.

A host is compared in one canonical form (`canonical_host`): lower case, no trailing dot,
international names in their IDNA (``xn--``) form, IP literals in their shortest form
(``[0:0::1]`` is ``::1``). An entry is a host name (that name only), ``*.name`` (any name
below it, not the name itself), an IPv4 or IPv6 literal (that address only) or ``*`` (every
host). Numeric forms that resolvers read as addresses (``127.1``, ``0x7f.1``, ``2130706433``)
are refused as host names, so an approval never shows one name while the daemon dials another.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass

_LABEL = re.compile(r"^(?!-)[a-z0-9_-]{1,63}(?<!-)$")
_NUMERIC = re.compile(r"^(0x[0-9a-f]*|[0-9]+)$")
MAX_NAME = 253


def canonical_host(text: str) -> str:
    """``text`` in its canonical form; `ValueError` (with a sentence) when it is no host."""
    host = text.strip()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not host:
        raise ValueError("the host is empty")
    try:
        return ipaddress.ip_address(host).compressed
    except ValueError:
        pass
    if ":" in host:
        raise ValueError(f"{text!r} is neither a host name nor an IP address")
    name = host[:-1] if host.endswith(".") else host
    try:
        name = name.encode("idna").decode("ascii").lower()
    except UnicodeError as exc:
        raise ValueError(f"{text!r} is not a valid international host name ({exc})") from None
    labels = name.split(".")
    if len(name) > MAX_NAME or not all(_LABEL.match(label) for label in labels):
        raise ValueError(f"{text!r} is not a valid host name")
    if _NUMERIC.match(labels[-1]):
        raise ValueError(f"{text!r} looks like a numeric address in a form that is not allowed")
    return name


@dataclass(frozen=True)
class DomainRule:
    """One entry of the allow-list, canonical."""

    host: str  # the canonical host, or the parent name for a wildcard, or "*"
    wildcard: bool

    @classmethod
    def parse(cls, text: str) -> DomainRule:
        """An entry as written in config; `ValueError` when it is not one."""
        entry = str(text).strip()
        if entry == "*":
            return cls("*", True)
        if entry.startswith("*."):
            parent = canonical_host(entry[2:])
            if _is_address(parent):
                raise ValueError(f"{text!r}: a wildcard needs a domain name, not an address")
            return cls(parent, True)
        if "*" in entry:
            raise ValueError(f"{text!r}: '*' may only start an entry, as in '*.example.com'")
        return cls(canonical_host(entry), False)

    def matches(self, host: str) -> bool:
        """Whether a canonical ``host`` falls under this entry."""
        if self.host == "*":
            return True
        if self.wildcard:
            return host.endswith("." + self.host) and not _is_address(host)
        return host == self.host


class DomainAllowList:
    """The parsed ``sandbox.allowed_domains``."""

    def __init__(self, entries: Iterable[str]) -> None:
        self.rules = tuple(DomainRule.parse(e) for e in entries)

    def allows(self, host: str) -> bool:
        """Whether a canonical ``host`` is on the list."""
        return any(rule.matches(host) for rule in self.rules)


def entries_problem(value: object) -> str | None:
    """What is wrong with a ``sandbox.allowed_domains`` value (config check), or None."""
    if not isinstance(value, list):
        return None  # the type check reports it
    problems = []
    for entry in value:
        try:
            DomainRule.parse(str(entry))
        except ValueError as exc:
            problems.append(str(exc))
    return "; ".join(problems) or None


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
