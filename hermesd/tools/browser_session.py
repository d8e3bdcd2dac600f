"""One session's browser: where it runs, its page, and what the page said on its console.

A `BrowserPage` is a CDP connection (`hermesd.tools.cdp`) with one page attached to it, the
element refs of the last snapshot, and the page's console messages and uncaught errors. It comes
from one of two places:

- `launch_local`: Debian's ``chromium``, headless, started inside the tool sandbox like a
  terminal command (`hermesd.sandbox.confine.Sandbox.prepare`; Unix sockets allowed, which
  Chromium needs for itself), with a fresh profile in the call's private tmp, driven over
  ``--remote-debugging-pipe`` (file descriptors 3 and 4: no port anyone else could reach). Its
  proxy is the daemon's egress proxy, loopback included; the proxy's credentials are given
  when Chromium asks for them (CDP ``Fetch.authRequired``), from the pass of the tool call in
  progress (`BrowserPage.use_pass`), so every request it makes is decided by the egress policy
  in that call's name.
- `attach_remote`: the DevTools websocket URL a plugin's browser provider returned from
  ``create_session``; that browser reaches the network its own way.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import shlex
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hermesd.tools.cdp import CdpConnection, CdpError, PipeTransport, WebSocketTransport
from hermesd.tools.terminal import spawn, terminate

if TYPE_CHECKING:
    from hermesd.sandbox.confine import Launch, Sandbox
    from hermesd.sandbox.egress import ProxyPass

log = logging.getLogger(__name__)

START_TIMEOUT = 30.0  # seconds Chromium may take to answer its first command
MAX_MESSAGES = 500  # console messages and errors kept per page (the oldest go first)
#: places Chromium is looked for when ``browser.chromium`` does not name one
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",  # its own sandbox needs namespaces the tool sandbox refuses; ours holds
    "--no-zygote",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-breakpad",
    "--disable-crash-reporter",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--mute-audio",
    "--window-size=1280,900",
    "--remote-debugging-pipe",
    "--proxy-bypass-list=<-loopback>",  # loopback goes through the proxy too
    "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",  # no UDP around the proxy
)
#: run inside the sandbox: the two pipe ends become fds 3 and 4, then Chromium
TRAMPOLINE = (
    "import os,sys;r,w=int(sys.argv[1]),int(sys.argv[2]);os.dup2(r,3);os.dup2(w,4);"
    "[os.close(f) for f in (r,w) if f>4];os.execvp(sys.argv[3],sys.argv[3:])"
)


class BrowserPage:
    """One browser with one page; commands go to the page unless ``browser_level``."""

    def __init__(self, conn: CdpConnection, closer: Callable[[], Awaitable[None]]) -> None:
        self.conn = conn
        self._closer = closer
        self.session: str | None = None  # the page's CDP session
        self.refs: dict[str, int] = {}  # "e1" -> backend DOM node id, from the last snapshot
        self.console: collections.deque[dict[str, Any]] = collections.deque(maxlen=MAX_MESSAGES)
        self.errors: collections.deque[dict[str, Any]] = collections.deque(maxlen=MAX_MESSAGES)
        self.lock = asyncio.Lock()  # one tool call at a time drives the page
        self.last_used = time.monotonic()
        self.loaded = asyncio.Event()  # cleared while the page's main frame loads
        self.loaded.set()
        self._main_frame = ""
        self._loads: dict[str, asyncio.Event] = {}  # loader id -> set once that document loaded
        self._pass: ProxyPass | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    async def open_page(self, intercept: bool) -> None:
        """Create the page, attach to it and listen to it; ``intercept``: answer the proxy's
        credential requests (a local browser behind the egress proxy)."""
        conn = self.conn
        for event, listener in (
            ("Runtime.consoleAPICalled", self._console),
            ("Runtime.exceptionThrown", self._exception),
            ("Page.frameStartedLoading", self._started_loading),
            ("Page.loadEventFired", lambda _p, _s: self.loaded.set()),
            ("Page.lifecycleEvent", self._lifecycle),
            ("Fetch.requestPaused", self._paused),
            ("Fetch.authRequired", self._auth),
        ):
            conn.on(event, listener)
        target = await conn.send("Target.createTarget", {"url": "about:blank"})
        self._main_frame = str(target["targetId"])  # a page's main frame has its target's id
        attached = await conn.send(
            "Target.attachToTarget", {"targetId": target["targetId"], "flatten": True}
        )
        self.session = str(attached["sessionId"])
        for method in ("Page.enable", "Runtime.enable"):
            await self.command(method)
        await self.command("Page.setLifecycleEventsEnabled", {"enabled": True})
        if intercept:
            await self.command(
                "Fetch.enable", {"handleAuthRequests": True, "patterns": [{"urlPattern": "*"}]}
            )

    async def command(
        self, method: str, params: dict[str, Any] | None = None, timeout: float = 30.0
    ) -> dict[str, Any]:
        """One CDP command to the page."""
        return await self.conn.send(method, params, self.session, timeout)

    def use_pass(self, proxy: ProxyPass | None) -> ProxyPass | None:
        """Answer the proxy's credential requests with ``proxy`` from now on; the pass it
        replaces is returned (for the caller to revoke)."""
        old, self._pass = self._pass, proxy
        return old

    @property
    def current_pass(self) -> ProxyPass | None:
        """The egress pass the browser's requests go out on now."""
        return self._pass

    @property
    def alive(self) -> bool:
        """Whether the connection to the browser is still open."""
        return not self.conn.closed.is_set()

    async def close(self) -> None:
        """Close the connection and end the browser (or its provider's session)."""
        for task in list(self._tasks):
            task.cancel()
        await self.conn.close()
        await self._closer()

    # --- events --------------------------------------------------------------------------

    def _started_loading(self, params: dict[str, Any], _session: str | None) -> None:
        if params.get("frameId") == self._main_frame:
            self.loaded.clear()

    def _lifecycle(self, params: dict[str, Any], _session: str | None) -> None:
        if params.get("name") == "load" and params.get("frameId") == self._main_frame:
            self.load_of(str(params.get("loaderId"))).set()

    def load_of(self, loader: str) -> asyncio.Event:
        """Set once the document of navigation ``loader`` has loaded (its load event)."""
        if len(self._loads) > 100 and loader not in self._loads:
            self._loads = {k: v for k, v in self._loads.items() if not v.is_set()}
        return self._loads.setdefault(loader, asyncio.Event())

    async def settle(self, timeout: float) -> None:
        """Let an action's effects start, then wait (at most ``timeout`` seconds) for a page
        load it started to finish."""
        await asyncio.sleep(0.1)
        try:
            await asyncio.wait_for(self.loaded.wait(), timeout)
        except TimeoutError:
            log.info("browser: the page did not finish loading in %gs; going on", timeout)

    def _console(self, params: dict[str, Any], _session: str | None) -> None:
        words = [_shown(arg) for arg in params.get("args") or []]
        self.console.append({"type": str(params.get("type") or "log"), "text": " ".join(words)})

    def _exception(self, params: dict[str, Any], _session: str | None) -> None:
        details = params.get("exceptionDetails") or {}
        thrown = details.get("exception") or {}
        message = thrown.get("description") or details.get("text") or "an uncaught error"
        self.errors.append({"message": str(message)})

    def _spawn(self, method: str, params: dict[str, Any], session: str | None) -> None:
        task = asyncio.get_running_loop().create_task(self._quietly(method, params, session))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _quietly(self, method: str, params: dict[str, Any], session: str | None) -> None:
        with contextlib.suppress(CdpError):
            await self.conn.send(method, params, session, timeout=10)

    def _paused(self, params: dict[str, Any], session: str | None) -> None:
        self._spawn("Fetch.continueRequest", {"requestId": params["requestId"]}, session)

    def _auth(self, params: dict[str, Any], session: str | None) -> None:
        challenge = params.get("authChallenge") or {}
        answer: dict[str, Any] = {"response": "CancelAuth"}  # a site's own login: not ours
        if challenge.get("source") == "Proxy" and self._pass is not None:
            answer = {
                "response": "ProvideCredentials",
                "username": self._pass.user,
                "password": self._pass.token,
            }
        request = {"requestId": params["requestId"], "authChallengeResponse": answer}
        self._spawn("Fetch.continueWithAuth", request, session)


