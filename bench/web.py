"""The web page: its first load (bytes of every file it loads) and the time to the first
token of an answer on the page versus in ``hermesctl chat``, side by side.

One hermesd with the HTTP door, a scripted model that answers at once (in this process). The
page runs in Debian's headless chromium (Selenium, as in tests/e2e/test_web.py); its load size
is what the browser's Resource Timing reports (the page, its scripts, styles and libraries,
before any API call), decoded and as transferred (the door gzips the page's files). Time to
first token: from pressing Send to the first streamed text shown, measured in the page itself
(a MutationObserver) and, for ``hermesctl chat`` on a pseudo-terminal, from
the Enter key to the first word of the answer on its screen; interleaved page/chat/chat/page,
each round a fresh session.

    python bench/web.py [--quick] [--no-write] [--rounds N]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import common
from common import interleaved, machine, median, percentile

from tests.support.browser import chromium, log_in, wait_for
from tests.support.daemon import DaemonProcess, short_tmpdir, start_daemon
from tests.support.http_client import OWNER_TOKEN, free_port, http_config
from tests.support.modelserver import ScriptedModelServer, reply
from tests.support.terminal import Terminal

ANSWER = "Firstword then the rest of a short answer."
FIRST_TOKEN = """
const done = arguments[arguments.length - 1];
const box = document.querySelector('#message');
box.value = arguments[0];
const t0 = performance.now();
const seen = () => {
  const s = document.querySelector('#streaming .streaming, .msg.assistant .md');
  return s && s.textContent.includes('Firstword');
};
const watch = new MutationObserver(() => {
  if (seen()) { watch.disconnect(); done(performance.now() - t0); }
});
watch.observe(document.querySelector('#messages'), {childList: true, subtree: true,
  characterData: true});
document.querySelector('#send').click();
"""
LOADED = """
return performance.getEntriesByType('navigation').concat(performance.getEntriesByType('resource'))
  .filter(e => !e.name.includes('/v1/'))
  .map(e => [e.name, e.decodedBodySize, e.transferSize]);
"""


def page_load(port: int) -> tuple[int, int, int, int]:
    """(files, bytes, bytes transferred, requests to other hosts) of a first load of the page
    in a fresh browser."""
    driver = chromium()
    try:
        log_in(driver, port, OWNER_TOKEN)
        wait_for(driver, "#session-tree")
        entries = driver.execute_script(LOADED)
    finally:
        driver.quit()
    foreign = sum(not url.startswith(f"http://127.0.0.1:{port}/") for url, _, _ in entries)
    raw = sum(size for _, size, _ in entries)
    sent = sum(moved for _, _, moved in entries)
    return len(entries), raw, sent, foreign


def page_ttft(driver, port: int, daemon: DaemonProcess) -> float:
    sid = daemon.call("session.create", {"attach": False})["id"]
    driver.get(f"http://127.0.0.1:{port}/#/s/{sid}")
    wait_for(driver, "#stream-state[data-connected=yes]")
    driver.set_script_timeout(30)
    ms: float = driver.execute_async_script(FIRST_TOKEN, "hello")
    wait_for(driver, "#send:not([disabled])")
    return ms


def chat_ttft(daemon: DaemonProcess) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMES_")}
    env.update(HERMES_HOME=str(daemon.home), TERM="xterm", NO_COLOR="1")
    argv = [sys.executable, "-m", "hermesctl", "--socket", str(daemon.socket), "chat"]
    t = Terminal(argv, env)
    try:
        t.expect("› ")
        t.wait_reading()
        t0 = time.perf_counter()
        t.sendline("hello")
        t.expect("Firstword")
        ms = (time.perf_counter() - t0) * 1000
        t.expect("› ")
        return ms
    finally:
        t.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    rounds = 3 if args.quick else args.rounds
    started = common.now_utc()
    port = free_port()
    with ScriptedModelServer(rules=lambda request: reply(ANSWER)) as model:
        config = f"model:\n  base_url: {model.url}\n  default: scripted-model\n"
        daemon = start_daemon(short_tmpdir(), config=http_config(port, config))
        driver = chromium()
        try:
            files, raw, sent, foreign = page_load(port)
            log_in(driver, port, OWNER_TOKEN)
            page_ttft(driver, port, daemon)  # warm both
            chat_ttft(daemon)
            found: dict[str, list[float]] = {"page": [], "chat": []}
            for name in interleaved(rounds, ["page", "chat"]):
                ms = page_ttft(driver, port, daemon) if name == "page" else chat_ttft(daemon)
                found[name].append(ms)
        finally:
            driver.quit()
            daemon.stop()
    page, chat = found["page"], found["chat"]
    body = (
        f"First load: **{files} files, {raw / 1024:.1f} KiB** "
        f"({sent / 1024:.1f} KiB transferred, gzip-compressed with headers), "
        f"{foreign} requests to another host.\n\n"
        "| time to first token | p50 ms | p90 ms |\n|---|---|---|\n"
        f"| web page (Send → first text shown) | {median(page):.1f} "
        f"| {percentile(page, 90):.1f} |\n"
        f"| `hermesctl chat` (Enter → first word on screen) | {median(chat):.1f} "
        f"| {percentile(chat, 90):.1f} |\n\n"
        f"{len(page)} rounds each, interleaved; the model answers at once.\n"
    )
    common.publish(
        args, "web", "Web page: first load and time to first token", body, started, machine()
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
