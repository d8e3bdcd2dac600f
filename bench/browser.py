#!/usr/bin/env python3
"""The browser tools: ``browser_navigate`` and ``browser_snapshot`` through a real daemon.

A daemon with the local Chromium (in the tool sandbox, its traffic through the egress proxy)
and a small page served on 127.0.0.1 (on ``sandbox.allowed_domains``). Each round makes a new
session and calls, with ``tools.call``: ``browser_navigate`` once cold (Chromium starts in the
sandbox first), once warm, then ``browser_snapshot``; deleting the session closes its browser.
The reference's browser tools drive Chromium through the ``agent-browser`` Node CLI, which is
not installed here, so there is no side-by-side: these are guards, not comparisons.

    python bench/browser.py            # the full run (about a minute)
    python bench/browser.py --quick    # a smoke run
"""

from __future__ import annotations

import argparse
import http.server
import threading
import time
from pathlib import Path
from typing import Any

from common import machine, median, now_utc, percentile, publish, scratch_dir

from tests.support.daemon import start_daemon

PAGE = (
    "<!DOCTYPE html><html><head><title>Bench page</title></head><body><h1>Catalogue</h1>"
    + "".join(
        f"<p>Item {n}: <a href='/item/{n}'>details</a> <button>Buy {n}</button></p>"
        for n in range(60)
    )
    + "<form><input name=q aria-label=Search><button>Go</button></form></body></html>"
).encode()


class _Serve(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)

    def log_message(self, *args: Any) -> None:
        pass


def rounds(count: int) -> dict[str, list[float]]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Serve)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    daemon = start_daemon(
        Path(scratch_dir("bench-browser-")), config="sandbox:\n  allowed_domains: ['127.0.0.1']\n"
    )
    times: dict[str, list[float]] = {"cold": [], "warm": [], "snapshot": []}
    try:
        with daemon.client(timeout=120) as client:
            for _ in range(count):
                sid = client.call("session.create")["id"]
                for label, name, args in (
                    ("cold", "browser_navigate", {"url": url}),
                    ("warm", "browser_navigate", {"url": url}),
                    ("snapshot", "browser_snapshot", {}),
                ):
                    start = time.perf_counter()
                    result = client.call(
                        "tools.call",
                        {"name": name, "args": args, "session_id": sid},
                        timeout=120,
                    )["result"]
                    times[label].append((time.perf_counter() - start) * 1000)
                    assert "Buy 59" in result, result[:500]
                client.call("session.delete", {"session_id": sid})
    finally:
        daemon.stop()
        server.shutdown()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    started, machine_line = now_utc(), machine()
    times = rounds(2 if args.quick else 8)
    rows = [
        f"Input: a page of {len(PAGE):,} bytes (60 links, 61 buttons, a search box), one new "
        f"session per round ({len(times['cold'])} rounds).",
        "",
        "| `tools.call` | p50 ms | p90 ms | max ms |",
        "|---|---:|---:|---:|",
    ]
    for label, what in (
        ("cold", "`browser_navigate`, first of the session (Chromium starts in the sandbox)"),
        ("warm", "`browser_navigate`, browser already open"),
        ("snapshot", "`browser_snapshot` (compact)"),
    ):
        values = times[label]
        rows.append(
            f"| {what} | {median(values):.0f} | {percentile(values, 90):.0f} | {max(values):.0f} |"
        )
    publish(
        args,
        "browser",
        "Browser tools: navigate and snapshot",
        "\n".join(rows),
        started,
        machine_line,
    )


if __name__ == "__main__":
    main()
