"""The HTTP client hermesd hands the ``openai`` SDK: the SDK's own, with a cheaper
``build_request`` for the request it sends every model round.

The SDK builds each request with its HTTP library's ``AsyncClient.build_request``, which parses
the URL string again (the SDK had just turned its parsed URL back into a string) and merges the
client's default headers into the request's by normalising every header of both again. With
the same URL and the same headers every round, that was ~40 µs of the event loop's time per
model round, about 4% of it with 100 turns at once. Here the parsed URL and the merged headers
are kept (a few of each, keyed by the strings they came from) and copied into each new request.

Only the common case takes that path: an absolute URL given as a string, the body as bytes,
nothing the client would add from cookies or query parameters, no extensions. Anything else,
and any request while the client holds cookies, goes through the library's own
``build_request`` unchanged. Sending (auth, redirects, cookies from responses, event hooks) is
the library's own either way.
"""

from __future__ import annotations

import sys
from typing import Any

import openai

# The HTTP library the SDK was built on (``httpx`` or ``httpx2``).
http: Any = sys.modules[
    next(
        c for c in openai.DefaultAsyncHttpxClient.__mro__ if c.__name__ == "AsyncClient"
    ).__module__.split(".")[0]
]

CACHED = 16  # URLs, and header sets, remembered (a daemon uses one or two of each)


class LeanAsyncClient(openai.DefaultAsyncHttpxClient):  # type: ignore[misc]
    """``openai.DefaultAsyncHttpxClient`` whose ``build_request`` reuses parsed URLs and
    merged headers."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._urls: dict[str, Any] = {}
        # request headers (as given) -> (the client's headers then, the merged result)
        self._merged: dict[tuple[Any, ...], tuple[list[tuple[bytes, bytes]], Any]] = {}

    def build_request(
        self,
        method: str,
        url: Any,
        *,
        content: Any = None,
        data: Any = None,
        files: Any = None,
        json: Any = None,
        params: Any = None,
        headers: Any = None,
        cookies: Any = None,
        timeout: Any = http.USE_CLIENT_DEFAULT,
        extensions: Any = None,
    ) -> Any:
        if (
            type(url) is not str
            or type(content) is not bytes
            or data is not None
            or files is not None
            or json is not None
            or params
            or cookies
            or extensions
            or type(headers) is not list
            or self.params
            or len(self.cookies)
            or timeout is http.USE_CLIENT_DEFAULT
        ):
            return super().build_request(
                method,
                url,
                content=content,
                data=data,
                files=files,
                json=json,
                params=params,
                headers=headers,
                cookies=cookies,
                timeout=timeout,
                extensions=extensions,
            )
        parsed = self._urls.get(url)
        if parsed is None:
            parsed = http.URL(url)
            if parsed.is_relative_url:  # merged with base_url by the library
                return super().build_request(
                    method, url, content=content, headers=headers, timeout=timeout
                )
            if len(self._urls) >= CACHED:
                self._urls.clear()
            self._urls[url] = parsed
        key = tuple(headers)
        own = self.headers.raw
        known = self._merged.get(key)
        if known is None or known[0] != own:
            merged = http.Headers(self.headers)
            merged.update(headers)
            if len(self._merged) >= CACHED:
                self._merged.clear()
            known = self._merged[key] = (own, merged)
        return http.Request(
            method,
            parsed,
            content=content,
            headers=http.Headers(known[1]),
            extensions={"timeout": http.Timeout(timeout).as_dict()},
        )
