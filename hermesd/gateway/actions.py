"""`GatewayActions`: what ``ctx.platform_actions`` does on the gateway's adapters.

The plugin side (``hermesd.plugins.ctx_newer.PlatformActions``) checks the plugin's capability
and the arguments, then asks `GatewayActions.perform` on the daemon's loop. Here the platform's
running adapter is found and the verb done with it: ``add_reaction`` and ``set_thread_title``
where the adapter lists them in ``supported_actions`` (Telegram both, Matrix reactions),
``set_thread_lifecycle_emoji`` nowhere (upstream has it for Discord only), and ``send_status``:
a status line for a conversation, posted once per key and edited in place after that (identical
text is skipped). Every result is upstream's envelope: ``{"ok": True, "action": <verb>, ...}``
or ``{"ok": False, "error": <code>, "detail": <sentence>}``; nothing raises. Every action is
logged (plugin, verb, platform, outcome).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from typing import Any

from hermesd.gateway.base import PlatformAdapter, SendResult
from hermesd.gateway.core import Gateway

log = logging.getLogger(__name__)

MAX_STATUS_LINES = 256  # status lines remembered for editing (oldest forgotten first)


def fail(code: str, detail: str = "") -> dict[str, Any]:
    """Upstream's failure envelope."""
    return {"ok": False, "error": code, **({"detail": detail} if detail else {})}


class GatewayActions:
    """Platform verbs for plugins, on the running adapters."""

    def __init__(self, gateway: Gateway, loop: asyncio.AbstractEventLoop) -> None:
        self.gateway = gateway
        self.loop = loop  # the daemon's: adapters live on it
        # (plugin, platform, chat, thread, key) -> (message id, digest of its text)
        self._status: dict[tuple[str, ...], tuple[str, str]] = {}

    async def perform(self, plugin_id: str, verb: str, args: dict[str, Any]) -> dict[str, Any]:
        """Do ``verb`` with ``args`` (checked by the caller) for plugin ``plugin_id``."""
        platform = str(args.get("platform") or "")
        try:
            if verb == "send_status":
                result = await self._send_status(plugin_id, args)
                platform = str(args.get("platform") or platform)
            else:
                result = await self._verb(verb, args)
        except Exception as exc:  # an adapter's surprise is the plugin's failed action
            log.exception("platform_action %s failed", verb)
            result = fail("action_failed", str(exc)[:512])
        log.info(
            "platform_action plugin=%s verb=%s platform=%s ok=%s%s",
            plugin_id,
            verb,
            platform,
            result.get("ok"),
            "" if result.get("ok") else f" error={result.get('error')}",
        )
        return result

    def _adapter(self, platform: str) -> tuple[PlatformAdapter | None, dict[str, Any] | None]:
        name = platform.strip().lower()
        adapter = self.gateway.platforms.adapters.get(name)
        if adapter is None:
            known = name in self.gateway.platforms.states or name in self.gateway.platforms.settings
            if not known:
                return None, fail("unknown_platform", f"unknown platform {platform!r}")
            return None, fail("adapter_not_registered", f"no {name} adapter is running")
        if not adapter.is_connected:
            return None, fail("adapter_disconnected", f"the {name} adapter is not connected")
        return adapter, None

    async def _verb(self, verb: str, args: dict[str, Any]) -> dict[str, Any]:
        adapter, error = self._adapter(str(args["platform"]))
        if adapter is None:
            return error or fail("gateway_unavailable")
        if verb not in adapter.supported_actions:
            return fail(
                "unsupported_platform_action",
                f"{verb} is not implemented for {adapter.platform.value}",
            )
        if verb == "add_reaction":
            sent = await adapter.add_reaction(args["chat_id"], args["message_id"], args["emoji"])
        else:
            sent = await adapter.set_thread_title(args["chat_id"], args["thread_id"], args["title"])
        return _outcome(verb, sent)

    async def _send_status(self, plugin_id: str, args: dict[str, Any]) -> dict[str, Any]:
        session_id = args.get("session_id")
        if session_id:  # an explicit session: its chat, or a refusal (never another chat)
            source = self.gateway.origins.get(str(session_id))
            if source is None:
                return fail("invalid_argument", f"unknown session_id {session_id!r}")
            args.update(
                platform=source.platform.value, chat_id=source.chat_id, thread_id=source.thread_id
            )
        if not args.get("platform") or not args.get("chat_id"):
            return fail(
                "invalid_argument",
                "no session_id, no current conversation and no platform+chat_id: "
                "refusing to route a status message",
            )
        adapter, error = self._adapter(str(args["platform"]))
        if adapter is None:
            return error or fail("gateway_unavailable")
        chat, thread, text = str(args["chat_id"]), str(args.get("thread_id") or ""), args["text"]
        where = (
            plugin_id,
            adapter.platform.value,
            chat,
            thread,
            f"plugin:{plugin_id}:{args['key']}",
        )
        digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
        shown = self._status.get(where)
        if shown is not None and shown[1] == digest:
            return {"ok": True, "action": "send_status", "mode": "skipped"}
        metadata = dict(args.get("metadata") or {}) or None
        if thread:
            metadata = {"thread_id": thread, **(metadata or {})}
        mode = "send"
        sent = SendResult(False)
        if shown is not None:
            sent = await adapter.edit_message(chat, shown[0], text)
            mode = "edit"
        if not sent.success:  # a first line, or an edit the platform refused: a new message
            sent = await adapter.send(chat, text, metadata=metadata)
            mode = "send"
        if not sent.success:
            return fail("action_failed", str(sent.error or "status send failed")[:512])
        if len(self._status) >= MAX_STATUS_LINES:
            self._status.pop(next(iter(self._status)))
        self._status[where] = (str(sent.message_id or (shown or ("", ""))[0]), digest)
        return {"ok": True, "action": "send_status", "mode": mode, "message_id": sent.message_id}


def _outcome(verb: str, sent: SendResult) -> dict[str, Any]:
    if sent.success:
        return {"ok": True, "action": verb}
    return fail("action_failed", str(sent.error or f"{verb} failed")[:512])
