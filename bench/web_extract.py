#!/usr/bin/env python3
"""``web_extract`` of a 2 MB page: the conversion beside trafilatura alone, the whole tool call
through a daemon, and what other clients see meanwhile.

**Convert**: a generated 2 MB article page (navigation, 600 sections of distinct paragraphs,
lists, tables, links, inline scripts) turned into text in-process: hermesd's
``hermesd.tools.web_convert.convert`` (parse once, metadata, markdown with links and tables)
beside ``trafilatura.extract(html)`` called directly with its defaults (plain text), interleaved.
The reference's ``web_extract`` (hermes-agent 0.19.0) cannot run offline: it hands the URLs to
an extract backend, and its only ones are remote services (Firecrawl, Tavily, Exa, Parallel,
each needing an API key or a hosted instance); its keyless backends (SearXNG, DDGS, Brave free)
are search-only. So trafilatura alone stands in for "the same input without hermesd".

**Tool call**: ``tools.call web_extract`` on a real daemon (cache off) against the page served
on 127.0.0.1 (on ``sandbox.allowed_domains``): fetch through the egress proxy, convert in the
conversion process (``hermesd.tools.web_worker``), mark. **Other clients**: ``ping`` round
trips from a second client while those calls run, against ``ping`` on an idle daemon (the
event loop must not stall on the CPU-heavy conversion).

    python bench/web_extract.py            # the full run (about a minute)
    python bench/web_extract.py --quick    # a smoke run
"""

from __future__ import annotations

import argparse
import http.server
import threading
import time
from pathlib import Path
from typing import Any

import common
from common import machine, median, now_utc, percentile, publish, scratch_dir

from hermesd.tools.web_convert import convert
from hermesd.tools.web_fetch import Fetched
from tests.support.daemon import start_daemon

SIZE = 2 * 1024 * 1024


def page() -> bytes:
    """A 2 MB article page, every paragraph distinct (trafilatura drops repeated ones)."""
    parts = [
        "<!DOCTYPE html><html><head><title>A long handbook</title>",
        "<script>var analytics = {id: 'UA-1'};</script></head><body>",
        "<nav>" + " | ".join(f"<a href='/s{n}'>Section {n}</a>" for n in range(40)) + "</nav>",
        "<article><h1>A long handbook</h1>",
    ]
    n = 0
    while sum(map(len, parts)) < SIZE:
        n += 1
        parts.append(f"<h2>Chapter {n}</h2>")
        for k in range(4):
            parts.append(
                f"<p>Paragraph {k} of chapter {n} explains step {n * 7 + k} of the process, "
                f"with a <a href='/ref/{n}/{k}'>reference</a> and a number {n * 31337 % 9973} "
                "that makes it differ from every other paragraph of the handbook.</p>"
            )
        parts.append(f"<ul><li>item {n}a</li><li>item {n}b</li></ul>")
        if n % 10 == 0:
            parts.append(f"<table><tr><th>k</th><th>v</th></tr><tr><td>{n}</td><td>x</td></tr>")
            parts.append("</table><script>console.log('chapter');</script>")
    parts.append("</article><footer>Footer text</footer></body></html>")
    return "".join(parts).encode()[: SIZE + 4096]


def convert_rows(body: bytes, rounds: int) -> list[str]:
    import trafilatura

    fetched = Fetched("http://bench/", 200, "text/html", "utf-8", body, False)
    samples: dict[str, list[float]] = {"hermesd": [], "trafilatura": []}
    lengths: dict[str, int] = {}
    for name in common.interleaved(rounds, list(samples)):
        start = time.perf_counter()
        if name == "hermesd":
            lengths[name] = len(convert(fetched)[1])
        else:
            lengths[name] = len(trafilatura.extract(body) or "")
        samples[name].append((time.perf_counter() - start) * 1000)
    rows = [
        "| conversion of the 2 MB page | p50 ms | p90 ms | characters out |",
        "|---|---:|---:|---:|",
    ]
    for name, label in (
        ("hermesd", "hermesd `convert` (markdown, links, tables, title)"),
        ("trafilatura", "`trafilatura.extract(html)` alone (plain text)"),
    ):
        times = samples[name]
        rows.append(
            f"| {label} | {median(times):.0f} | {percentile(times, 90):.0f} | {lengths[name]:,} |"
        )
    ratio = median(samples["hermesd"]) / median(samples["trafilatura"])
    rows.append(f"\nRatio hermesd / trafilatura alone (p50): **{ratio:.2f}×**")
    return rows


class _Serve(http.server.BaseHTTPRequestHandler):
    body = b""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: Any) -> None:
        pass


def pings(client: Any, until: threading.Event, out: list[float]) -> None:
    while not until.is_set():
        start = time.perf_counter()
        client.call("ping")
        out.append((time.perf_counter() - start) * 1000)
        time.sleep(0.005)


def daemon_rows(body: bytes, calls: int) -> list[str]:
    handler = type("Serve", (_Serve,), {"body": body})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/handbook"
    config = (
        "sandbox:\n  allowed_domains: ['127.0.0.1']\n"
        "web:\n  extract:\n    cache_ttl: 0\n    timeout: 60\n"
    )
    home = scratch_dir("bench-web-")
    daemon = start_daemon(Path(home), config=config)
    try:
        with daemon.client(timeout=120) as caller, daemon.client() as other:
            idle: list[float] = []
            stop = threading.Event()
            watcher = threading.Thread(target=pings, args=(other, stop, idle))
            watcher.start()
            time.sleep(2)
            stop.set()
            watcher.join()
            busy: list[float] = []
            stop = threading.Event()
            watcher = threading.Thread(target=pings, args=(other, stop, busy))
            watcher.start()
            times = []
            for _ in range(calls):
                start = time.perf_counter()
                result = caller.call(
                    "tools.call", {"name": "web_extract", "args": {"urls": [url]}}, timeout=120
                )["result"]
                times.append((time.perf_counter() - start) * 1000)
                assert "Paragraph 0 of chapter 1" in result, result[:500]
            stop.set()
            watcher.join()
    finally:
        daemon.stop()
        server.shutdown()
    return [
        "| through the daemon | p50 ms | p90 ms | max ms |",
        "|---|---:|---:|---:|",
        f"| `tools.call web_extract`, 2 MB page, cache off ({calls} calls) "
        f"| {median(times):.0f} | {percentile(times, 90):.0f} | {max(times):.0f} |",
        f"| `ping` from another client, idle daemon ({len(idle)} pings) "
        f"| {median(idle):.2f} | {percentile(idle, 90):.2f} | {max(idle):.2f} |",
        f"| `ping` from another client during those calls ({len(busy)} pings) "
        f"| {median(busy):.2f} | {percentile(busy, 90):.2f} | {max(busy):.2f} |",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    started, machine_line = now_utc(), machine()
    body = page()
    rows = convert_rows(body, 3 if args.quick else 12)
    rows += ["", *daemon_rows(body, 2 if args.quick else 8)]
    text = "\n".join(
        [
            f"Input: a generated article page of {len(body):,} bytes "
            "(the reference's web_extract needs a remote extract service, so trafilatura "
            "alone is the side-by-side; bench/web_extract.py says why).",
            "",
            *rows,
        ]
    )
    publish(args, "web_extract", "Web extract: a 2 MB page", text, started, machine_line)


if __name__ == "__main__":
    main()
