"""`GatewayService`: the gateway's place in the daemon's life, and ``gateway.*`` methods.

Starts after the sessions, commands and approvals (a chat needs them all), stops before them;
keeps the media folder pruned (``hermesd.gateway.media``) while it runs.
``gateway.status`` (each platform's state, chats, paired users, pairing requests waiting),
``gateway.platforms`` (what could be turned on) and ``gateway.pair`` (the owner admits the user
behind a pairing code) are declared in ``hermesd.rpc.methods.gateway``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from hermesd.gateway.base import MessageEvent, PlatformAdapter
from hermesd.gateway.core import Gateway
from hermesd.gateway.media import EVERY, prune
from hermesd.gateway.outbound import send_text
from hermesd.http.door import Door
from hermesd.rpc.connection import Call, Connection, Limits, Router
from hermesd.rpc.protocol import Codes, RpcError

log = logging.getLogger(__name__)


class GatewayService:
    """gateway.status|platforms|pair; adapters started and stopped with the daemon."""

    def __init__(
        self,
        gateway: Gateway,
        cfg: Any,
        limits: Limits,
        on_close: Callable[[Connection], None] | None = None,
        plugins_loaded: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """``plugins_loaded()`` returns once the plugins' first load ended (their platforms
        are registered by then)."""
        self.gateway = gateway
        self.plugins_loaded = plugins_loaded
        self._starting: asyncio.Task[None] | None = None
        self._reconfiguring: asyncio.Task[None] | None = None
        self._pruner: asyncio.Task[None] | None = None
        self.limits = limits
        self.on_close = on_close
        self.cfg = cfg
        gateway.reload(cfg)

    def bind(self, router: Router) -> None:
        self.gateway.door = Door(router, self.limits, self.on_close)
        router.bind("gateway.status", self.rpc_status)
        router.bind("gateway.platforms", self.rpc_platforms)
        router.bind("gateway.pair", self.rpc_pair)

    async def start(self) -> None:
        """Start the platforms in the background: the daemon serves meanwhile."""
        self._starting = asyncio.get_running_loop().create_task(self._start())

    async def _start(self) -> None:
        if self.plugins_loaded is not None:
            await self.plugins_loaded()
        gateway = self.gateway
        platforms = gateway.platforms
        platforms.configure(self.cfg.get("gateway.platforms"))
        for name, section in platforms.settings.items():
            gateway.users.configure(name, section)
        await asyncio.to_thread(gateway.users.load)
        await asyncio.to_thread(gateway.sessions.load)
        await asyncio.to_thread(gateway.event_hooks.load)
        self._pruner = asyncio.get_running_loop().create_task(self._prune_media())
        await platforms.start(self._prepare)
        await self.gateway.offer_commands()
        await gateway.event_hooks.emit("gateway:startup", {"platforms": sorted(platforms.adapters)})

    async def _prune_media(self) -> None:
        """Keep the media folder within ``gateway.media_max_*``, now and every hour."""
        while True:
            max_age = float(self.cfg.get("gateway.media_max_age_hours")) * 3600
            max_bytes = int(float(self.cfg.get("gateway.media_max_mb")) * 1024 * 1024)
            try:
                await asyncio.to_thread(prune, self.gateway.media_dir, max_age, max_bytes)
            except Exception:
                log.exception("gateway: pruning %s failed", self.gateway.media_dir)
            await asyncio.sleep(EVERY)

    def _prepare(self, adapter: PlatformAdapter) -> None:
        async def on_message(event: MessageEvent) -> str | None:
            reply = await self.gateway.dispatch(adapter, event)
            if reply:  # sent here, split at the platform's length, not by the adapter
                thread = event.source.thread_id
                metadata = {"thread_id": thread} if thread else None
                await send_text(adapter, event.source.chat_id, reply, metadata)
            return None

        async def on_button(source: Any, data: str) -> str | None:
            return await self.gateway.press(adapter, source, data)

        async def on_event(event_type: str, payload: dict[str, Any]) -> None:
            await self.gateway.hooks.invoke(
                "gateway_platform_event",
                platform=adapter.platform.value,
                event_type=event_type,
                payload=payload,
            )

        adapter.media_dir = self.gateway.media_dir / adapter.platform.value
        adapter.set_message_handler(on_message)
        adapter.set_button_handler(on_button)
        platform = adapter.platform.value
        adapter.set_authorization_check(
            lambda user_id: self.gateway.users.identity(platform, user_id) is not None
        )
        adapter.set_pairing_check(lambda: self.gateway.unauthorized_dm == "pair")
        adapter.set_platform_event_handler(on_event)

    async def stop(self) -> None:
        if self._pruner is not None:
            self._pruner.cancel()
        for task in (self._reconfiguring, self._starting):
            if task is not None:
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
        await self.gateway.platforms.stop()
        for chat in list(self.gateway.chats.values()):
            chat.close()

    def status(self) -> dict[str, Any]:
        platforms = self.gateway.platforms
        return {"gateway": {n: platforms.state_of(n) for n in platforms.states}}

    def reload(self, cfg: Any) -> None:
        """New ``gateway.*`` settings; the platforms follow in the background (`_reconfigure`)."""
        self.cfg = cfg
        self.gateway.reload(cfg)
        if self._starting is None:  # not started yet: the start reads the new settings
            return
        previous = self._reconfiguring
        self._reconfiguring = asyncio.get_running_loop().create_task(self._reconfigure(previous))

    async def _reconfigure(self, previous: asyncio.Task[None] | None) -> None:
        """Apply ``gateway.platforms`` after the start (and any earlier reload) finished:
        allow-lists at once, adapters stopped and started again where needed, chats on a
        stopped adapter closed (their next message opens one on the new adapter)."""
        for earlier in (self._starting, previous):
            if earlier is not None:
                with contextlib.suppress(BaseException):
                    await earlier
        gateway = self.gateway
        raw = self.cfg.get("gateway.platforms")
        sections = raw if isinstance(raw, dict) else {}
        for name in set(gateway.platforms.settings) | set(sections):
            section = sections.get(name)
            gateway.users.configure(str(name), section if isinstance(section, dict) else {})
        try:
            restarted = await gateway.platforms.apply(raw, self._prepare)
        except Exception:
            log.exception("gateway: applying gateway.platforms failed")
            return
        running = list(gateway.platforms.adapters.values())
        for index, chat in list(gateway.chats.items()):
            if chat.adapter not in running:
                chat.close()
                gateway.chats.pop(index, None)
        if restarted:
            log.info("gateway: started again after the reload: %s", ", ".join(restarted))
            await gateway.offer_commands()

    def rpc_status(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        gateway = self.gateway
        return {
            "platforms": [
                {"name": name, "state": gateway.platforms.state_of(name)}
                for name in sorted({*gateway.platforms.settings, *gateway.platforms.states})
            ],
            "chats": len(gateway.sessions.ids),
            **gateway.users.summary(),
        }

    def rpc_platforms(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        return {"platforms": self.gateway.platforms.listing()}

    async def rpc_pair(self, call: Call, p: dict[str, Any]) -> dict[str, Any]:
        try:
            request = await asyncio.to_thread(self.gateway.users.pair, str(p["code"]))
        except KeyError:
            raise RpcError(
                Codes.NOT_FOUND,
                f"no pairing request with code {p['code']} (wrong, used, or expired after an hour)",
                {"code": p["code"]},
            ) from None
        adapter = self.gateway.platforms.adapters.get(request.platform)
        if adapter is not None:
            try:
                await adapter.send(request.user_id, "You are paired: write to me any time.")
            except Exception as exc:  # admitted all the same
                log.warning("gateway: could not tell the paired user: %s", exc)
        return {
            "platform": request.platform,
            "user_id": request.user_id,
            "user_name": request.user_name,
        }
