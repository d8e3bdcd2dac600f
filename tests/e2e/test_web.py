"""The web page in a real browser (Debian's chromium, headless, through Selenium): log in, the
sessions and a conversation, a streamed answer, approvals on the page and in `hermesctl chat`,
diffs, an image upload, the usage chart, a daemon restart, accessibility (docs/web.md).
Screenshots of the main views go to tests/artifacts/."""

from __future__ import annotations

import base64
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from tests.support.browser import (
    CHROMEDRIVER,
    axe_violations,
    chromium,
    csp_violations,
    log_in,
    screenshot,
    wait_for,
)
from tests.support.daemon import DaemonProcess, short_tmpdir, start_daemon
from tests.support.http_client import MEMBER_TOKEN, OWNER_TOKEN, client, free_port, http_config
from tests.support.modelserver import ScriptedModelServer, call_tools, reply, tool_call
from tests.support.terminal import Terminal

pytestmark = pytest.mark.skipif(CHROMEDRIVER is None, reason="needs chromium-driver (apt)")

# the smallest PNG: one transparent pixel
PIXEL = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    driver = chromium()
    yield driver
    driver.quit()


@pytest.fixture
def page(browser: WebDriver) -> Iterator[WebDriver]:
    yield browser
    browser.delete_all_cookies()


def _config(model: ScriptedModelServer, port: int) -> str:
    base = (
        f"model:\n  base_url: {model.url}\n  default: scripted-model\n"
        "terminal:\n  cwd: /tmp\napprovals:\n  timeout: 60\n"
    )
    return http_config(port, base)


def _daemon(start, model: ScriptedModelServer) -> tuple[DaemonProcess, int]:
    port = free_port()
    return start(config=_config(model, port)), port


def _open(page: WebDriver, port: int, sid: str) -> None:
    page.get(f"http://127.0.0.1:{port}/#/s/{sid}")
    wait_for(page, "#stream-state[data-connected=yes]")


def _send(page: WebDriver, text: str) -> None:
    box = page.find_element(By.CSS_SELECTOR, "#message")
    box.send_keys(text)
    page.find_element(By.CSS_SELECTOR, "#send").click()


def test_logging_in_with_a_token_shows_the_sessions(page, start, model) -> None:
    daemon, port = _daemon(start, model)
    sid = daemon.call("session.create", {"title": "first chat", "attach": False})["id"]
    log_in(page, port, OWNER_TOKEN)
    wait_for(page, f"[data-session='{sid}']", "first chat")
    cookies = {c["name"]: c for c in page.get_cookies()}
    assert cookies["hermesd_token"]["httpOnly"] and cookies["hermesd_token"]["sameSite"] == "Strict"
    screenshot(page, "sessions")
    assert csp_violations(page) == []


def test_a_wrong_token_is_refused_at_the_login_form(page, start, model) -> None:
    _, port = _daemon(start, model)
    log_in(page, port, "not-the-token-0123456789")
    assert "not valid" in wait_for(page, "#login-error").text
    assert "hermesd_token" not in {c["name"] for c in page.get_cookies()}
    screenshot(page, "login-refused")


def test_a_conversation_shows_markdown_folded_tool_calls_and_a_diff(page, start, model) -> None:
    daemon, port = _daemon(start, model)
    target = short_tmpdir("wf-") / "notes.txt"
    model.push(
        call_tools(tool_call("write_file", {"path": str(target), "content": "alpha\nbeta\n"})),
        reply("Wrote **two lines**:\n\n```python\nprint('hi')\n```\n<img src=x onerror=alert(1)>"),
    )
    sid = daemon.call("session.create", {"title": "writer", "attach": False})["id"]
    daemon.call("session.send", {"session_id": sid, "message": "write it", "wait": True})
    log_in(page, port, OWNER_TOKEN)
    _open(page, port, sid)
    wait_for(page, ".msg.assistant strong", "two lines")
    assert "print('hi')" in wait_for(page, ".msg.assistant .md pre code").text
    assert page.find_elements(By.CSS_SELECTOR, ".msg.assistant img[onerror]") == []  # sanitised
    fold = wait_for(page, "details.tool", "write_file")
    assert fold.get_attribute("open") is None  # folded
    fold.find_element(By.TAG_NAME, "summary").click()
    added = [e.text for e in fold.find_elements(By.CSS_SELECTOR, ".diff .add")]
    assert added[:2] == ["+alpha", "+beta"]
    assert "ok" in fold.find_element(By.CSS_SELECTOR, ".tool-status").text
    screenshot(page, "conversation-diff")


def test_a_message_sent_on_the_page_streams_in(page, start, model) -> None:
    daemon, port = _daemon(start, model)
    model.push(reply("one two three four five six seven eight", chunk_delay=0.3, chunk_chars=4))
    sid = daemon.call("session.create", {"attach": False})["id"]
    log_in(page, port, OWNER_TOKEN)
    _open(page, port, sid)
    _send(page, "count for me")
    wait_for(page, ".msg.user", "count for me")
    partial = wait_for(page, "#streaming .streaming", "one")
    assert "eight" not in partial.text  # shown before the answer is complete
    screenshot(page, "streaming")
    wait_for(page, ".msg.assistant .md", "one two three four five six seven eight")
    history = daemon.call("session.history", {"session_id": sid})["messages"]
    assert [m["role"] for m in history] == ["user", "assistant"]


def test_cancel_on_the_page_stops_the_turn(page, start, model) -> None:
    daemon, port = _daemon(start, model)
    model.push(reply("word " * 200, chunk_delay=0.2, chunk_chars=10))
    sid = daemon.call("session.create", {"attach": False})["id"]
    log_in(page, port, OWNER_TOKEN)
    _open(page, port, sid)
    _send(page, "go on and on")
    wait_for(page, "#streaming .streaming", "word")
    page.find_element(By.CSS_SELECTOR, "#cancel").click()
    wait_for(page, ".msg.note", "Turn cancelled")


def test_a_slash_command_runs_in_the_session(page, start, model) -> None:
    daemon, port = _daemon(start, model)
    sid = daemon.call("session.create", {"attach": False})["id"]
    asked = len(model.requests)
    log_in(page, port, OWNER_TOKEN)
    _open(page, port, sid)
    page.find_element(By.CSS_SELECTOR, "#message").send_keys("/tit")
    wait_for(page, "#suggest button", "/title")
    page.find_element(By.CSS_SELECTOR, "#message").send_keys("le renamed from the page")
    page.find_element(By.CSS_SELECTOR, "#send").click()
    wait_for(page, ".msg.note", "/title renamed from the page")
    assert daemon.call("session.get", {"session_id": sid})["title"] == "renamed from the page"
    assert len(model.requests) == asked  # commands never reach the model
