"""``hermesd.model.errors.overflowed``/``window_from`` and ``hermesd.model.fallback``: which
failed requests are over the window, what window an error names, which errors switch to a
fallback entry, and how ``fallback_providers`` is read."""

from __future__ import annotations

import pytest

from hermesd.daemon.config import ConfigError, parse
from hermesd.model.client import ModelSettings
from hermesd.model.errors import (
    ModelNotConfigured,
    ModelRequestFailed,
    ModelResponseInvalid,
    overflowed,
    window_from,
)
from hermesd.model.fallback import EndpointSpec, specs_from_config, worth_switching


def _failed(status: int | None, message: str, **body: object) -> ModelRequestFailed:
    return ModelRequestFailed(status, message, body={"error": {"message": message, **body}})


@pytest.mark.parametrize(
    "message",
    [
        "This model's maximum context length is 8192 tokens. However, you requested 9000",
        "the request exceeds the available context size, try increasing it",
        "prompt is too long: 210000 tokens > 200000 maximum",
        "Input has too many tokens",
    ],
)
def test_endpoints_words_for_an_overflow_are_recognised(message: str) -> None:
    assert overflowed(_failed(400, message))


def test_other_errors_are_not_overflows_and_a_plugin_decides_when_it_says() -> None:
    assert not overflowed(_failed(400, "tools[0].function.name is invalid"))
    assert not overflowed(_failed(503, "maximum context length is 8192 tokens"))
    plain = _failed(400, "odd wording from a proxy")
    plain.hints = {"should_compress": True}
    assert overflowed(plain)
    worded = _failed(400, "maximum context length is 8192 tokens")
    worded.hints = {"should_compress": False}
    assert not overflowed(worded)


def test_the_window_an_error_names_is_read() -> None:
    assert window_from(_failed(400, "This model's maximum context length is 8192 tokens")) == 8192
    llama = _failed(400, "the request exceeds the available context size", n_ctx=4096)
    assert window_from(llama) == 4096
    assert window_from(_failed(400, "prompt is too long")) is None


@pytest.mark.parametrize(
    ("error", "switches"),
    [
        (_failed(429, "rate limited"), True),
        (_failed(503, "overloaded"), True),
        (_failed(401, "invalid key"), True),
        (_failed(404, "model not found"), True),
        (_failed(None, "connection refused"), True),
        (_failed(400, "bad request"), False),
        (_failed(413, "too large"), False),
        (ModelNotConfigured("no endpoint"), False),
        (ModelResponseInvalid("garbled"), False),
    ],
)
def test_which_errors_another_endpoint_may_not_have(error: Exception, switches: bool) -> None:
    assert worth_switching(error) is switches  # type: ignore[arg-type]


def test_a_plugins_reason_and_should_fallback_decide() -> None:
    billing = _failed(400, "quota")
    billing.reason = "billing"
    assert worth_switching(billing)
    kept = _failed(503, "overloaded")
    kept.hints = {"should_fallback": False}
    assert not worth_switching(kept)


def test_entries_are_read_with_their_keys_and_the_primarys_endpoint_by_default() -> None:
    value = [
        {"provider": "local", "model": "small"},
        {"provider": "or", "model": "big", "base_url": "https://b.example/v1", "key_env": "K"},
        {"model": ""},
        "not a mapping",
    ]
    specs = specs_from_config(value, {"K": "secret"})
    assert specs == (
        EndpointSpec("local", "small"),
        EndpointSpec("or", "big", "https://b.example/v1", "secret"),
    )
    primary = ModelSettings("http://a.example/v1", "main", api_key="primary-key", fallbacks=specs)
    same = specs[0].settings(primary)
    assert (same.base_url, same.model, same.api_key) == (
        "http://a.example/v1",
        "small",
        "primary-key",
    )
    other = specs[1].settings(primary)
    assert (other.base_url, other.api_key, other.fallbacks) == (
        "https://b.example/v1",
        "secret",
        (),
    )
    assert specs_from_config({"provider": "x", "model": "legacy"}, {}) == (
        EndpointSpec("x", "legacy"),
    )


def test_a_malformed_entry_is_a_config_problem_naming_it() -> None:
    with pytest.raises(ConfigError) as caught:
        parse("fallback_providers:\n  - provider: x\n  - model: m\n    base_url: ftp://h\n")
    text = str(caught.value)
    assert "entry 0: `model` is missing" in text and "entry 1: base_url" in text
