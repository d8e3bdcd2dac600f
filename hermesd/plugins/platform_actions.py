"""``ctx.platform_actions``: a plugin's verbs on the messaging platforms the gateway runs.

Followed from upstream hermes-agent's ``hermes_cli/platform_actions.py`` (the commit is recorded
in docs/hermes-compat.md): ``add_reaction``, ``set_thread_title``,
``set_thread_lifecycle_emoji`` and ``send_status`` are coroutines; ``emit_status`` is the
fire-and-forget form of ``send_status``. Each call checks, in this order, that the owner granted
the plugin the capability (``gateway.platform_actions``, or ``gateway.plugin_status`` for status
lines; the older ``allow_*`` keys count too), that the arguments are non-empty strings, and that
the gateway is there, then hands the verb to the gateway's `PlatformActionHost` on the daemon's
loop, from whatever loop or thread the plugin awaits it on. Results are upstream's envelope
(``{"ok": True, ...}`` / ``{"ok": False, "error": <code>, "detail": ...}``); nothing raises but
cancellation. This module knows no adapter: the gateway does the work.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Protocol

log = logging.getLogger(__name__)

CAPABILITY = "gateway.platform_actions"
STATUS_CAPABILITY = "gateway.plugin_status"
WAIT = 30.0  # seconds a plugin waits for the daemon's loop to do one action


class PlatformActionHost(Protocol):
    """The gateway's side (``hermesd.gateway.actions.GatewayActions``)."""

    loop: asyncio.AbstractEventLoop

    async def perform(self, plugin_id: str, verb: str, args: dict[str, Any]) -> dict[str, Any]:
        """Do one checked verb; its envelope."""
        ...


def _where(platform: Any, chat_id: Any, **more: Any) -> dict[str, Any]:
    """A verb's arguments, by name (each is checked to be a non-empty string)."""
    return {"platform": platform, "chat_id": chat_id, **more}


def _fail(code: str, detail: str = "") -> dict[str, Any]:
    return {"ok": False, "error": code, **({"detail": detail} if detail else {})}


