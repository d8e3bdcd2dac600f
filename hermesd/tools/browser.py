"""The browser tools (toolset ``browser``): the reference's ten, over the Chrome DevTools
Protocol.

Each handler takes the session's browser from `hermesd.tools.browser_pool.BrowserPool` (started
on the first call), gives it this call's egress pass (so hosts it reaches are asked about in
this call's name: `BrowserPage.use_pass`), runs a few CDP commands and answers the reference's
result shape (``{success, ...}`` or ``{success: false, error}``). ``browser_navigate`` decides
the URL's host under the egress policy first, as ``web_extract`` does, so a refusal is a clear
error. What comes from the page (snapshots, titles, console text, image lists, evaluated values,
the vision model's reading of a screenshot) reaches the model inside `hermesd.untrusted.mark`'s
marker. The tools are listed only when a browser can be had (`BrowserPool.unavailable` says why
not).
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hermesd import redact, untrusted
from hermesd.store.images import ImageError, checked
from hermesd.tools.browser_pool import BrowserPool
from hermesd.tools.browser_schemas import SCHEMAS
from hermesd.tools.browser_session import BrowserPage
from hermesd.tools.browser_snapshot import render
from hermesd.tools.cdp import CdpError
from hermesd.tools.checks import available_unless
from hermesd.tools.registry import BUILTIN
from hermesd.tools.web_fetch import FetchError, check_url

if TYPE_CHECKING:
    from hermesd.tools.registry import ToolRegistry
    from hermesd.tools.vision import VisionTool

log = logging.getLogger(__name__)

TOOLSET = "browser"
SNAPSHOT_LIMIT = 15000  # characters of a snapshot sent back (the rest is cut, said so)
SCROLL_PIXELS = 700
EMOJI = {
    "browser_navigate": "🌐",
    "browser_snapshot": "📸",
    "browser_click": "👆",
    "browser_type": "⌨️",
    "browser_scroll": "📜",
    "browser_back": "◀️",
    "browser_press": "⌨️",
    "browser_get_images": "🖼️",
    "browser_vision": "👁️",
    "browser_console": "🖥️",
}
#: key name -> (code, Windows virtual key code, text it types)
KEYS: dict[str, tuple[str, int, str]] = {
    "Enter": ("Enter", 13, "\r"),
    "Tab": ("Tab", 9, ""),
    "Escape": ("Escape", 27, ""),
    "Backspace": ("Backspace", 8, ""),
    "Delete": ("Delete", 46, ""),
    "Space": ("Space", 32, " "),
    "ArrowUp": ("ArrowUp", 38, ""),
    "ArrowDown": ("ArrowDown", 40, ""),
    "ArrowLeft": ("ArrowLeft", 37, ""),
    "ArrowRight": ("ArrowRight", 39, ""),
    "Home": ("Home", 36, ""),
    "End": ("End", 35, ""),
    "PageUp": ("PageUp", 33, ""),
    "PageDown": ("PageDown", 34, ""),
}
IMAGES_JS = (
    "JSON.stringify([...document.images].map(i => ({src: i.currentSrc || i.src, alt: i.alt"
    " || '', width: i.naturalWidth, height: i.naturalHeight})).filter(i => i.src &&"
    " !i.src.startsWith('data:')))"
)
Handler = Callable[[BrowserPage, dict[str, Any], str], Awaitable[dict[str, Any]]]


class BrowserFailure(Exception):
    """A call that cannot go on; the message is the result's ``error``."""


def _marked(result: dict[str, Any], source: str) -> str:
    return untrusted.mark(json.dumps(result, ensure_ascii=False, indent=2), source)


