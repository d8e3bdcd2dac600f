"""A fetched page as text for the model (run in the conversion process, `web_worker`) and the page
cache (run on worker threads).

`convert` turns a `Fetched` body into ``(title, text)``: HTML and XHTML through trafilatura
(main content as markdown with links and tables, images and scripts dropped; its baseline
extractor when the main-content pass finds nothing), plain text, markdown, CSV and JSON as
text (JSON pretty-printed), and anything else (images, PDF, archives, a body with NUL bytes)
refused with `Unconvertible`. `PageCache` keeps each URL's converted text as a JSON file under
``$HERMES_HOME/cache/web/pages`` for ``web.extract.cache_ttl`` seconds (expired files are
removed as new ones are written). `window` cuts a long
text to the model's budget (head and tail, with a footer naming the stored full text).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hermesd.tools.web_fetch import Fetched

HTML_TYPES = ("text/html", "application/xhtml+xml")
JSON_TYPES = ("application/json", "application/ld+json")
TEXT_TYPES = ("text/plain", "text/markdown", "text/csv", "text/x-markdown", "application/xml")
MAX_STORED = 2_000_000  # characters of a page's full text kept on disk
MAX_FILES = 2000  # cached pages and full texts in the folder, newest kept


class Unconvertible(Exception):
    """A body that is not text the model can read (the message says what it is)."""


def convert(page: Fetched) -> tuple[str, str]:
    """``(title, text)`` of a fetched body; `Unconvertible` for binary content."""
    kind = page.content_type
    if kind in HTML_TYPES or (not kind and _looks_like_html(page.body)):
        return _html(page.body)
    if b"\x00" in page.body[:8192]:
        raise Unconvertible(f"binary content ({kind or 'no Content-Type'}) is not extracted")
    text = page.body.decode(page.charset or "utf-8", "replace")
    if kind in JSON_TYPES or kind.endswith("+json"):
        with contextlib.suppress(ValueError):
            text = json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        return "", text
    if kind in TEXT_TYPES or kind.startswith("text/") or not kind:
        return "", text
    raise Unconvertible(f"{kind} content is not extracted (web_extract reads HTML, text and JSON)")


def _looks_like_html(body: bytes) -> bool:
    head = body[:1024].lstrip().lower()
    return head.startswith((b"<!doctype html", b"<html", b"<head", b"<body"))


def _html(body: bytes) -> tuple[str, str]:
    # imported here: trafilatura and lxml take ~0.3 s to import, paid on first use only
    import trafilatura
    from trafilatura.utils import load_html

    tree = load_html(body)
    if tree is None:
        raise Unconvertible("the page could not be parsed as HTML")
    # the page's <title> (else its first <h1>): trafilatura's own metadata pass also hunts for
    # dates and authors, and took longer than the extraction itself on a 2 MB page
    title = tree.findtext(".//title") or tree.findtext(".//h1") or ""
    text = trafilatura.extract(
        tree,
        output_format="markdown",
        include_links=True,
        include_tables=True,
        include_comments=False,
    )
    if not text:  # a page trafilatura finds no main content in: its plain-text fallback
        _, text, _ = trafilatura.baseline(body)
    return " ".join(title.split())[:500], text or ""


def window(text: str, limit: int, stored: Path | None) -> str:
    """``text`` whole when it fits ``limit``, else its head and tail with a footer."""
    if len(text) <= limit:
        return text
    head, tail = text[: limit * 3 // 4], text[-(limit // 4) :]
    if (cut := head.rfind("\n")) > len(head) // 2:
        head = head[:cut]
    if 0 <= (cut := tail.find("\n")) < len(tail) // 2:
        tail = tail[cut + 1 :]
    footer = [
        f"[truncated: {len(head):,} characters from the start and {len(tail):,} from the end "
        f"of {len(text):,} are shown]"
    ]
    if stored is not None:
        line = head.count("\n") + 2
        footer.append(
            f"[the whole text is in {stored}; read_file it from line {line} for the middle]"
        )
    return f"{head}\n\n[... middle omitted ...]\n\n{tail}\n" + "\n".join(footer)


class PageCache:
    """Converted pages on disk, by URL, for ``ttl`` seconds (0: nothing is kept)."""

    def __init__(self, folder: Path, ttl: float) -> None:
        self.folder = folder
        self.ttl = ttl

    def _path(self, url: str, suffix: str) -> Path:
        return self.folder / (hashlib.sha256(url.encode()).hexdigest()[:32] + suffix)

    def get(self, url: str) -> dict[str, Any] | None:
        """The cached ``{title, text, cut}`` of ``url`` when fresh, else None."""
        if self.ttl <= 0:
            return None
        path = self._path(url, ".json")
        try:
            if time.time() - path.stat().st_mtime > self.ttl:
                return None
            entry = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return entry if isinstance(entry, dict) and entry.get("url") == url else None

    def put(self, url: str, title: str, text: str, cut: bool) -> None:
        """Keep a converted page (written whole or not at all), dropping expired ones."""
        if self.ttl <= 0:
            return
        entry = {"url": url, "title": title, "text": text[:MAX_STORED], "cut": cut}
        self._write(self._path(url, ".json"), json.dumps(entry, ensure_ascii=False))
        self.prune()

    def prune(self) -> None:
        """Remove expired pages and full texts, and the oldest past `MAX_FILES`, so the folder
        stays bounded (a full text lives as long as a cached page: a day at least)."""
        now, keep_for = time.time(), max(self.ttl, 86400.0)
        files: list[tuple[float, Path]] = []
        with contextlib.suppress(OSError), os.scandir(self.folder) as listing:
            for item in listing:
                with contextlib.suppress(OSError):
                    files.append((item.stat().st_mtime, Path(item.path)))
        files.sort(reverse=True)
        for n, (mtime, path) in enumerate(files):
            ttl = self.ttl if path.suffix == ".json" else keep_for
            if n >= MAX_FILES or now - mtime > ttl:
                with contextlib.suppress(OSError):
                    path.unlink()

    def store_text(self, url: str, text: str) -> Path | None:
        """The full text of a long page as a file the model can page through with read_file."""
        path = self._path(url, ".md")
        try:
            self._write(path, text[:MAX_STORED])
        except OSError:
            return None
        return path

    def _write(self, path: Path, data: str) -> None:
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        temporary = path.with_suffix(f".{os.getpid()}-{threading.get_ident()}.tmp")
        temporary.write_text(data, encoding="utf-8")
        os.replace(temporary, path)
