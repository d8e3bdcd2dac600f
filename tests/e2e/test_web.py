"""The web page in a real browser (Debian's chromium, headless, through Selenium): log in, the
sessions and a conversation, a streamed answer, approvals on the page and in `hermesctl chat`,
diffs, an image upload, the usage chart, a daemon restart, accessibility (docs/web.md).
Screenshots of the main views go to tests/artifacts/."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from tests.support.botapi import BotApiServer
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
from tests.support.pictures import noise_png
from tests.support.plugin_factory import write_plugin
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
    browser.get_log("browser")  # what earlier tests left in the console
    yield browser
    browser.delete_all_cookies()


def _config(model: ScriptedModelServer, port: int, extra: str = "") -> str:
    base = (
        f"model:\n  base_url: {model.url}\n  default: scripted-model\n"
        "terminal:\n  cwd: /tmp\napprovals:\n  timeout: 60\n" + extra
    )
    return http_config(port, base)


def _daemon(start, model: ScriptedModelServer, extra: str = "") -> tuple[DaemonProcess, int]:
    port = free_port()
    return start(config=_config(model, port, extra)), port


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
    screenshot(page, "logged-in")
    assert csp_violations(page) == []


def test_a_wrong_token_is_refused_at_the_login_form(page, start, model) -> None:
    _, port = _daemon(start, model)
    log_in(page, port, "not-the-token-0123456789", accepted=False)
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


def test_the_list_nests_sub_sessions_searches_and_marks_running_turns(page, start, model) -> None:
    daemon, port = _daemon(start, model)
    model.push(reply("the zebra crossing is here"))
    parent = daemon.call("session.create", {"title": "parent chat", "attach": False})["id"]
    daemon.call("session.send", {"session_id": parent, "message": "where?", "wait": True})
    child = daemon.call("session.fork", {"session_id": parent, "title": "forked child"})["id"]
    other = daemon.call("session.create", {"title": "unrelated", "attach": False})["id"]
    log_in(page, port, OWNER_TOKEN)
    nested = wait_for(page, f"#session-tree ul ul [data-session='{child}']", "forked child")
    assert "msgs" in nested.text and "tokens" in nested.text
    page.find_element(By.CSS_SELECTOR, "#search").send_keys("zebra")  # words of a message
    wait_for(page, f"[data-session='{parent}']")
    assert page.find_elements(By.CSS_SELECTOR, f"[data-session='{other}']") == []
    model.push(reply("slow " * 200, chunk_delay=0.2, chunk_chars=10))
    page.find_element(By.CSS_SELECTOR, "#search").clear()
    daemon.call("session.send", {"session_id": other, "message": "go"})
    wait_for(page, f"[data-session='{other}'] .badge.live", "live")
    screenshot(page, "sessions")
    daemon.call("session.cancel", {"session_id": other})


def test_the_list_follows_sessions_and_turns_started_elsewhere_without_a_reload(
    page, start, model
) -> None:
    daemon, port = _daemon(start, model)
    log_in(page, port, OWNER_TOKEN)
    wait_for(page, "#session-tree[data-following=yes]")
    page.execute_script("window.notReloaded = true")
    # 10 s of streaming: time for the page to see the turn however slow the start
    model.push(reply("slow " * 100, chunk_delay=0.2, chunk_chars=10))
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMES_")}
    env.update(HERMES_HOME=str(daemon.home))
    argv = [sys.executable, "-m", "hermesctl", "--socket", str(daemon.socket), "chat"]
    chat = subprocess.Popen(
        [*argv, "-m", "from the terminal"], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        live = wait_for(page, "#session-tree [data-session] .badge.live", "live")
        sid = live.find_element(By.XPATH, "..").get_attribute("data-session")
        assert chat.wait(60) == 0
    finally:
        if chat.poll() is None:
            chat.kill()
        chat.communicate()
    WebDriverWait(page, 30, poll_frequency=0.05).until(
        lambda d: not d.find_elements(By.CSS_SELECTOR, f"[data-session='{sid}'] .badge.live")
    )
    assert page.execute_script("return window.notReloaded") is True
    daemon.call("session.delete", {"session_id": sid})
    WebDriverWait(page, 30, poll_frequency=0.05).until(
        lambda d: not d.find_elements(By.CSS_SELECTOR, f"[data-session='{sid}']")
    )


def test_the_models_question_is_answered_with_a_card(page, start, model) -> None:
    daemon, port = _daemon(start, model)
    question = {"question": "Which environment?", "choices": ["staging", "prod"]}
    model.push(call_tools(tool_call("clarify", question)), reply("deploying to prod"))
    sid = daemon.call("session.create", {"attach": False})["id"]
    log_in(page, port, OWNER_TOKEN)
    _open(page, port, sid)
    _send(page, "deploy")
    card = wait_for(page, ".card.clarify", "Which environment?")
    card.find_element(By.XPATH, ".//button[text()='prod']").click()
    wait_for(page, ".card.clarify.closed", "Answered here: prod")
    wait_for(page, ".msg.assistant .md", "deploying to prod")


def _chat(daemon: DaemonProcess, *args: str) -> Terminal:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMES_")}
    env.update(HERMES_HOME=str(daemon.home), TERM="xterm", NO_COLOR="1")
    argv = [sys.executable, "-m", "hermesctl", "--socket", str(daemon.socket), "chat", *args]
    return Terminal(argv, env)


def _danger(daemon: DaemonProcess, model: ScriptedModelServer, answer: str) -> Path:
    victim = daemon.home / "workspace" / "victim"
    victim.mkdir(parents=True, exist_ok=True)
    model.push(call_tools(tool_call("terminal", {"command": f"rm -r {victim}"})), reply(answer))
    return victim


def test_an_approval_answered_on_the_page_closes_the_prompt_in_hermesctl_chat(
    page, start, model
) -> None:
    daemon, port = _daemon(start, model)
    t = _chat(daemon)
    try:
        sid = t.expect(r"session (\S+)").group(1)
        t.expect("› ")
        t.wait_reading()
        log_in(page, port, OWNER_TOKEN)
        _open(page, port, sid)
        _danger(daemon, model, "cleaned")
        t.sendline("clean up")
        t.expect(r"Choice \[o/s/a/D\]: ")
        card = wait_for(page, ".card.approval", "rm -r")
        labels = [b.text for b in card.find_elements(By.TAG_NAME, "button")]
        assert labels == ["Allow once", "Allow for this session", "Always allow", "Deny"]
        screenshot(page, "approval-card")
        card.find_element(By.CSS_SELECTOR, "[data-choice=once]").click()
        wait_for(page, ".card.approval.closed", "Answered here: once")
        t.expect(r"Allowed once by .*answered elsewhere")
        wait_for(page, ".msg.assistant .md", "cleaned")
    finally:
        t.close()


def test_an_approval_raised_on_the_page_shows_in_an_idle_chat_and_its_answer_closes_the_card(
    page, start, model
) -> None:
    daemon, port = _daemon(start, model)
    sid = daemon.call("session.create", {"attach": False})["id"]
    t = _chat(daemon, "--session", sid)  # attached first, and idle at its prompt
    try:
        t.expect("› ")
        t.wait_reading()
        log_in(page, port, OWNER_TOKEN)
        _open(page, port, sid)
        _danger(daemon, model, "left alone")
        _send(page, "clean up")
        wait_for(page, ".card.approval", "rm -r")
        t.expect(r"Choice \[o/s/a/D\]: ")  # without a key pressed in the chat
        t.wait_reading()
        t.sendline("d")
        wait_for(page, ".card.approval.closed", "Answered elsewhere: deny")
        wait_for(page, ".msg.assistant .md", "left alone")
        t.expect("left alone")  # the idle chat tells what the page's turn answered
        t.expect("› ")
    finally:
        t.close()


def test_an_approval_raised_on_the_page_and_answered_there_closes_the_idle_chats_prompt(
    page, start, model
) -> None:
    daemon, port = _daemon(start, model)
    sid = daemon.call("session.create", {"attach": False})["id"]
    t = _chat(daemon, "--session", sid)
    try:
        t.expect("› ")
        t.wait_reading()
        log_in(page, port, OWNER_TOKEN)
        _open(page, port, sid)
        _danger(daemon, model, "cleaned")
        _send(page, "clean up")
        t.expect(r"Choice \[o/s/a/D\]: ")
        card = wait_for(page, ".card.approval", "rm -r")
        card.find_element(By.CSS_SELECTOR, "[data-choice=once]").click()
        wait_for(page, ".card.approval.closed", "Answered here: once")
        t.expect(r"Allowed once by .*answered elsewhere")
        t.expect("› ")
        wait_for(page, ".msg.assistant .md", "cleaned")
    finally:
        t.close()


def test_an_image_uploaded_on_the_page_is_sent_and_shown(page, start, model) -> None:
    daemon, port = _daemon(start, model)
    picture = short_tmpdir("img-") / "dot.png"
    picture.write_bytes(PIXEL)
    model.push(reply("a single pixel"))
    sid = daemon.call("session.create", {"attach": False})["id"]
    log_in(page, port, OWNER_TOKEN)
    _open(page, port, sid)
    page.find_element(By.CSS_SELECTOR, "#image").send_keys(str(picture))
    wait_for(page, "#image-preview img")
    _send(page, "what is this")
    wait_for(page, ".msg.assistant .md", "a single pixel")
    shown = page.find_element(By.CSS_SELECTOR, ".msg.user img")
    assert shown.get_attribute("src").startswith("data:image/png;base64,")
    [user] = [
        m
        for m in daemon.call("session.history", {"session_id": sid})["messages"]
        if m["role"] == "user"
    ]
    assert [i["mime"] for i in user["images"]] == ["image/png"]
    parts = model.last_request["messages"][-1]["content"]
    assert any(p.get("type") == "image_url" for p in parts)
    page.refresh()  # the stored image, from the history
    wait_for(page, "#stream-state[data-connected=yes]")
    assert (
        page.find_element(By.CSS_SELECTOR, ".msg.user img")
        .get_attribute("src")
        .startswith("data:image/png")
    )


def _upload(
    page: WebDriver, port: int, daemon: DaemonProcess, picture: Path
) -> tuple[dict[str, Any], str]:
    """Send ``picture`` with a message from the page; the stored user message, and what the
    preview said before sending."""
    sid = daemon.call("session.create", {"attach": False})["id"]
    _open(page, port, sid)
    page.find_element(By.CSS_SELECTOR, "#image").send_keys(str(picture))
    said = wait_for(page, "#image-preview img").find_element(By.XPATH, "..").text
    _send(page, "what is this")
    wait_for(page, ".msg.assistant .md", "noise")
    [user] = [
        m
        for m in daemon.call("session.history", {"session_id": sid})["messages"]
        if m["role"] == "user"
    ]
    return user, said


def test_a_photo_of_several_mib_is_uploaded_whole(page, start, model) -> None:
    daemon, port = _daemon(start, model)
    picture = short_tmpdir("img-") / "photo.png"
    picture.write_bytes(noise_png(900, 1000))
    assert picture.stat().st_size > 2 * 1024 * 1024  # over http.max_body's 1 MiB, as base64
    model.push(reply("just noise"))
    log_in(page, port, OWNER_TOKEN)
    user, said = _upload(page, port, daemon, picture)
    assert "scaled" not in said
    assert [(i["mime"], i["bytes"]) for i in user["images"]] == [
        ("image/png", picture.stat().st_size)
    ]


def test_a_photo_over_what_the_daemon_keeps_is_scaled_down_on_the_page(page, start, model) -> None:
    daemon, port = _daemon(start, model)
    picture = short_tmpdir("img-") / "big.png"
    picture.write_bytes(noise_png(1600, 1500))
    assert picture.stat().st_size > 6 * 1024 * 1024
    model.push(reply("scaled noise"))
    log_in(page, port, OWNER_TOKEN)
    user, said = _upload(page, port, daemon, picture)
    assert "big.png: scaled down to" in said
    [image] = user["images"]
    assert image["mime"] == "image/jpeg" and image["bytes"] <= 3 * 1024 * 1024


def test_the_usage_view_draws_tokens_per_day_and_model(page, start, model) -> None:
    prices = "pricing:\n  scripted-model: {input_per_mtok: 1000, output_per_mtok: 2000}\n"
    daemon, port = _daemon(start, model, "budget:\n  daily_usd: 10\n" + prices)
    model.push(reply("counted", usage={"prompt_tokens": 1200, "completion_tokens": 300}))
    sid = daemon.call("session.create", {"attach": False})["id"]
    daemon.call("session.send", {"session_id": sid, "message": "hi", "wait": True})
    log_in(page, port, OWNER_TOKEN)
    page.get(f"http://127.0.0.1:{port}/#/usage")
    wait_for(page, "#usage-charts .uplot canvas")
    row = wait_for(page, "#usage-table tbody tr", "scripted-model")
    assert "1,500" in row.text and "$1.8000" in row.text  # 1200 × $1000/M + 300 × $2000/M
    today = wait_for(page, "label[for=budget-Today]", "of $10")
    assert "$1.8000" in today.text
    assert page.find_element(By.ID, "budget-Today").get_attribute("value") == "1.8"
    screenshot(page, "usage")
    assert csp_violations(page) == []


def test_the_status_view_lists_the_daemon_and_runs_a_cron_job(page, start, model) -> None:
    home = short_tmpdir("st-")
    write_plugin(
        home / "plugins", "broken", "def register(ctx):\n    raise RuntimeError('no luck')\n"
    )
    port = free_port()
    daemon = start(home, config=_config(model, port))
    daemon.call("cron.create", {"prompt": "say hi", "schedule": "every 2h", "name": "greeter"})
    model.push(reply("hi from cron"))
    log_in(page, port, OWNER_TOKEN)
    page.get(f"http://127.0.0.1:{port}/#/status")
    assert wait_for(page, "#sandbox-mode").text
    broken = wait_for(page, "#plugins tr", "broken")
    assert "error" in broken.find_element(By.CSS_SELECTOR, "td.bad").text
    assert "no luck" in broken.text
    assert "calculate" in wait_for(page, "#plugins tr", "calculator").text  # what it registered
    wait_for(page, "#log", "HTTP door listening")
    wait_for(page, "#cron button", "Run greeter now").click()
    wait_for(page, "#cron td.ok", "ok")
    assert "Invalid" not in page.find_element(By.CSS_SELECTOR, "#cron").text  # dates shown
    screenshot(page, "status")


def test_the_status_view_shows_the_telegram_adapter_its_state_and_who_waits_to_pair(
    page, start, model
) -> None:
    with BotApiServer() as api:
        port = free_port()
        telegram = (
            "gateway:\n  platforms:\n    telegram:\n"
            f"      token: '{api.token}'\n      base_url: {api.base_url}\n      owners: ['111']\n"
        )
        start(short_tmpdir("gw-"), config=_config(model, port, telegram))
        api.wait_call("getMe")
        api.user_says(333, "hello, who are you?")  # a stranger: asked to pair
        api.wait_sent(333, "pairing code")
        log_in(page, port, OWNER_TOKEN)
        page.get(f"http://127.0.0.1:{port}/#/status")
        row = wait_for(page, "#gateway tbody tr", "telegram")
        assert row.find_element(By.CSS_SELECTOR, "td.ok").text == "connected"
        assert "user333 (333)" in wait_for(page, "#pairing tbody tr", "telegram").text
        page.execute_script("arguments[0].scrollIntoView()", row)
        screenshot(page, "status-gateway")
        api.revoked = True  # the token was revoked: the adapter cannot go on

        def failed(d: WebDriver) -> list[Any]:
            d.refresh()  # the view shows the state it was opened with
            wait_for(d, "#gateway tbody tr", "telegram")
            return d.find_elements(By.CSS_SELECTOR, "#gateway tbody tr td.bad")

        [state] = WebDriverWait(page, 60, poll_frequency=1).until(failed)
        assert state.text.startswith("error: token: "), state.text


def test_a_member_sees_owner_only_parts_refused(page, start, model) -> None:
    _, port = _daemon(start, model)
    log_in(page, port, MEMBER_TOKEN)
    page.get(f"http://127.0.0.1:{port}/#/status")
    wait_for(page, "section[aria-label='Recent log (redacted)'] .error", "owner only")


def test_the_page_reconnects_after_a_daemon_restart(page, model) -> None:
    port = free_port()
    home = short_tmpdir()
    config = _config(model, port)
    daemon = start_daemon(home, config=config)
    try:
        sid = daemon.call("session.create", {"attach": False})["id"]
        model.push(reply("before the restart"))
        daemon.call("session.send", {"session_id": sid, "message": "one", "wait": True})
        log_in(page, port, OWNER_TOKEN)
        _open(page, port, sid)
        wait_for(page, ".msg.assistant .md", "before the restart")
    finally:
        daemon.stop()
    wait_for(page, "#stream-state", "reconnecting")
    daemon = start_daemon(home, config=config)
    try:
        wait_for(page, "#stream-state", "live")
        model.push(reply("after the restart"))
        with client(port) as c:
            c.post(f"/v1/sessions/{sid}/messages", json={"message": "two"})
        wait_for(page, ".msg.assistant .md", "after the restart")
        texts = [e.text for e in page.find_elements(By.CSS_SELECTOR, ".msg.assistant .md")]
        assert texts == ["before the restart", "after the restart"]
        resumed = page.find_element(By.CSS_SELECTOR, "#stream-state").get_attribute(
            "data-resumed-from"
        )
        assert int(resumed) > 0  # the stream was resumed after the last event seen
    finally:
        daemon.stop()


def test_the_main_views_pass_the_accessibility_checker(page, start, model) -> None:
    daemon, port = _daemon(start, model)
    model.push(reply("Some **markdown** answer."))
    sid = daemon.call("session.create", {"title": "a11y", "attach": False})["id"]
    daemon.call("session.send", {"session_id": sid, "message": "hello", "wait": True})
    page.get(f"http://127.0.0.1:{port}/")
    wait_for(page, "#token")
    assert axe_violations(page) == []
    log_in(page, port, OWNER_TOKEN)
    _open(page, port, sid)
    wait_for(page, ".msg.assistant .md", "markdown")
    for view, ready in (
        ("#/s/" + sid, ".msg.assistant"),
        ("#/usage", "#usage-table"),
        ("#/status", "#log"),
    ):
        page.get(f"http://127.0.0.1:{port}/{view}")
        wait_for(page, ready)
        found = axe_violations(page)
        assert [(v["id"], v["help"], [n["target"] for n in v["nodes"]][:3]) for v in found] == []
    page.get(f"http://127.0.0.1:{port}/")  # keyboard: Tab reaches the nav, then the search
    wait_for(page, "#search")
    focused = []
    for _ in range(9):
        page.switch_to.active_element.send_keys("\t")
        focused.append(page.switch_to.active_element.get_attribute("id") or "")
    assert "search" in focused and "new-session" in focused


def test_opening_a_session_mid_turn_shows_what_it_streamed_so_far(page, start, model) -> None:
    daemon, port = _daemon(start, model)
    words = " ".join(f"w{i}" for i in range(80))
    model.push(reply(words, chunk_delay=0.25, chunk_chars=6))
    sid = daemon.call("session.create", {"attach": False})["id"]
    log_in(page, port, OWNER_TOKEN)
    with daemon.client() as sock:
        sock.call("session.send", {"session_id": sid, "message": "a long one"})
        shown = ""
        while "w3 " not in shown:  # some words are out before the page opens
            note = sock.next_notification(timeout=20)
            assert note is not None
            shown += note.params[0].get("text") or "" if note.method == "session.event" else ""
        assert daemon.call("session.get", {"session_id": sid})["running"]
        _open(page, port, sid)
        wait_for(page, ".msg.user", "a long one")
        streamed = wait_for(page, "#streaming .streaming", "w1 ")
        assert streamed.text.startswith("w0 w1")  # from the start, not from the page's opening
        wait_for(page, ".msg.assistant .md", "w79")
    assert len(page.find_elements(By.CSS_SELECTOR, ".msg.user")) == 1
