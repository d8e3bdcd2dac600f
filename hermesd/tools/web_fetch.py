"""The web tools' one way to the network: a GET through the daemon's egress proxy.

Every fetch `web_extract` and the built-in SearXNG search make goes through
`hermesd.sandbox.egress`: the call gets a pass of its own (tied to its session and to the client
whose request led to it), each host is decided first (`EgressProxy.admit`: on
``sandbox.allowed_domains`` it passes, any other is asked about as a ``network`` approval, a
refusal is a `FetchError` with the proxy's sentence), then the request itself goes through the
proxy with urllib3 on a worker thread. Redirects are followed here, hop by hop, so each new host
is decided too. The body is read in chunks up to ``max_bytes`` (the rest is dropped and the
result says it was cut) within ``timeout`` seconds in all; a server that sends nothing for
``timeout`` seconds fails the fetch. The event loop only awaits.
"""

from __future__ import annotations

import asyncio
import time
import urllib.parse
from dataclasses import dataclass
from typing import TYPE_CHECKING

import urllib3

from hermesd.sandbox.allowlist import canonical_host

if TYPE_CHECKING:
    from hermesd.sandbox.egress import EgressProxy, ProxyPass

MAX_REDIRECTS = 5
MAX_URL = 2048  # characters; a longer URL is refused before anything is sent
CHUNK = 64 * 1024
USER_AGENT = "hermesd-web/1 (+https://hermes-agent.nousresearch.com)"
_REDIRECTS = (301, 302, 303, 307, 308)
_PROXY_SAYS = b"hermesd egress proxy:"


class FetchError(Exception):
    """A fetch that failed; the message is for the model and the person."""


@dataclass(frozen=True)
class Fetched:
    """One response: where it ended up, its status, type and (bounded) body."""

    url: str
    status: int
    content_type: str  # lower case, without parameters ("" when the server sent none)
    charset: str | None
    body: bytes
    cut: bool  # True when the body was longer than the bound and was cut there


def check_url(url: str) -> tuple[str, int]:
    """The canonical host and port of an ``http(s)://`` URL; `FetchError` when it is not one."""
    if len(url) > MAX_URL:
        raise FetchError(f"the URL is longer than {MAX_URL} characters")
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise FetchError(f"only http:// and https:// URLs are fetched, not {url[:80]!r}")
    if parts.username or parts.password:
        raise FetchError("a URL with credentials in it is not fetched")
    try:
        host = canonical_host(parts.hostname or "")
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise FetchError(f"{url[:80]!r}: {exc}") from None
    return host, port


class Fetcher:
    """GETs through the egress proxy for one tool call (`fetch`); `close` ends its pass."""

    def __init__(self, egress: EgressProxy, session_id: str | None) -> None:
        self.egress = egress
        # issued on the loop, in the tool call's context: approvals reach its client
        self.proxy: ProxyPass = egress.issue(session_id, ask=True)
        self._pool = urllib3.ProxyManager(
            f"http://127.0.0.1:{self.proxy.port}",
            proxy_headers=urllib3.make_headers(
                proxy_basic_auth=f"{self.proxy.user}:{self.proxy.token}"
            ),
            num_pools=4,
            retries=False,
        )

    def close(self) -> None:
        """End the call's pass (its tunnels close) and the connection pool."""
        self.egress.revoke(self.proxy.user)
        self._pool.clear()

    async def admit(self, url: str) -> None:
        """Decide ``url``'s host under the egress policy (asking a person when it is not on the
        allow-list); `FetchError` with the refusal's sentence when it may not be reached."""
        host, port = check_url(url)
        refusal = await self.egress.admit(self.proxy.user, host, port)
        if refusal is not None:
            raise FetchError(refusal)

    async def fetch(self, url: str, max_bytes: int, timeout: float, accept: str) -> Fetched:
        """GET ``url`` (redirects followed, each host decided first); `FetchError` on failure."""
        for _ in range(MAX_REDIRECTS + 1):
            await self.admit(url)
            got, location = await asyncio.to_thread(self._get, url, max_bytes, timeout, accept)
            if location is None:
                return got
            url = urllib.parse.urljoin(url, location)
        raise FetchError(f"more than {MAX_REDIRECTS} redirects")

    def _get(
        self, url: str, max_bytes: int, timeout: float, accept: str
    ) -> tuple[Fetched, str | None]:
        """One request on a worker thread: the response, and where it redirects (or None)."""
        headers = {"User-Agent": USER_AGENT, "Accept": accept, "Accept-Encoding": "gzip"}
        try:
            response = self._pool.request(
                "GET",
                url,
                headers=headers,
                redirect=False,
                preload_content=False,
                timeout=urllib3.Timeout(connect=timeout, read=timeout),
            )
        except urllib3.exceptions.ProxyError as exc:  # an https tunnel (CONNECT) that failed
            why = str(exc.original_error).removeprefix("Tunnel connection failed: ")
            raise FetchError(
                f"no tunnel to {url[:200]}: the egress proxy answered {why} (the host cannot be "
                "reached, or the proxy refused it)"
            ) from None
        except urllib3.exceptions.TimeoutError:
            raise FetchError(f"{url[:200]} did not answer within {timeout:g}s") from None
        except urllib3.exceptions.HTTPError as exc:
            raise FetchError(f"could not fetch {url[:200]}: {exc}") from None
        try:
            return _read(response, url, max_bytes, timeout)
        finally:
            response.release_conn()
            response.close()


def _read(
    response: urllib3.BaseHTTPResponse, url: str, max_bytes: int, timeout: float
) -> tuple[Fetched, str | None]:
    location = response.headers.get("Location")
    if response.status in _REDIRECTS and location:
        return Fetched(url, response.status, "", None, b"", False), location
    deadline = time.monotonic() + timeout
    chunks: list[bytes] = []
    size, cut = 0, False
    try:
        for chunk in response.stream(CHUNK, decode_content=True):
            chunks.append(chunk)
            size += len(chunk)
            if size > max_bytes:
                cut = True
                break
            if time.monotonic() > deadline:  # a server dripping bytes cannot hold the call
                raise FetchError(f"{url[:200]} took longer than {timeout:g}s to send its page")
    except urllib3.exceptions.TimeoutError:
        raise FetchError(f"{url[:200]} stopped sending for {timeout:g}s") from None
    except urllib3.exceptions.HTTPError as exc:
        raise FetchError(f"reading {url[:200]} failed: {exc}") from None
    body = b"".join(chunks)[:max_bytes]
    if response.status in (403, 407, 502, 503, 504) and body.startswith(_PROXY_SAYS):
        raise FetchError(body.decode("utf-8", "replace").strip())
    if response.status >= 400:
        raise FetchError(f"{url[:200]} answered HTTP {response.status}")
    kind, _, params = (response.headers.get("Content-Type") or "").partition(";")
    charset = None
    for param in params.split(";"):
        name, _, value = param.strip().partition("=")
        if name.lower() == "charset" and value:
            charset = value.strip("\"'")
    return Fetched(url, response.status, kind.strip().lower(), charset, body, cut), None
