"""Signing in to the web page through a plugin's dashboard auth provider (docs/web.md,
"Logging in with a provider"): a real daemon with a provider plugin written against the
reference's interface, driven over real HTTP and, once, in headless chromium."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx2 as httpx
import pytest

from tests.support.browser import (
    CHROMEDRIVER,
    axe_violations,
    chromium,
    csp_violations,
    screenshot,
    wait_for,
)
from tests.support.daemon import DaemonProcess, short_tmpdir
from tests.support.http_client import free_port, http_config
from tests.support.modelserver import ScriptedModelServer
from tests.support.signin import http_extra, identity_service, provider_plugin


@pytest.fixture
def idp() -> Iterator[str]:
    with identity_service() as url:
        yield url


def _daemon(
    start, model: ScriptedModelServer, idp: str, password: bool, timeout: float = 5
) -> tuple[DaemonProcess, int, Path]:
    home = short_tmpdir("signin-")
    plugin = provider_plugin(home, idp, password)
    port = free_port()
    base = f"model:\n  base_url: {model.url}\n  default: scripted-model\n"
    daemon = start(home, config=http_config(port, base, http_extra(timeout)))
    return daemon, port, plugin


def _browser(port: int) -> httpx.Client:
    """A cookie-keeping client with no bearer token, as a browser is."""
    return httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30, follow_redirects=True)


def _password(c: httpx.Client, user: str, password: str) -> httpx.Response:
    return c.post("/auth/password-login", data={"username": user, "password": password})


def _rpc(c: httpx.Client, method: str) -> httpx.Response:
    return c.post(f"/v1/rpc/{method}", json={}, headers={"X-CSRF-Token": c.cookies["hermesd_csrf"]})


def _calls(plugin: Path) -> list[str]:
    path = plugin / "calls"
    return path.read_text().splitlines() if path.exists() else []


def test_the_login_page_offers_the_providers_password_form(start, model, idp) -> None:
    _, port, _ = _daemon(start, model, idp, password=True)
    with _browser(port) as c:
        page = c.get("/").text
    assert 'id="password-form"' in page and "Log in with Test Portal" in page
    assert 'id="login-form"' in page  # tokens still work


def test_a_password_login_signs_the_owner_in(start, model, idp) -> None:
    _, port, _ = _daemon(start, model, idp, password=True)
    with _browser(port) as c:
        answer = _password(c, "alice", "wonderland")
        assert answer.status_code == 200 and 'id="view"' in answer.text  # the page itself
        assert c.get("/v1/web/me").json()["trust"] == "owner"
        assert _rpc(c, "config.reload").status_code == 200
    cookie = next(k for k in c.cookies.jar if k.name == "hermesd_login")
    assert cookie.has_nonstandard_attr("HttpOnly")


def test_a_wrong_password_gets_a_generic_401(start, model, idp) -> None:
    _, port, _ = _daemon(start, model, idp, password=True)
    with _browser(port) as c:
        wrong = _password(c, "alice", "nope")
        unknown = _password(c, "zed", "nope")
        assert wrong.status_code == unknown.status_code == 401
        assert "not valid here" in wrong.text and "alice" not in wrong.text
        assert "hermesd_login" not in c.cookies
        assert c.get("/v1/web/me").status_code == 401


def test_password_attempts_are_limited_per_address(start, model, idp) -> None:
    _, port, _ = _daemon(start, model, idp, password=True)
    with _browser(port) as c:
        tries = [_password(c, "alice", f"guess-{n}").status_code for n in range(11)]
    assert tries == [401] * 10 + [429]


def test_a_provider_outage_is_a_503_and_others_are_still_served(start, model, idp) -> None:
    daemon, port, _ = _daemon(start, model, idp, password=True)
    with _browser(port) as c:
        down = _password(c, "down", "whatever")
        assert down.status_code == 503 and "directory offline" in down.text
        assert _password(c, "alice", "wonderland").status_code == 200
        assert c.get("/v1/web/me").status_code == 200
    assert "directory offline" in daemon.log()


def test_a_provider_too_slow_to_answer_is_a_503(start, model, idp) -> None:
    daemon, port, _ = _daemon(start, model, idp, password=True, timeout=1)
    with _browser(port) as c:
        slow = _password(c, "slow", "whatever")
        assert slow.status_code == 503 and "did not answer in time" in slow.text
        assert _password(c, "alice", "wonderland").status_code == 200
    assert "did not answer in 1.0s" in daemon.log()


def test_a_provider_that_raises_is_a_500_with_the_traceback_in_the_log(start, model, idp) -> None:
    daemon, port, _ = _daemon(start, model, idp, password=True)
    with _browser(port) as c:
        crash = _password(c, "crash", "whatever")
        assert crash.status_code == 500 and "see the daemon log" in crash.text
        assert "tripped" not in crash.text
    log = daemon.log()
    assert "Traceback" in log and "the plugin tripped over itself" in log


def test_a_member_sign_in_cannot_reach_owner_only_methods(start, model, idp) -> None:
    _, port, _ = _daemon(start, model, idp, password=True)
    with _browser(port) as c:
        assert _password(c, "bob", "builder").status_code == 200
        me = c.get("/v1/web/me").json()
        assert me["trust"] == "member" and me["name"] == "nobody"
        assert _rpc(c, "config.reload").status_code == 403


def test_a_person_not_in_auth_users_is_refused_and_revoked(start, model, idp) -> None:
    _, port, plugin = _daemon(start, model, idp, password=True)
    with _browser(port) as c:
        answer = _password(c, "mallory", "evil")
        assert answer.status_code == 403 and "may not use this daemon" in answer.text
        assert "hermesd_login" not in c.cookies
    assert "revoke_session mallory" in _calls(plugin)


def test_a_post_without_the_csrf_value_is_refused(start, model, idp) -> None:
    _, port, _ = _daemon(start, model, idp, password=True)
    with _browser(port) as c:
        _password(c, "alice", "wonderland")
        assert c.post("/v1/rpc/config.reload", json={}).status_code == 403


def test_logging_out_revokes_the_providers_session(start, model, idp) -> None:
    _, port, plugin = _daemon(start, model, idp, password=True)
    with _browser(port) as c:
        _password(c, "alice", "wonderland")
        login = c.cookies["hermesd_login"]
        csrf = c.cookies["hermesd_csrf"]
        assert c.post("/logout", headers={"X-CSRF-Token": csrf}).status_code == 200
    assert "revoke_session alice" in _calls(plugin)
    with _browser(port) as other:  # the old cookie is worth nothing now
        other.cookies.set("hermesd_login", login)
        assert other.get("/v1/web/me").status_code == 401


def test_a_session_near_expiry_is_refreshed_then_ends_when_refresh_dies(start, model, idp) -> None:
    _, port, plugin = _daemon(start, model, idp, password=True)
    with _browser(port) as c:
        # carol's sessions are always due; two refreshes left: the page after the sign-in,
        assert _password(c, "carol", "singer").status_code == 200
        assert c.get("/v1/web/me").status_code == 200  # then this request
        assert c.get("/v1/web/me").status_code == 401  # the refresh token is dead
        assert "Log in with" in c.get("/").text
    assert _calls(plugin).count("refresh_session") == 3


def test_the_oauth_round_trip_signs_in_through_the_callback(start, model, idp) -> None:
    _, port, plugin = _daemon(start, model, idp, password=False)
    with _browser(port) as c:
        assert 'id="provider-login"' in c.get("/").text
        answer = c.get("/auth/login")
        assert answer.status_code == 200 and str(answer.url) == f"http://127.0.0.1:{port}/"
        hops = [str(r.url).split("?")[0] for r in answer.history]
        assert hops[1] == f"{idp}/authorize"
        assert hops[2] == f"http://127.0.0.1:{port}/auth/callback"
        assert c.get("/v1/web/me").json()["trust"] == "owner"
    calls = _calls(plugin)
    assert f"start_login http://127.0.0.1:{port}/auth/callback" in calls
    assert "complete_login alice-code" in calls


def test_a_callback_with_a_forged_state_is_a_400(start, model, idp) -> None:
    _, port, plugin = _daemon(start, model, idp, password=False)
    with _browser(port) as c:
        c.get("/auth/login", follow_redirects=False)
        forged = c.get("/auth/callback", params={"code": "alice-code", "state": "forged"})
        assert forged.status_code == 400 and "state does not match" in forged.text
        assert c.get("/v1/web/me").status_code == 401
    assert not any(line.startswith("complete_login") for line in _calls(plugin))


def test_a_callback_not_started_here_is_a_400(start, model, idp) -> None:
    _, port, _ = _daemon(start, model, idp, password=False)
    with _browser(port) as c:
        answer = c.get("/auth/callback", params={"code": "alice-code", "state": "x"})
        assert answer.status_code == 400 and "not started here" in answer.text


@pytest.mark.skipif(CHROMEDRIVER is None, reason="needs chromium-driver (apt)")
def test_a_browser_signs_in_with_the_provider_and_logs_out(start, model, idp) -> None:
    _, port, plugin = _daemon(start, model, idp, password=False)
    driver = chromium()
    try:
        driver.get(f"http://127.0.0.1:{port}/")
        offer = wait_for(driver, "#provider-login", "Log in with Test Portal")
        screenshot(driver, "login-with-provider")
        assert axe_violations(driver) == []
        offer.click()
        wait_for(driver, "#view")
        cookies = {c["name"]: c for c in driver.get_cookies()}
        login = cookies["hermesd_login"]
        assert login["httpOnly"] and login["sameSite"] == "Lax"
        assert "hermes_session_pkce" not in cookies  # the flow's cookies are gone
        screenshot(driver, "signed-in-with-provider")
        assert csp_violations(driver) == []
        wait_for(driver, "#logout").click()
        wait_for(driver, "#provider-login")
        assert "hermesd_login" not in {c["name"] for c in driver.get_cookies()}
    finally:
        driver.quit()
    assert "revoke_session alice" in _calls(plugin)


@pytest.mark.skipif(CHROMEDRIVER is None, reason="needs chromium-driver (apt)")
def test_a_member_signed_in_by_password_sees_owner_only_parts_refused(start, model, idp) -> None:
    _, port, _ = _daemon(start, model, idp, password=True)
    driver = chromium()
    try:
        driver.get(f"http://127.0.0.1:{port}/")
        wait_for(driver, "#username").send_keys("bob")
        wait_for(driver, "#password").send_keys("builder")
        assert axe_violations(driver) == []
        wait_for(driver, "#password-login").click()
        wait_for(driver, "#view")
        driver.get(f"http://127.0.0.1:{port}/#/status")
        wait_for(driver, "section[aria-label='Recent log (redacted)'] .error", "owner only")
        screenshot(driver, "member-signed-in-with-password")
    finally:
        driver.quit()
