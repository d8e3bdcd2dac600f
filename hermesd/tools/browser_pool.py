"""The daemon's browsers: one per session, opened on first use, closed when not needed.

`BrowserPool.page` gives a session its `BrowserPage`, starting it the first time: from the
plugin browser provider ``browser.cloud_provider`` names (its ``create_session(task_id)``
returns the DevTools websocket URL), else the local Chromium in the tool sandbox
(`hermesd.tools.browser_session`). A browser is closed when its session is deleted
(`forget_session`), when the daemon stops (`close_all`), and after ``browser.inactivity_timeout``
seconds without a tool call (a reaper task). `unavailable` says why no browser can be had
(what ``hermesctl tools list`` shows). A provider's methods are plugin code: they run on
worker threads, never on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hermesd.tools.browser_session import BrowserPage, attach_remote, find_chromium, launch_local
from hermesd.tools.cdp import CdpError

if TYPE_CHECKING:
    from hermesd.sandbox.confine import Sandbox

log = logging.getLogger(__name__)

PROVIDER_TIMEOUT = 60.0  # seconds a provider's create_session/close_session may take
REAP_EVERY = 5.0  # seconds between looks for idle browsers
LOCAL = ("", "local")  # browser.cloud_provider values meaning the local Chromium


class BrowserPool:
    """Session id -> its open browser."""

    def __init__(
        self,
        sandbox: Sandbox,
        config: Callable[[], Any],
        providers: Callable[[], list[Any]],
        workspace: Callable[[str | None], Path],
    ) -> None:
        self.sandbox = sandbox
        self.config = config
        self.providers = providers  # the loaded plugins' browser providers
        self.workspace = workspace
        self._pages: dict[str, BrowserPage] = {}
        self._opening: dict[str, asyncio.Task[BrowserPage]] = {}
        self._reaper: asyncio.Task[None] | None = None

    # --- which browser ---------------------------------------------------------------------

    def provider(self) -> Any | str | None:
        """The selected plugin provider, None for the local Chromium, or why neither works."""
        wanted = str(self.config().get("browser.cloud_provider") or "").strip()
        if wanted.lower() in LOCAL:
            return None
        for candidate in self.providers():
            if getattr(candidate, "name", None) == wanted:
                return candidate
        return (
            f"browser.cloud_provider names '{wanted}', which no loaded plugin registered "
            "(hermesctl plugins list shows the browser providers)"
        )

    def unavailable(self) -> str | None:
        """Why the browser tools cannot run now, or None (any thread: it may ask a plugin)."""
        if self.sandbox.settings.network == "off":
            return "sandbox.network is off: a browser would have no network"
        chosen = self.provider()
        if isinstance(chosen, str):
            return chosen
        if chosen is not None:
            ready = getattr(chosen, "is_available", None) or chosen.is_configured
            return None if ready() else f"browser provider '{chosen.name}' is not configured"
        if self.sandbox.mechanism == "unavailable":
            return f"the tool sandbox cannot run here ({self.sandbox.reason})"
        if not self.sandbox.egress.running:
            return "the egress proxy is not running (see the daemon log)"
        if find_chromium(self._chromium_setting()) is None:
            return (
                "no Chromium found (install Debian's chromium package, set browser.chromium, "
                "or select a plugin's browser provider with browser.cloud_provider)"
            )
        return None

    def _chromium_setting(self) -> str:
        return str(self.config().get("browser.chromium") or "")

    # --- one session's browser -------------------------------------------------------------

    async def page(self, session_id: str) -> BrowserPage:
        """The session's browser, started now when it has none; `CdpError` when it cannot."""
        page = self._pages.get(session_id)
        if page is not None and page.alive:
            page.last_used = time.monotonic()
            return page
        if page is not None:  # it died (crashed, or the provider ended it)
            await self.forget_session(session_id)
        opening = self._opening.get(session_id)
        if opening is None:
            opening = asyncio.get_running_loop().create_task(self._open(session_id))
            self._opening[session_id] = opening
            opening.add_done_callback(lambda _t: self._opening.pop(session_id, None))
        page = await asyncio.shield(opening)
        self._pages[session_id] = page
        self._start_reaper()
        return page

    def current(self, session_id: str) -> BrowserPage | None:
        """The session's open browser, if it has one."""
        page = self._pages.get(session_id)
        return page if page is not None and page.alive else None

    async def _open(self, session_id: str) -> BrowserPage:
        why = await asyncio.to_thread(self.unavailable)
        if why is not None:
            raise CdpError(why)
        chosen = self.provider()
        if chosen is None or isinstance(chosen, str):
            chromium = find_chromium(self._chromium_setting())
            if chromium is None:
                raise CdpError("no Chromium found")
            workspace = await asyncio.to_thread(self.workspace, session_id or None)
            log.info("browser: starting %s for session %s", chromium, session_id or "-")
            return await launch_local(self.sandbox, chromium, workspace, session_id or None)
        return await self._open_remote(chosen, session_id)

    async def _open_remote(self, provider: Any, session_id: str) -> BrowserPage:
        name = str(getattr(provider, "name", "provider"))
        try:
            info = await asyncio.wait_for(
                asyncio.to_thread(provider.create_session, session_id or "default"),
                PROVIDER_TIMEOUT,
            )
        except TimeoutError:
            raise CdpError(f"browser provider '{name}' did not create a session in time") from None
        except Exception as exc:
            log.exception("browser provider %s: create_session failed", name)
            raise CdpError(f"browser provider '{name}' could not create a session: {exc}") from None
        url = info.get("cdp_url") if isinstance(info, dict) else None
        if not isinstance(url, str) or not url.startswith(("ws://", "wss://")):
            raise CdpError(f"browser provider '{name}' returned no ws:// cdp_url")
        remote_id = str(info.get("bb_session_id") or info.get("session_name") or "")

        async def closer() -> None:
            try:
                await asyncio.wait_for(
                    asyncio.to_thread(provider.close_session, remote_id), PROVIDER_TIMEOUT
                )
            except Exception:
                log.warning("browser provider %s: close_session failed", name, exc_info=True)
                with contextlib.suppress(Exception):
                    await asyncio.to_thread(provider.emergency_cleanup, remote_id)

        log.info("browser: session %s uses provider %s", session_id or "-", name)
        try:
            return await attach_remote(url, closer, PROVIDER_TIMEOUT)
        except BaseException:
            await closer()
            raise

    # --- ending ----------------------------------------------------------------------------

    async def forget_session(self, session_id: str) -> None:
        """Close the session's browser (a deleted session, an idle one, a dead one)."""
        opening = self._opening.pop(session_id, None)
        if opening is not None:  # deleted while its browser starts: the start is undone
            opening.cancel()
        page = self._pages.pop(session_id, None)
        if page is not None:
            old = page.use_pass(None)
            if old is not None:
                self.sandbox.egress.revoke(old.user)
            try:
                await page.close()
            except Exception:
                log.exception("browser: closing the browser of session %s failed", session_id)
            log.info("browser: closed the browser of session %s", session_id or "-")

    async def close_all(self) -> None:
        """Close every browser (the daemon stops)."""
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
            self._reaper = None
        for task in list(self._opening.values()):
            task.cancel()
        await asyncio.gather(*(self.forget_session(s) for s in list(self._pages)))

    def count(self) -> int:
        """How many browsers are open."""
        return len(self._pages)

    def _start_reaper(self) -> None:
        if self._reaper is None or self._reaper.done():
            self._reaper = asyncio.get_running_loop().create_task(self._reap())

    async def _reap(self) -> None:
        while self._pages:
            await asyncio.sleep(REAP_EVERY)
            idle = float(self.config().get("browser.inactivity_timeout") or 0)
            now = time.monotonic()
            for sid, page in list(self._pages.items()):
                if page.lock.locked():
                    continue
                if not page.alive or (idle > 0 and now - page.last_used > idle):
                    await self.forget_session(sid)
