"""The web page's request checks (hermesd.http.page): the CSRF value, who is cookie-authenticated,
which cookie requests may go on."""

from __future__ import annotations

from starlette.requests import Request

from hermesd.http.page import CSP, cookie_token, csrf_refusal, csrf_value

TOKEN = "owner-token-0123456789abcdef"


def _request(method: str, headers: dict[str, str]) -> Request:
    raw = [
        (k.lower().encode(), v.encode()) for k, v in {"host": "127.0.0.1:8642", **headers}.items()
    ]
    return Request({"type": "http", "method": method, "path": "/v1/sessions", "headers": raw})


def test_the_csrf_value_is_bound_to_the_token() -> None:
    assert csrf_value(TOKEN) == csrf_value(TOKEN)
    assert csrf_value(TOKEN) != csrf_value(TOKEN + "x")
    assert TOKEN not in csrf_value(TOKEN)


def test_a_request_with_an_authorization_header_is_not_cookie_authenticated() -> None:
    cookie = {"cookie": f"hermesd_token={TOKEN}"}
    assert cookie_token(_request("GET", cookie)) == TOKEN
    both = {**cookie, "authorization": "Bearer other-token-0123456789"}
    assert cookie_token(_request("GET", both)) is None
    assert cookie_token(_request("GET", {})) is None


def test_a_cookie_request_that_changes_something_needs_the_csrf_value() -> None:
    assert csrf_refusal(_request("GET", {}), TOKEN) is None
    assert "X-CSRF-Token" in (csrf_refusal(_request("POST", {}), TOKEN) or "")
    wrong = {"x-csrf-token": csrf_value("another-token-0123456789")}
    assert csrf_refusal(_request("POST", wrong), TOKEN) is not None
    right = {"x-csrf-token": csrf_value(TOKEN)}
    assert csrf_refusal(_request("POST", right), TOKEN) is None
    assert csrf_refusal(_request("DELETE", right), TOKEN) is None


def test_a_cookie_request_from_another_origin_is_refused() -> None:
    right = {"x-csrf-token": csrf_value(TOKEN)}
    here = {**right, "origin": "http://127.0.0.1:8642"}
    assert csrf_refusal(_request("POST", here), TOKEN) is None
    for origin in ("http://evil.example", "null", "http://127.0.0.1:9999"):
        refused = csrf_refusal(_request("POST", {**right, "origin": origin}), TOKEN)
        assert refused == "the request comes from another origin", origin


def test_the_policy_allows_no_inline_code_and_no_other_origin() -> None:
    rules = dict(part.strip().split(" ", 1) for part in CSP.split(";"))
    assert rules["default-src"] == "'none'"
    assert rules["script-src"] == "'self'" and rules["connect-src"] == "'self'"
    assert rules["frame-ancestors"] == "'none'"
    assert "unsafe" not in CSP
