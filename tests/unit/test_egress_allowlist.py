"""``sandbox.allowed_domains`` matching and the egress proxy's reading of a request head."""

from __future__ import annotations

import base64

import pytest

from hermesd.sandbox.allowlist import DomainAllowList, DomainRule, canonical_host, entries_problem
from hermesd.sandbox.egress import ProxyError, parse_head


def allows(entries: list[str], host: str) -> bool:
    return DomainAllowList(entries).allows(canonical_host(host))


def test_a_plain_name_matches_itself_only() -> None:
    assert allows(["pypi.org"], "pypi.org")
    assert not allows(["pypi.org"], "files.pypi.org")
    assert not allows(["pypi.org"], "evilpypi.org")
    assert not allows(["pypi.org"], "pypi.org.evil.com")


def test_a_wildcard_matches_names_below_it_not_the_name_itself() -> None:
    assert allows(["*.github.com"], "api.github.com")
    assert allows(["*.github.com"], "a.b.github.com")
    assert not allows(["*.github.com"], "github.com")
    assert not allows(["*.github.com"], "evilgithub.com")
    assert not allows(["*.github.com"], "github.com.evil.org")


def test_case_and_a_trailing_dot_do_not_matter() -> None:
    assert allows(["PyPI.org."], "pypi.ORG")
    assert allows(["pypi.org"], "PYPI.org.")
    assert allows(["*.Example.COM"], "WWW.example.com.")


def test_ip_literals_match_the_same_address_in_any_spelling() -> None:
    assert allows(["127.0.0.1"], "127.0.0.1")
    assert allows(["::1"], "[0:0:0:0:0:0:0:1]")
    assert allows(["[::1]"], "::1")
    assert not allows(["127.0.0.1"], "127.0.0.2")


def _parses(entry: str) -> bool:
    try:
        DomainRule.parse(entry)
    except ValueError:
        return False
    return True


def test_a_wildcard_never_matches_an_address() -> None:
    assert not _parses("*.127.0.0.1")
    assert not allows(["*.com"], "1.2.3.4")


def test_numeric_forms_that_resolvers_read_as_addresses_are_refused() -> None:
    for host in ("127.1", "0x7f.1", "2130706433", "0x7f000001", "example.0x10"):
        with pytest.raises(ValueError):
            canonical_host(host)


def test_international_names_compare_in_idna_form() -> None:
    assert canonical_host("Bücher.de") == "xn--bcher-kva.de"
    assert allows(["bücher.de"], "xn--bcher-kva.de")
    assert allows(["xn--bcher-kva.de"], "BÜCHER.de")
    assert allows(["*.bücher.de"], "www.xn--bcher-kva.de")


def test_malformed_entries_are_refused_with_a_sentence() -> None:
    problem = entries_problem(["ok.example", "exa*mple.com", "a..b", "bad host", "-x.com"])
    assert problem is not None
    for shown in ("exa*mple.com", "a..b", "bad host", "-x.com"):
        assert shown in problem
    assert "ok.example" not in problem
    assert entries_problem(["*", "*.github.com", "::1"]) is None


def test_star_alone_allows_every_host() -> None:
    assert allows(["*"], "anything.example") and allows(["*"], "10.0.0.1")


AUTH = "Proxy-Authorization: Basic " + base64.b64encode(b"call-1:tok").decode()


def test_a_connect_head_names_host_port_and_credentials() -> None:
    request = parse_head(f"CONNECT [::1]:8443 HTTP/1.1\r\n{AUTH}\r\n\r\n".encode())
    assert (request.method, request.host, request.port) == ("CONNECT", "::1", 8443)
    assert (request.user, request.token) == ("call-1", "tok")


def test_a_plain_http_head_is_rewritten_for_the_origin_without_proxy_headers() -> None:
    head = (
        "GET http://Example.com:8080/a?b=1 HTTP/1.1\r\nHost: example.com:8080\r\n"
        f"{AUTH}\r\nProxy-Connection: keep-alive\r\nAccept: */*\r\n\r\n"
    ).encode()
    request = parse_head(head)
    assert (request.host, request.port) == ("example.com", 8080)
    assert request.head.startswith(b"GET /a?b=1 HTTP/1.1\r\n")
    assert b"Proxy-" not in request.head and b"Accept: */*" in request.head
    assert request.head.endswith(b"Connection: close\r\n\r\n")


@pytest.mark.parametrize(
    ("head", "status", "words"),
    [
        (b"hello\r\n\r\n", 400, "request line"),
        (b"CONNECT example.com HTTP/1.1\r\n\r\n", 400, "host:port"),
        (b"CONNECT example.com:0 HTTP/1.1\r\n\r\n", 400, "1 to 65535"),
        (b"CONNECT example.com:65536 HTTP/1.1\r\n\r\n", 400, "1 to 65535"),
        (b"CONNECT example.com:-1 HTTP/1.1\r\n\r\n", 400, "1 to 65535"),
        (b"GET https://example.com/ HTTP/1.1\r\n\r\n", 400, "CONNECT"),
        (b"GET /relative HTTP/1.1\r\n\r\n", 400, "absolute"),
        (b"GET http://u:p@example.com/ HTTP/1.1\r\n\r\n", 400, "credentials"),
        (b"GET http://127.1/ HTTP/1.1\r\n\r\n", 400, "numeric"),
        (b"GET http://x.com/ HTTP/1.1\r\nno colon here\r\n\r\n", 400, "malformed header"),
        (b"GET http://x.com/ HTTP/1.1\r\n" + b"A: b\r\n" * 101 + b"\r\n", 431, "header"),
    ],
)
def test_bad_heads_get_a_status_and_a_sentence(head: bytes, status: int, words: str) -> None:
    with pytest.raises(ProxyError) as caught:
        parse_head(head)
    assert caught.value.status == status and words in str(caught.value)
