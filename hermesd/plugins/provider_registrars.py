"""The eleven backend registrars of the hermes-agent 0.19 ``ctx`` (docs/hermes-compat.md §4).

`ProviderRegistrars` is a part of `hermesd.plugins.registrar.PluginContext`: each method keeps the
reference's name and parameters (plugins call them by keyword) and stores what it is given in the
daemon's `ProviderRegistry` under the plugin's key, noting it in the plugin's record for the
listing. A backend without a usable ``name`` is refused with a warning, as the reference refuses
one of the wrong class; the plugin keeps loading. Bad arguments the reference raises on (an empty
Slack ``action_id``, a reserved auxiliary task key) raise ValueError here too.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from hermesd.plugins import secret_sources
from hermesd.plugins.manifest import PluginRecord
from hermesd.plugins.providers import KINDS

if TYPE_CHECKING:
    from hermesd.plugins.registrar import PluginServices

log = logging.getLogger(__name__)

#: auxiliary task keys the reference keeps for its own tasks
RESERVED_AUXILIARY_TASKS = frozenset(
    {
        "vision",
        "compression",
        "web_extract",
        "approval",
        "mcp",
        "title_generation",
        "skills_hub",
        "curator",
    }
)
_TASK_KEY = re.compile(r"^[A-Za-z0-9_]+$")
#: routing fields every auxiliary task has, before the plugin's defaults and the owner's config
_AUX_BASE: dict[str, Any] = {
    "provider": "auto",
    "model": "",
    "base_url": "",
    "api_key": "",
    "timeout": 60,
    "extra_body": {},
}


def _backend_name(obj: Any) -> str | None:
    """``obj.name`` when it is a non-blank string (a provider's ``name`` may be a property)."""
    try:
        name = getattr(obj, "name", None)
    except Exception:
        return None
    return name.strip() if isinstance(name, str) and name.strip() else None


class ProviderRegistrars:
    """``register_*_provider`` and friends; mixed into `PluginContext`."""

    _record: PluginRecord
    _services: PluginServices
    _lock: threading.Lock
    plugin_name: str
    _refuse_late: Callable[[str, str], bool]  # PluginContext's

    def _keep(self, kind: str, name: str, obj: Any, detail: dict[str, Any] | None = None) -> None:
        """Store one backend; a name another plugin took is refused with a warning."""
        with self._lock:
            if self._refuse_late(kind.replace("_", " "), name):
                return
            try:
                entry = self._services.providers.add(kind, name, self.plugin_name, obj, detail)
            except ValueError as exc:
                log.warning("Plugin '%s': %s; ignored", self.plugin_name, exc)
                return
            listed = entry.as_dict()
            self._record.providers[:] = [
                p for p in self._record.providers if (p["kind"], p["name"]) != (kind, name)
            ]
            self._record.providers.append(listed)
        log.info("Plugin '%s' registered %s '%s': %s", self.plugin_name, kind, name, entry.status)

    def _keep_backend(self, kind: str, obj: Any) -> None:
        name = _backend_name(obj)
        if name is None:
            log.warning(
                "Plugin '%s' called %s with an object that has no name; ignored",
                self.plugin_name,
                KINDS[kind].method,
            )
            return
        self._keep(kind, name, obj)

    def register_web_search_provider(self, provider: Any) -> None:
        """Offer a web search/extract backend (``web.search_backend`` names it)."""
        self._keep_backend("web_search", provider)

    def register_browser_provider(self, provider: Any) -> None:
        """Offer a cloud browser backend (``browser.cloud_provider`` names it)."""
        self._keep_backend("browser", provider)

    def register_image_gen_provider(self, provider: Any) -> None:
        """Offer an image generation backend (``image_gen.provider`` names it)."""
        self._keep_backend("image_gen", provider)

    def register_video_gen_provider(self, provider: Any) -> None:
        """Offer a video generation backend (``video_gen.provider`` names it)."""
        self._keep_backend("video_gen", provider)

    def register_tts_provider(self, provider: Any) -> None:
        """Offer a text-to-speech backend (``tts.provider`` names it)."""
        self._keep_backend("tts", provider)

    def register_transcription_provider(self, provider: Any) -> None:
        """Offer a speech-to-text backend (``stt.provider`` names it)."""
        self._keep_backend("transcription", provider)

    def register_secret_source(self, source: Any) -> None:
        """Offer an external secret manager (``secrets.<name>`` configures it); a source the
        reference would refuse (bad name, other API version or shape, a taken scheme) is
        refused with a warning."""
        schemes = {
            str(getattr(e.obj, "scheme", "")): e.name
            for e in self._services.providers.of_kind("secret_source")
            if getattr(e.obj, "scheme", None)
        }
        why = secret_sources.refusal(source, schemes)
        if why is not None:
            log.warning("Plugin '%s': %s; ignored", self.plugin_name, why)
            return
        self._keep_backend("secret_source", source)

    def register_dashboard_auth_provider(self, provider: Any) -> None:
        """Offer a login provider for the web dashboard."""
        self._keep_backend("dashboard_auth", provider)

    def register_platform(
        self,
        name: str,
        label: str,
        adapter_factory: Callable[..., Any],
        check_fn: Callable[..., Any],
        validate_config: Callable[..., Any] | None = None,
        required_env: list[str] | None = None,
        install_hint: str = "",
        **entry_kwargs: Any,
    ) -> None:
        """Offer a messaging-gateway platform adapter called ``name``."""
        detail = {
            "label": label,
            "adapter_factory": adapter_factory,
            "check_fn": check_fn,
            "validate_config": validate_config,
            "required_env": list(required_env or []),
            "install_hint": install_hint,
            **entry_kwargs,
        }
        self._keep("platform", str(name), adapter_factory, detail)

    def register_slack_action_handler(self, action_id: Any, callback: Callable[..., Any]) -> None:
        """Offer a Slack Block Kit action handler; raises ValueError for a non-callable
        ``callback`` or an empty ``action_id``."""
        if not callable(callback):
            raise ValueError(
                f"Plugin '{self.plugin_name}': Slack action handler callback is not callable"
            )
        if action_id is None or (isinstance(action_id, str) and not action_id.strip()):
            raise ValueError(f"Plugin '{self.plugin_name}': Slack action handler needs action_id")
        # a pattern or a constraint dict is named by its text, which is what a person reads
        name = action_id if isinstance(action_id, str) else str(getattr(action_id, "pattern", ""))
        self._keep("slack_action", name or repr(action_id), callback, {"action_id": action_id})

    def register_auxiliary_task(
        self,
        key: str,
        *,
        display_name: str,
        description: str,
        defaults: dict[str, Any] | None = None,
    ) -> None:
        """Declare the side job ``key``: ``ctx.llm.complete(task=key)`` then takes its model
        from ``auxiliary.<key>`` in config.yaml. Raises ValueError for a bad, reserved or taken
        key."""
        if not isinstance(key, str) or not _TASK_KEY.match(key):
            raise ValueError(
                f"Plugin '{self.plugin_name}': auxiliary task key {key!r} must be letters, "
                "digits and '_'"
            )
        if key in RESERVED_AUXILIARY_TASKS:
            raise ValueError(
                f"Plugin '{self.plugin_name}' cannot register auxiliary task '{key}': the key is "
                f"reserved for a built-in task; use e.g. '{self.plugin_name}_{key}'"
            )
        taken = self._services.providers.get("auxiliary_task", key)
        if taken is not None and taken.owner != self.plugin_name:
            raise ValueError(
                f"Plugin '{self.plugin_name}' cannot register auxiliary task '{key}': plugin "
                f"'{taken.owner}' already did"
            )
        detail = {
            "display_name": display_name,
            "description": description,
            "defaults": {**_AUX_BASE, **(defaults or {})},
        }
        self._keep("auxiliary_task", key, None, detail)
