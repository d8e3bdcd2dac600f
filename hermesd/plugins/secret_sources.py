"""Secret sources plugins register: asking them, and putting their answers into the environment.

A plugin hands ``ctx.register_secret_source`` an object shaped like the reference's
``agent.secret_sources.base.SecretSource``. After the plugins load (at start and on each reload)
`SecretSources.apply` asks every source whose ``secrets.<name>`` section enables it for its
secrets and writes them into the daemon's environment, which is where hermesd's own lookups read
credentials (``OPENAI_API_KEY`` for the model, ``${VAR}`` in ``mcp_servers``, a plugin's
``requires_env``). The rules are the reference's: sources named in ``secrets.sources`` first, the
rest in registration order; sources that bind names (``shape: mapped``) before ones that bring
many (``bulk``); the first source to supply a name keeps it; a name the environment or ``.env``
already has stays unless the source's ``override_existing`` allows it; a source's
``protected_env_vars`` are never set. Each ``fetch`` runs on a thread within its
``fetch_timeout_seconds``. Values never reach the log: only names and source names do. What an
earlier pass set is taken back before the next one, so a disabled source's secrets go away.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import re
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hermesd import redact

log = logging.getLogger(__name__)

SECRET_SOURCE_API_VERSION = 1  # the reference's contract version
DEFAULT_TIMEOUT = 120.0
_NAME = re.compile(r"^[a-z0-9_]+$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def refusal(source: Any, schemes_taken: Mapping[str, str]) -> str | None:
    """Why ``source`` cannot be registered (the reference's checks), or None.
    ``schemes_taken``: scheme -> name of the source that owns it."""
    name = getattr(source, "name", "")
    if not isinstance(name, str) or not _NAME.match(name):
        return f"invalid secret source name {name!r} (lowercase letters, digits and '_')"
    if not callable(getattr(source, "fetch", None)):
        return f"secret source '{name}' has no fetch(cfg, home_path)"
    version = getattr(source, "api_version", None)
    if version != SECRET_SOURCE_API_VERSION:
        return (
            f"secret source '{name}' is built for secret-source API v{version}; hermesd "
            f"speaks v{SECRET_SOURCE_API_VERSION}"
        )
    if getattr(source, "shape", None) not in ("mapped", "bulk"):
        return f"secret source '{name}': shape must be 'mapped' or 'bulk'"
    scheme = getattr(source, "scheme", None)
    owner = schemes_taken.get(scheme) if scheme else None
    if owner is not None and owner != name:
        return f"secret source '{name}': scheme '{scheme}://' belongs to source '{owner}'"
    return None


@dataclass
class SourceOutcome:
    """What one source's pass did (names only, never values)."""

    name: str
    applied: list[str] = field(default_factory=list)
    kept_existing: list[str] = field(default_factory=list)
    claimed: list[str] = field(default_factory=list)
    protected: list[str] = field(default_factory=list)
    invalid: list[str] = field(default_factory=list)
    error: str | None = None


class SecretSources:
    """Applies the registered sources to one environment and remembers what it set there."""

    def __init__(self, environ: MutableMapping[str, str] | None = None) -> None:
        self.environ: MutableMapping[str, str] = os.environ if environ is None else environ
        self._set: dict[str, tuple[str, str | None]] = {}  # name -> (value set, value before)
        #: variable -> the source that supplied it (provenance, for listings and redaction)
        self.supplied: dict[str, str] = {}
        self.outcomes: list[SourceOutcome] = []
        #: called (on the applying thread) after a pass that changed the environment
        self.on_change: Callable[[], None] | None = None

    def apply(self, sources: list[Any], secrets_cfg: Any, home: Path) -> list[SourceOutcome]:
        """Take back the previous pass, then ask the enabled ``sources`` (registration order)
        for their secrets and set them; the outcome per source."""
        before = dict(self.supplied)
        self._take_back()
        cfg = secrets_cfg if isinstance(secrets_cfg, Mapping) else {}
        enabled = _enabled_in_order(sources, cfg)
        ordered = [s for s in enabled if s.shape == "mapped"] + [
            s for s in enabled if s.shape == "bulk"
        ]
        fetched = [(s, _section(cfg, s.name)) for s in ordered]
        results = [(s, c, _fetch(s, c, home)) for s, c in fetched]
        protected: set[str] = set()
        for source, section, _ in results:
            protected |= set(_call(source.protected_env_vars, section, frozenset()))
        self.outcomes = [self._apply_one(s, c, r, protected) for s, c, r in results]
        values = [value for value, _ in self._set.values()]
        for outcome in self.outcomes:
            if outcome.error:
                log.warning("secret source '%s': %s", outcome.name, _scrub(outcome.error, values))
            elif outcome.applied:
                log.info("secret source '%s' supplied %s", outcome.name, ", ".join(outcome.applied))
        if self.supplied != before and self.on_change is not None:
            self.on_change()
        return self.outcomes

    def _apply_one(
        self, source: Any, section: dict[str, Any], result: Any, protected: set[str]
    ) -> SourceOutcome:
        outcome = SourceOutcome(source.name)
        error = getattr(result, "error", None)
        secrets = getattr(result, "secrets", None)
        if error is not None or not isinstance(secrets, Mapping):
            outcome.error = str(error or "fetch returned no secrets mapping")
            return outcome
        override = bool(_call(source.override_existing, section, False))
        for var, value in secrets.items():
            if not isinstance(var, str) or not isinstance(value, str):
                continue
            if not _ENV_NAME.match(var):
                outcome.invalid.append(var)
            elif var in protected:
                outcome.protected.append(var)
            elif var in self.supplied:
                outcome.claimed.append(var)
                log.warning(
                    "secret source '%s' also supplies %s; the value of '%s' is kept (the first "
                    "source wins: reorder secrets.sources or remove one binding)",
                    source.name,
                    var,
                    self.supplied[var],
                )
            elif self.environ.get(var) and not override:
                outcome.kept_existing.append(var)
            else:
                self._set[var] = (value, self.environ.get(var))
                self.environ[var] = value
                self.supplied[var] = source.name
                outcome.applied.append(var)
        return outcome

    def _take_back(self) -> None:
        for var, (value, previous) in self._set.items():
            if self.environ.get(var) != value:
                continue  # changed since (a .env edit): not ours any more
            if previous is None:
                del self.environ[var]
            else:
                self.environ[var] = previous
        self._set.clear()
        self.supplied.clear()


def _scrub(text: str, values: list[str]) -> str:
    """``text`` without any value a source supplied in this pass (the redactor learns them
    only after the pass), then through the redactor."""
    for value in sorted(values, key=len, reverse=True):
        if len(value) >= 4:
            text = text.replace(value, redact.REDACTED)
    return redact.redact(text)


def _section(cfg: Mapping[str, Any], name: str) -> dict[str, Any]:
    section = cfg.get(name)
    return dict(section) if isinstance(section, Mapping) else {}


def _call(method: Any, section: dict[str, Any], fallback: Any) -> Any:
    """A source's optional method; a source that raises gets ``fallback``."""
    try:
        return method(section)
    except Exception:
        log.warning("secret source method %r raised", method, exc_info=True)
        return fallback


def _enabled_in_order(sources: list[Any], cfg: Mapping[str, Any]) -> list[Any]:
    by_name = {s.name: s for s in sources}
    explicit = cfg.get("sources")
    order = [n for n in explicit if n in by_name] if isinstance(explicit, list) else []
    unknown = [n for n in explicit if n not in by_name] if isinstance(explicit, list) else []
    if unknown:
        log.warning("secrets.sources names unknown source(s): %s", ", ".join(map(str, unknown)))
    order = list(dict.fromkeys(order + list(by_name)))
    enabled = []
    for name in order:
        source = by_name[name]
        check = getattr(source, "is_enabled", None)
        section = _section(cfg, name)
        on = _call(check, section, False) if callable(check) else section.get("enabled")
        if on:
            enabled.append(source)
    return enabled


def _fetch(source: Any, section: dict[str, Any], home: Path) -> Any:
    """``source.fetch`` on a thread within its budget; a failure is an object with ``error``."""
    budget = DEFAULT_TIMEOUT
    limit = getattr(source, "fetch_timeout_seconds", None)
    if callable(limit):
        budget = float(_call(limit, section, DEFAULT_TIMEOUT))
    pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=f"secret-{source.name}")
    try:
        return pool.submit(source.fetch, section, home).result(timeout=budget)
    except concurrent.futures.TimeoutError:
        limit_key = f"secrets.{source.name}.timeout_seconds"
        return _Failed(f"fetch took longer than {budget:g}s ({limit_key})")
    except Exception as exc:
        log.warning("secret source '%s': fetch raised", source.name, exc_info=True)
        return _Failed(f"fetch raised {type(exc).__name__}")
    finally:
        pool.shutdown(wait=False)


@dataclass
class _Failed:
    error: str
    secrets: dict[str, str] = field(default_factory=dict)
