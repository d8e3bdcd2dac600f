"""The web page's HTTP side without a browser: security headers, the login cookie, CSRF,
bearer clients unchanged, the page switched off, the usage per day (docs/web.md)."""

from __future__ import annotations

import base64
import contextlib
import json
import shutil
import subprocess
from collections.abc import Iterator
from typing import Any

import httpx2 as httpx
import pytest

from hermesd.http.page import csrf_value
from tests.support.daemon import run_hermesctl, short_tmpdir
from tests.support.http_client import (
    MEMBER_TOKEN,
    OWNER_TOKEN,
    client,
    events,
    free_port,
    http_config,
)
from tests.support.modelserver import reply
from tests.support.pictures import noise_png


def _door(start, extra: str = "") -> int:
    port = free_port()
    start(config=http_config(port, http_extra=extra))
    return port


def _browser(port: int) -> httpx.Client:
    return httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30)


@contextlib.contextmanager
def _logged_in(port: int, token: str = OWNER_TOKEN) -> Iterator[httpx.Client]:
    with _browser(port) as c:
        assert c.post("/login", data={"token": token}).status_code == 303
        yield c


def test_the_page_and_its_files_carry_a_strict_content_security_policy(start) -> None:
    port = _door(start)
    with _browser(port) as c:
        for path in ("/", "/web/app.js", "/web/app.css", "/web/vendor/marked.min.js"):
            answer = c.get(path)
            assert answer.status_code == 200, path
            csp = answer.headers["content-security-policy"]
            assert "default-src 'none'" in csp and "script-src 'self';" in csp
            assert "unsafe" not in csp and "http" not in csp  # no inline code, no other origin
            assert answer.headers["x-content-type-options"] == "nosniff"
            assert answer.headers["x-frame-options"] == "DENY"
        assert c.get("/web/app.js").headers["content-type"].startswith("text/javascript")
        assert "<script" not in c.get("/").text  # the login form needs no script


def test_only_the_page_files_are_served(start) -> None:
    port = _door(start)
    with _browser(port) as c:
        for path in (
            "/web/../page.py",
            "/web/%2e%2e/page.py",
            "/web/nosuch.js",
            "/web/vendor/VERSIONS",
        ):
            assert c.get(path).status_code == 404, path


def test_login_sets_an_httponly_samesite_strict_cookie(start) -> None:
    port = _door(start)
    with _browser(port) as c:
        answer = c.post("/login", data={"token": OWNER_TOKEN})
        assert answer.status_code == 303 and answer.headers["location"] == "/"
        cookies = answer.headers.get_list("set-cookie")
        token = next(h for h in cookies if h.startswith("hermesd_token="))
        assert "HttpOnly" in token and "SameSite=strict" in token and "Path=/" in token
        csrf = next(h for h in cookies if h.startswith("hermesd_csrf="))
        assert "HttpOnly" not in csrf and csrf_value(OWNER_TOKEN) in csrf
        page = c.get("/")
        assert 'src="/web/app.js"' in page.text  # the page itself now, not the form


def test_a_wrong_token_at_the_login_form_gets_401_and_no_cookie(start) -> None:
    port = _door(start)
    with _browser(port) as c:
        answer = c.post("/login", data={"token": "wrong-token-0123456789"})
        assert answer.status_code == 401 and "not valid" in answer.text
        assert "set-cookie" not in answer.headers
        assert c.post("/login", data={}).status_code == 401


def test_a_login_posted_from_another_origin_is_refused(start) -> None:
    port = _door(start)
    with _browser(port) as c:
        answer = c.post(
            "/login", data={"token": OWNER_TOKEN}, headers={"Origin": "http://evil.example"}
        )
        assert answer.status_code == 403 and "set-cookie" not in answer.headers


def test_a_cookie_post_needs_the_csrf_header_and_this_origin(start) -> None:
    port = _door(start)
    with _logged_in(port) as c:
        assert c.get("/v1/sessions").status_code == 200  # a GET needs no CSRF value
        refused = c.post("/v1/sessions", json={})
        assert refused.status_code == 403 and "X-CSRF-Token" in refused.json()["error"]["message"]
        assert (
            c.post("/v1/sessions", json={}, headers={"X-CSRF-Token": "0" * 64}).status_code == 403
        )
        good = {"X-CSRF-Token": csrf_value(OWNER_TOKEN)}
        cross = c.post("/v1/sessions", json={}, headers={**good, "Origin": "http://evil.example"})
        assert cross.status_code == 403
        here = {**good, "Origin": f"http://127.0.0.1:{port}"}
        assert c.post("/v1/sessions", json={}, headers=here).status_code == 200
        assert c.post("/logout", headers=here).status_code == 303


def test_bearer_clients_need_no_csrf_value(start) -> None:
    port = _door(start)
    with client(port) as c:
        assert c.post("/v1/sessions", json={}).status_code == 200
        assert c.get("/v1/web/me").json()["trust"] == "owner"
    with client(port, MEMBER_TOKEN) as c:
        assert c.get("/v1/web/me").json()["trust"] == "member"
    with client(port, None) as c:
        assert c.get("/v1/web/me").status_code == 401


def test_logout_forgets_the_cookies(start) -> None:
    port = _door(start)
    with _logged_in(port) as c:
        answer = c.post("/logout", headers={"X-CSRF-Token": csrf_value(OWNER_TOKEN)})
        assert answer.status_code == 303
        assert c.get("/v1/sessions").status_code == 401
        assert 'id="login-form"' in c.get("/").text


