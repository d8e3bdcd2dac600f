"""Backends plugins offer through the 0.19 provider registrars (docs/hermes-compat.md §4).

``ctx.register_web_search_provider`` and its ten siblings hand hermesd a backend for a feature
(web search, text-to-speech, a messaging platform, …). `ProviderRegistry` keeps each one as
kind -> name -> `Registration`, under the plugin that offered it, so the loader rolls it back
with the plugin's other registrations and the listing shows it. `KINDS` says, per kind, whether
hermesd uses such a backend and, when it does not, why — the listing repeats that reason, so a
plugin author sees "registered, not used by hermesd because …" instead of a failed load. This
module only stores; the features that consume a kind look their backend up here.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Kind:
    """One registrar: its ``ctx`` method, and why hermesd does not use it (empty: it does)."""

    method: str
    unused_because: str
    used_as: str = ""  # how hermesd uses it, when it does


#: every provider kind of the 0.19 plugin API, in the reference's order
KINDS: dict[str, Kind] = {
    "web_search": Kind(
        "register_web_search_provider",
        "",
        "web_search sends queries to it when web.search.provider names it (or none is set)",
    ),
    "browser": Kind(
        "register_browser_provider",
        "",
        "the browser tools drive the browser its create_session returns (cdp_url) when "
        "browser.cloud_provider names it",
    ),
    "image_gen": Kind(
        "register_image_gen_provider",
        "",
        "image_generate calls it when image_gen.provider names it",
    ),
    "video_gen": Kind(
        "register_video_gen_provider",
        "",
        "video_generate calls it when video_gen.provider names it (or it is the only one)",
    ),
    "tts": Kind("register_tts_provider", "", "text_to_speech calls it when tts.provider names it"),
    # the reference has no transcription tool: it transcribes users' voice messages
    "transcription": Kind(
        "register_transcription_provider",
        "",
        "the messaging gateway transcribes voice messages with it when stt.provider names it",
    ),
    "secret_source": Kind(
        "register_secret_source",
        "",
        "when secrets.<name>.enabled is set, its secrets fill the daemon's environment after "
        "plugins load and on each reload (names already set stay unless override_existing)",
    ),
    "dashboard_auth": Kind(
        "register_dashboard_auth_provider",
        "",
        "the HTTP door asks it (verify_token) about bearer tokens not in http.token_file, and "
        "the web page signs people in with it, when http.auth_provider names it",
    ),
    "platform": Kind(
        "register_platform",
        "",
        "the gateway runs its adapter when gateway.platforms.<name> is configured",
    ),
    "slack_action": Kind("register_slack_action_handler", "hermesd has no Slack adapter"),
    # post-0.19 (issue 32): listed once a plugin reaches for ctx.platform_actions
    "platform_actions": Kind(
        "platform_actions",
        "",
        "its verbs act through the gateway's running adapters when the owner granted "
        "gateway.platform_actions (gateway.plugin_status for status lines)",
    ),
    "auxiliary_task": Kind(
        "register_auxiliary_task",
        "",
        "ctx.llm.complete(task=<key>) takes the model and timeout of auxiliary.<key>",
    ),
}


@dataclass(frozen=True)
class Registration:
    """One backend a plugin registered."""

    kind: str
    name: str
    owner: str
    obj: Any
    detail: dict[str, Any]

    @property
    def status(self) -> str:
        """``in use: <how>`` or ``registered, not used by hermesd: <why>`` (the listing's words)."""
        kind = KINDS[self.kind]
        if kind.unused_because:
            return f"registered, not used by hermesd: {kind.unused_because}"
        return f"in use: {kind.used_as}"

    def as_dict(self) -> dict[str, Any]:
        """Plain data for ``plugins.list`` / ``plugins.info``."""
        return {"kind": self.kind, "name": self.name, "status": self.status}


class ProviderRegistry:
    """kind -> name -> `Registration`, shared by every plugin of the daemon."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # register() runs on loader worker threads
        self._by_kind: dict[str, dict[str, Registration]] = {kind: {} for kind in KINDS}

    def add(
        self, kind: str, name: str, owner: str, obj: Any, detail: dict[str, Any] | None = None
    ) -> Registration:
        """Keep ``obj`` as the ``kind`` backend ``name``; raises ValueError when another plugin
        already registered that name (the same plugin registering it again replaces it)."""
        with self._lock:
            taken = self._by_kind[kind].get(name)
            if taken is not None and taken.owner != owner:
                raise ValueError(f"{kind} '{name}' is already registered by plugin '{taken.owner}'")
            entry = Registration(kind, name, owner, obj, dict(detail or {}))
            self._by_kind[kind][name] = entry
            return entry

    def get(self, kind: str, name: str) -> Registration | None:
        """The ``kind`` backend called ``name``, if a loaded plugin registered it."""
        with self._lock:
            return self._by_kind[kind].get(name)

    def of_kind(self, kind: str) -> list[Registration]:
        """Every backend of ``kind``, in registration order."""
        with self._lock:
            return list(self._by_kind[kind].values())

    def drop_owner(self, owner: str) -> None:
        """Forget everything plugin ``owner`` registered (rollback, unload)."""
        with self._lock:
            for entries in self._by_kind.values():
                for name in [n for n, e in entries.items() if e.owner == owner]:
                    del entries[name]