class PlatformActions:
    """One plugin's platform verbs."""

    def __init__(
        self,
        plugin_id: str,
        granted: Callable[[str], bool],
        host: Callable[[], PlatformActionHost | None],
    ) -> None:
        self._plugin_id = plugin_id
        self._granted = granted
        self._host = host

    async def add_reaction(
        self, platform: str, chat_id: str, message_id: str, emoji: str
    ) -> dict[str, Any]:
        """React to a message with an emoji."""
        return await self._run(
            "add_reaction", _where(platform, chat_id, message_id=message_id, emoji=emoji)
        )

    async def set_thread_title(
        self, platform: str, chat_id: str, thread_id: str, title: str
    ) -> dict[str, Any]:
        """Rename a thread or forum topic."""
        return await self._run(
            "set_thread_title", _where(platform, chat_id, thread_id=thread_id, title=title)
        )

    async def set_thread_lifecycle_emoji(
        self, platform: str, chat_id: str, thread_id: str, emoji: str
    ) -> dict[str, Any]:
        """Mark a thread's state with an emoji (Discord upstream; no hermesd platform has it)."""
        where = _where(platform, chat_id, thread_id=thread_id, emoji=emoji)
        return await self._run("set_thread_lifecycle_emoji", where)

    async def send_status(
        self,
        text: str,
        key: str,
        *,
        session_id: str | None = None,
        platform: str | None = None,
        chat_id: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Post this conversation's status line ``key`` (edited in place on later calls)."""
        args = self._status_args(text, key, session_id, platform, chat_id, metadata)
        if "error" in args:
            return self._audit("send_status", args)
        return await self._run("send_status", args, STATUS_CAPABILITY, ("text", "key"))

    def emit_status(self, text: str, key: str, **where: Any) -> dict[str, Any]:
        """`send_status` (same keywords) without waiting: ``{"accepted": bool, "error": ...}``
        says whether it was scheduled; the outcome goes to the log."""
        args = self._status_args(
            text,
            key,
            where.get("session_id"),
            where.get("platform"),
            where.get("chat_id"),
            where.get("metadata"),
        )
        refused = args if "error" in args else self._gate(args, STATUS_CAPABILITY, ("text", "key"))
        host = self._host()
        if refused is None and host is None:
            refused = _fail("gateway_unavailable", "hermesd's messaging gateway is not running")
        if refused is not None or host is None:
            self._audit("emit_status", refused or _fail("gateway_unavailable"))
            return {"accepted": False, "error": (refused or {}).get("error"), "detail": ""}
        coro = host.perform(self._plugin_id, "send_status", args)
        try:
            asyncio.run_coroutine_threadsafe(coro, host.loop)
        except RuntimeError as exc:  # the daemon is stopping
            coro.close()
            return {"accepted": False, "error": "gateway_unavailable", "detail": str(exc)}
        return {"accepted": True, "error": None}

    # --- the shared path ----------------------------------------------------------------

    def _status_args(
        self,
        text: Any,
        key: Any,
        session_id: Any,
        platform: Any,
        chat_id: Any,
        metadata: Any,
    ) -> dict[str, Any]:
        """Where a status line goes: the session named, else the conversation whose turn is
        running, else ``platform`` + ``chat_id``."""
        from hermesd.plugins import hostapi  # hostapi imports the plugin context

        args: dict[str, Any] = {"text": text, "key": key}
        if isinstance(metadata, dict):
            args["metadata"] = dict(metadata)
        current = hostapi.session_vars.get() or {}
        if session_id is not None and str(session_id).strip():
            args["session_id"] = str(session_id)
        elif current.get("HERMES_SESSION_PLATFORM") and current.get("HERMES_SESSION_CHAT_ID"):
            args["platform"] = current["HERMES_SESSION_PLATFORM"]
            args["chat_id"] = current["HERMES_SESSION_CHAT_ID"]
            args["thread_id"] = current.get("HERMES_SESSION_THREAD_ID") or None
        elif platform is not None and chat_id is not None:
            args["platform"], args["chat_id"] = str(platform), str(chat_id)
        else:
            return _fail(
                "invalid_argument",
                "no session_id, no current conversation and no platform+chat_id: "
                "refusing to route a status message",
            )
        return args

    def _gate(
        self, args: dict[str, Any], capability: str, required: tuple[str, ...]
    ) -> dict[str, Any] | None:
        """Why the call is refused before it reaches the gateway, or None."""
        try:
            granted = self._granted(capability)
        except Exception:  # an unreadable grant is no grant
            granted = False
        if not granted:
            return _fail(
                "capability_not_granted",
                f"plugin {self._plugin_id!r} lacks the {capability!r} capability (list it in "
                f"plugins.entries.{self._plugin_id}.granted_capabilities)",
            )
        for name in required:
            value = args.get(name)
            if not isinstance(value, str) or not value.strip():
                return _fail("invalid_argument", f"{name} must be a non-empty string")
        return None

    async def _run(
        self,
        verb: str,
        args: dict[str, Any],
        capability: str = CAPABILITY,
        required: tuple[str, ...] | None = None,
    ) -> dict[str, Any]:
        needed = required if required is not None else tuple(args)
        refused = self._gate(args, capability, needed)
        host = self._host()
        if refused is None and host is None:
            refused = _fail("gateway_unavailable", "hermesd's messaging gateway is not running")
        if refused is not None or host is None:
            return self._audit(verb, refused or _fail("gateway_unavailable"))
        coro = host.perform(self._plugin_id, verb, args)
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is host.loop:
            return await coro
        try:
            future = asyncio.run_coroutine_threadsafe(coro, host.loop)
        except RuntimeError as exc:  # the daemon's loop is closed
            coro.close()
            return self._audit(verb, _fail("gateway_unavailable", str(exc)))
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), WAIT)
        except TimeoutError:
            future.cancel()
            return self._audit(verb, _fail("action_failed", f"no answer in {WAIT:g}s"))

    def _audit(self, verb: str, result: dict[str, Any]) -> dict[str, Any]:
        """Log a refusal made here (the gateway logs the actions it does)."""
        log.info(
            "platform_action plugin=%s verb=%s ok=False error=%s",
            self._plugin_id,
            verb,
            result.get("error"),
        )
        return result