def test_usage_per_day_lists_each_day_and_checks_its_window(start) -> None:
    port = _door(start)
    with client(port) as c:
        week = c.get("/v1/web/usage", params={"days": 7}).json()
        assert len(week["days"]) == 7 and set(week) >= {"today", "month", "budget"}
        assert [d["day"] for d in week["days"]] == sorted(d["day"] for d in week["days"])
        assert c.get("/v1/web/usage", params={"days": 0}).status_code == 400
        assert c.get("/v1/web/usage", params={"days": "x"}).status_code == 400


def test_the_page_is_off_with_http_web_false(start) -> None:
    port = _door(start, "  web: false\n")
    with _browser(port) as c:
        assert c.get("/").status_code == 404
        assert c.get("/web/app.js").status_code == 404
        assert c.post("/login", data={"token": OWNER_TOKEN}).status_code in (404, 405)
    with client(port) as c:
        assert c.get("/v1/sessions").status_code == 200


def test_hermesctl_status_and_the_log_print_the_page_address(start) -> None:
    port = free_port()
    daemon = start(config=http_config(port))
    done = run_hermesctl(["--socket", str(daemon.socket), "status"])
    assert f"web page:    http://127.0.0.1:{port}/" in done.stdout
    assert f"web page: http://127.0.0.1:{port}/" in daemon.log()


def test_the_page_files_travel_compressed_and_revalidate(start) -> None:
    port = _door(start)
    with _browser(port) as c:
        plain = c.get("/web/vendor/uPlot.iife.min.js", headers={"Accept-Encoding": "identity"})
        packed = c.get("/web/vendor/uPlot.iife.min.js", headers={"Accept-Encoding": "gzip"})
        assert packed.headers["content-encoding"] == "gzip"
        assert packed.content == plain.content  # decoded by the client
        assert int(packed.headers["content-length"]) < len(plain.content) / 2
        again = c.get(
            "/web/vendor/uPlot.iife.min.js",
            headers={"Accept-Encoding": "gzip", "If-None-Match": packed.headers["etag"]},
        )
        assert again.status_code == 304 and again.content == b""


def test_the_list_feed_names_changed_sessions_to_the_owner_and_not_to_a_member(start) -> None:
    port = free_port()
    daemon = start(config=http_config(port))
    seen: dict[str, list[dict[str, Any]]] = {}
    with (
        client(port) as owner,
        client(port, MEMBER_TOKEN) as member,
        owner.stream("GET", "/v1/web/sessions/events") as own,
        member.stream("GET", "/v1/web/sessions/events") as theirs,
    ):
        streams = {"owner": events(own.iter_lines()), "member": events(theirs.iter_lines())}
        for feed in streams.values():
            assert next(feed)["event"] == "ready"
        sid = daemon.call("session.create", {"attach": False})["id"]
        daemon.call("session.rename", {"session_id": sid, "title": "renamed"})
        daemon.call("session.delete", {"session_id": sid})
        for name, feed in streams.items():
            seen[name] = [next(feed) for _ in range(3)]
    kinds = ["session.created", "session.renamed", "session.deleted"]
    assert [e["event"] for e in seen["owner"]] == kinds
    assert [e["data"] for e in seen["owner"]] == [{"session_id": sid}] * 3
    assert [e["event"] for e in seen["member"]] == kinds
    assert [e["data"] for e in seen["member"]] == [{}] * 3


def _curl_post(port: int, path: str, body: bytes) -> tuple[int, dict[str, Any]]:
    """POST ``body`` with curl, as the owner; the status and the JSON answer."""
    sent = short_tmpdir("up-") / "body.json"
    sent.write_bytes(body)
    got = sent.with_name("answer.json")
    status = subprocess.run(
        [
            "curl", "-sS", "-o", str(got), "-w", "%{http_code}",
            "-H", f"Authorization: Bearer {OWNER_TOKEN}",
            "-H", "Content-Type: application/json",
            "--data-binary", f"@{sent}",
            f"http://127.0.0.1:{port}{path}",
        ],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    return int(status), json.loads(got.read_bytes() or b"{}")


def _image_body(png: bytes) -> bytes:
    url = "data:image/png;base64," + base64.b64encode(png).decode()
    return json.dumps({"message": "what is this", "images": [url]}).encode()


@pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl")
def test_a_message_with_images_may_exceed_max_body_up_to_max_upload_mb(start, model) -> None:
    port = free_port()
    base = f"model:\n  base_url: {model.url}\n  default: scripted-model\n"
    daemon = start(config=http_config(port, base, "  max_upload_mb: 2\n"))
    sid = daemon.call("session.create", {"attach": False})["id"]
    model.push(reply("noise"))
    body = _image_body(noise_png(600, 600))
    assert 1024 * 1024 < len(body) < 2 * 1024 * 1024  # over http.max_body, under the upload
    status, answer = _curl_post(port, f"/v1/sessions/{sid}/messages", body)
    assert status == 200, answer
    status, answer = _curl_post(port, "/v1/rpc/status", body)  # other routes: http.max_body
    assert status == 413 and "(http.max_body)" in answer["error"]["message"]


@pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl")
def test_a_message_over_max_upload_mb_is_refused_with_413_naming_the_setting(start) -> None:
    port = free_port()
    daemon = start(config=http_config(port, http_extra="  max_upload_mb: 2\n"))
    sid = daemon.call("session.create", {"attach": False})["id"]
    body = _image_body(noise_png(900, 900))
    assert len(body) > 2 * 1024 * 1024
    status, answer = _curl_post(port, f"/v1/sessions/{sid}/messages", body)
    assert status == 413
    assert answer["error"]["code"] == "body_too_large"
    assert answer["error"]["message"] == f"request body over {2 << 20} bytes (http.max_upload_mb)"
    assert daemon.call("session.history", {"session_id": sid})["messages"] == []