def _fitted(result: dict[str, Any], budget: int) -> dict[str, Any]:
    """``result`` made to fit ``budget`` characters as JSON (the registry's clip would cut the
    marker off): the oldest entries of its lists go first, then an evaluated value is cut."""
    lists = [k for k in ("console_messages", "js_errors", "images") if result.get(k)]
    size = len(json.dumps(result, ensure_ascii=False, indent=2))
    while size > budget and any(result[k] for k in lists):
        longest = max(lists, key=lambda k: len(result[k]))
        del result[longest][: max(1, len(result[longest]) // 4)]
        result["truncated"] = "the oldest entries were left out to fit the result"
        size = len(json.dumps(result, ensure_ascii=False, indent=2))
    if size > budget and "result" in result:
        text = json.dumps(result["result"], ensure_ascii=False)
        result["result"] = text[: max(budget // 2, 200)] + " [cut: the value was longer]"
    return result


def _string(args: dict[str, Any], key: str) -> str:
    value = args.get(key)
    if not isinstance(value, str) or not value.strip():
        raise BrowserFailure(f"'{key}' must be a non-empty string")
    return value


class BrowserTools:
    """The handlers, over a `BrowserPool`; ``vision`` reads screenshots."""

    def __init__(
        self,
        pool: BrowserPool,
        vision: VisionTool | None,
        home: Path,
        budget: Callable[[], int] = lambda: 100_000,
    ) -> None:
        self.pool = pool
        self.budget = budget  # characters of a result the registry lets through
        self.looker = vision
        self.screenshots = home / "cache" / "screenshots"

    def timeout(self) -> float:
        """``browser.command_timeout``, read at each command."""
        return float(self.pool.config().get("browser.command_timeout") or 30)

    async def call(self, name: str, args: Any, session_id: str) -> str:
        """Run the tool ``name`` on the session's browser; always a JSON text."""
        handler: Handler = getattr(self, name.removeprefix("browser_"))
        if not isinstance(args, dict):
            args = {}
        egress = self.pool.sandbox.egress
        proxy = None
        try:
            page = await self.pool.page(session_id)
            async with page.lock:
                page.last_used = time.monotonic()
                if egress.running and self.pool.sandbox.settings.network != "off":
                    proxy = egress.issue(session_id or None, ask=True)  # this call's context
                    old = page.use_pass(proxy)
                    if old is not None:
                        egress.revoke(old.user)
                result = await handler(page, args, session_id)
                page.last_used = time.monotonic()
        except (BrowserFailure, CdpError, FetchError) as exc:
            return json.dumps({"success": False, "error": str(exc)}, ensure_ascii=False)
        if result.pop("_untrusted", False):
            return _marked(_fitted(result, self.budget() - 1000), name)
        return json.dumps(result, ensure_ascii=False)

    # --- navigation ----------------------------------------------------------------------

    async def navigate(self, page: BrowserPage, args: dict[str, Any], sid: str) -> dict[str, Any]:
        url = _string(args, "url").strip()
        if redact.redact(url) != url:
            raise BrowserFailure("the URL contains what looks like a secret; it is not opened")
        host, port = check_url(url)
        proxy = page.current_pass
        if proxy is not None:  # decided now, in this call's name, as web_extract does
            refusal = await self.pool.sandbox.egress.admit(proxy.user, host, port)
            if refusal is not None:
                raise BrowserFailure(refusal)
        opened = await page.command("Page.navigate", {"url": url}, self.timeout())
        if opened.get("errorText"):
            raise BrowserFailure(f"could not open {url}: {opened['errorText']}")
        loader = opened.get("loaderId")
        if loader:  # a new document (not a jump within this one): wait for its load event
            try:
                await asyncio.wait_for(page.load_of(str(loader)).wait(), self.timeout())
            except TimeoutError:
                log.info("browser: %s did not finish loading in time; going on", url[:200])
        await asyncio.sleep(0.1)  # the page's first scripts
        result = await self._location(page)
        text, refs = await self._snapshot_text(page, full=False)
        return result | {"snapshot": text, "element_count": len(refs), "_untrusted": True}

    async def _location(self, page: BrowserPage) -> dict[str, Any]:
        said = await self._evaluate(page, "JSON.stringify([location.href, document.title])")
        href, title = json.loads(said) if isinstance(said, str) else ("", "")
        return {"success": True, "url": href, "title": title}

    async def back(self, page: BrowserPage, args: dict[str, Any], sid: str) -> dict[str, Any]:
        history = await page.command("Page.getNavigationHistory")
        index = int(history.get("currentIndex", 0))
        if index <= 0:
            raise BrowserFailure("there is no previous page in this browser's history")
        entry = history["entries"][index - 1]
        await page.command("Page.navigateToHistoryEntry", {"entryId": entry["id"]})
        await page.settle(self.timeout())
        location = await self._location(page)
        return {"success": True, "url": location["url"], "_untrusted": True}

    # --- reading -------------------------------------------------------------------------

    async def _snapshot_text(self, page: BrowserPage, full: bool) -> tuple[str, dict[str, int]]:
        tree = await page.command("Accessibility.getFullAXTree", timeout=self.timeout())
        # a big page's tree has tens of thousands of nodes: rendered off the event loop
        text, refs = await asyncio.to_thread(render, tree.get("nodes") or [], full)
        page.refs = refs
        if len(text) > SNAPSHOT_LIMIT:
            text = text[:SNAPSHOT_LIMIT] + f"\n[snapshot cut at {SNAPSHOT_LIMIT} characters]"
        return text, refs

    async def snapshot(self, page: BrowserPage, args: dict[str, Any], sid: str) -> dict[str, Any]:
        text, refs = await self._snapshot_text(page, full=args.get("full") is True)
        result = {"success": True, "snapshot": text, "element_count": len(refs)}
        return result | {"_untrusted": True}

    async def console(self, page: BrowserPage, args: dict[str, Any], sid: str) -> dict[str, Any]:
        expression = args.get("expression")
        if expression is not None:
            value = await self._evaluate(page, _string(args, "expression"), by_value=True)
            kind = type(value).__name__
            return {"success": True, "result": value, "result_type": kind, "_untrusted": True}
        messages = [m | {"source": "console"} for m in page.console]
        errors = [e | {"source": "exception"} for e in page.errors]
        if args.get("clear") is True:
            page.console.clear()
            page.errors.clear()
        return {
            "success": True,
            "console_messages": messages,
            "js_errors": errors,
            "total_messages": len(messages),
            "total_errors": len(errors),
            "_untrusted": True,
        }

    async def get_images(self, page: BrowserPage, args: dict[str, Any], sid: str) -> dict[str, Any]:
        said = await self._evaluate(page, IMAGES_JS)
        images = json.loads(said) if isinstance(said, str) else []
        return {"success": True, "images": images, "count": len(images), "_untrusted": True}

    async def _evaluate(self, page: BrowserPage, expression: str, by_value: bool = True) -> Any:
        answer = await page.command(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": by_value, "awaitPromise": True},
            self.timeout(),
        )
        if answer.get("exceptionDetails"):
            details = answer["exceptionDetails"]
            thrown = (details.get("exception") or {}).get("description") or details.get("text")
            raise BrowserFailure(f"the expression threw: {str(thrown)[:500]}")
        return (answer.get("result") or {}).get("value")

    # --- acting --------------------------------------------------------------------------

    def _node(self, page: BrowserPage, args: dict[str, Any]) -> int:
        ref = _string(args, "ref").strip().lstrip("@")
        if ref.startswith("ref="):
            ref = ref[4:]
        node = page.refs.get(ref)
        if node is None:
            known = f"@e1 to @e{len(page.refs)}" if page.refs else "none: take a snapshot first"
            raise BrowserFailure(
                f"there is no element @{ref} in the latest snapshot (refs: {known}); "
                "call browser_snapshot to get current refs"
            )
        return node

    async def click(self, page: BrowserPage, args: dict[str, Any], sid: str) -> dict[str, Any]:
        node = self._node(page, args)
        ref = str(args["ref"])
        await page.command("DOM.scrollIntoViewIfNeeded", {"backendNodeId": node})
        try:
            box = await page.command("DOM.getBoxModel", {"backendNodeId": node})
        except CdpError:
            raise BrowserFailure(f"{ref} is not visible on the page (it has no box)") from None
        quad = box["model"]["content"]
        x, y = sum(quad[0::2]) / 4, sum(quad[1::2]) / 4
        for kind in ("mousePressed", "mouseReleased"):
            await page.command(
                "Input.dispatchMouseEvent",
                {"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1},
            )
        await page.settle(self.timeout())  # a click that opens a page: its load
        return {"success": True, "clicked": ref}

    async def type(self, page: BrowserPage, args: dict[str, Any], sid: str) -> dict[str, Any]:
        node = self._node(page, args)
        text = args.get("text")
        if not isinstance(text, str):
            raise BrowserFailure("'text' must be a string")
        await page.command("DOM.focus", {"backendNodeId": node})
        resolved = await page.command("DOM.resolveNode", {"backendNodeId": node})
        clear = (
            "function() { if ('value' in this) { this.value = ''; } else { this.textContent ="
            " ''; } this.dispatchEvent(new Event('input', {bubbles: true})); }"
        )
        await page.command(
            "Runtime.callFunctionOn",
            {"objectId": resolved["object"]["objectId"], "functionDeclaration": clear},
        )
        await page.command("Input.insertText", {"text": text})
        return {"success": True, "typed": redact.redact(text), "element": str(args["ref"])}

    async def press(self, page: BrowserPage, args: dict[str, Any], sid: str) -> dict[str, Any]:
        key = _string(args, "key")
        if key in KEYS:
            code, virtual, text = KEYS[key]
        elif len(key) == 1:
            code, virtual, text = "", ord(key.upper()), key
        else:
            raise BrowserFailure(f"unknown key {key!r}: use e.g. Enter, Tab, Escape, ArrowDown")
        event = {"key": key, "code": code, "windowsVirtualKeyCode": virtual}
        down = event | ({"type": "keyDown", "text": text} if text else {"type": "rawKeyDown"})
        await page.command("Input.dispatchKeyEvent", down)
        await page.command("Input.dispatchKeyEvent", event | {"type": "keyUp"})
        await page.settle(self.timeout())
        return {"success": True, "pressed": key}

    async def scroll(self, page: BrowserPage, args: dict[str, Any], sid: str) -> dict[str, Any]:
        direction = args.get("direction")
        if direction not in ("up", "down"):
            raise BrowserFailure(f"Invalid direction {direction!r}. Use 'up' or 'down'.")
        pixels = SCROLL_PIXELS if direction == "down" else -SCROLL_PIXELS
        await self._evaluate(page, f"window.scrollBy(0, {pixels})")
        return {"success": True, "scrolled": direction}

    async def vision(self, page: BrowserPage, args: dict[str, Any], sid: str) -> dict[str, Any]:
        question = _string(args, "question")
        if self.looker is None:
            raise BrowserFailure("no vision model path is set up in this daemon")
        shot = await page.command("Page.captureScreenshot", {"format": "png"}, self.timeout())
        path = self.screenshots / f"browser_screenshot_{uuid.uuid4().hex}.png"
        data = await asyncio.to_thread(_save, path, str(shot.get("data") or ""))
        try:
            image = checked(data, "the screenshot", len(data) + 1)
            analysis = await self.looker.analyse(image, question, sid)
        except ImageError as exc:
            raise BrowserFailure(str(exc)) from None
        except Exception as exc:
            log.warning("browser_vision for session %s failed", sid or "-", exc_info=True)
            raise BrowserFailure(f"Error during vision analysis: {exc}") from None
        analysis = analysis.strip() or "Vision analysis returned no content."
        result = {"success": True, "analysis": analysis, "screenshot_path": str(path)}
        return result | {"_untrusted": True}


def _save(path: Path, encoded: str) -> bytes:
    """Decode a screenshot and write it to ``path``; its bytes."""
    data = base64.b64decode(encoded)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return data


def register_browser_tools(tools: ToolRegistry, pool: BrowserPool, browser: BrowserTools) -> None:
    """Register the ten browser tools (toolset ``browser``)."""
    for schema in SCHEMAS:
        name = schema["name"]

        async def handler(
            args: dict[str, Any], session_id: str = "", _name: str = name, **_: Any
        ) -> str:
            return await browser.call(_name, args, session_id)

        tools.register(
            name,
            TOOLSET,
            schema,
            handler,
            check_fn=lambda: available_unless(pool.unavailable()),
            is_async=True,
            emoji=EMOJI[name],
            owner=BUILTIN,
            check_arguments=False,
        )