def _shown(arg: dict[str, Any]) -> str:
    """A console argument as text (a value, else its description)."""
    if "value" in arg:
        value = arg["value"]
        return value if isinstance(value, str) else repr(value)
    return str(arg.get("description") or arg.get("type") or "")


def find_chromium(configured: str) -> str | None:
    """The Chromium program: ``browser.chromium`` when set, else the first on PATH."""
    import shutil

    for name in (configured,) if configured else CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


async def launch_local(
    sandbox: Sandbox, chromium: str, workspace: Path, session_id: str | None
) -> BrowserPage:
    """Start Chromium in the tool sandbox and open its page; `CdpError` when it fails."""
    proxy_port = sandbox.egress.port
    commands_r, commands_w = os.pipe()  # we write, Chromium reads (its fd 3)
    replies_r, replies_w = os.pipe()  # Chromium writes (its fd 4), we read
    child_ends = (commands_r, replies_w)
    flags = [*CHROMIUM_FLAGS, f"--proxy-server=http://127.0.0.1:{proxy_port}"]
    program = [sys.executable, "-I", "-S", "-c", TRAMPOLINE, *map(str, child_ends), chromium]
    command = (
        'export HOME="$TMPDIR/home" XDG_CONFIG_HOME="$TMPDIR/home" XDG_CACHE_HOME="$TMPDIR/home"'
        ' && mkdir -p "$HOME" && exec '
        + " ".join(map(shlex.quote, [*program, *flags]))
        + ' --user-data-dir="$TMPDIR/profile" about:blank'
    )
    launch: Launch | None = None
    try:
        launch = await asyncio.to_thread(
            sandbox.prepare, command, workspace, workspace, session_id, True
        )
        launch.pass_fds = (*launch.pass_fds, *child_ends)
        proc = await spawn(launch, stdin=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    except BaseException:
        for fd in (commands_w, replies_r):
            os.close(fd)
        if launch is not None:
            await asyncio.to_thread(launch.cleanup)
        raise
    finally:  # the child has its copies (or never will)
        for fd in child_ends:
            os.close(fd)
    tail: collections.deque[str] = collections.deque(maxlen=20)
    draining = asyncio.get_running_loop().create_task(_drain(proc, tail))
    done_launch = launch

    async def closer() -> None:
        await terminate(proc, done_launch)
        draining.cancel()
        await asyncio.to_thread(done_launch.cleanup)

    page = BrowserPage(CdpConnection(PipeTransport(replies_r, commands_w)), closer)
    page.conn.start()
    try:
        await page.conn.send("Browser.getVersion", timeout=START_TIMEOUT)
        await page.open_page(intercept=True)
    except BaseException as exc:
        await page.close()
        said = " | ".join(line for line in tail if line.strip())[-600:]
        log.error("browser: Chromium did not start (%s); its last words: %s", exc, said)
        raise CdpError(f"the browser did not start ({exc}); see the daemon log") from None
    return page


async def _drain(proc: asyncio.subprocess.Process, tail: collections.deque[str]) -> None:
    """Keep the last lines Chromium wrote to stderr (for the log when it fails to start)."""
    assert proc.stderr is not None
    while line := await proc.stderr.readline():
        tail.append(line.decode("utf-8", "replace").rstrip())


async def attach_remote(
    url: str, closer: Callable[[], Awaitable[None]], timeout: float
) -> BrowserPage:
    """Connect to a provider's browser at ``url`` and open a page on it."""
    transport = await WebSocketTransport.connect(url, timeout)
    page = BrowserPage(CdpConnection(transport), closer)
    page.conn.start()
    try:
        await page.open_page(intercept=False)
    except BaseException:
        await page.close()
        raise
    return page
