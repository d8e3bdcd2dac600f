"""hermesd.model.fastjson: orjson's speed, and everything json accepted still accepted."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hermesd.model import fastjson

JSONISH = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.text()
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=30,
)


@given(JSONISH)
def test_it_round_trips_what_json_round_trips(value: object) -> None:
    encoded = fastjson.dumps(value)
    assert json.loads(encoded) == json.loads(json.dumps(value)) == fastjson.loads(encoded)


@pytest.mark.parametrize("value", ["lone \ud800 surrogate", 2**70, {"n": -(2**80)}])
def test_what_orjson_refuses_to_encode_is_encoded_as_json_would(value: object) -> None:
    encoded = fastjson.dumps(value)
    assert encoded == json.dumps(value, separators=(",", ":")).encode("ascii")
    assert json.loads(encoded) == value


def test_keys_that_are_not_strings_become_strings_as_in_json() -> None:
    assert json.loads(fastjson.dumps({1: "a", None: "b", 2.5: "c"})) == {
        "1": "a",
        "null": "b",
        "2.5": "c",
    }


def test_nan_is_sent_as_null() -> None:  # json refused it; a model request is better off sent
    assert fastjson.dumps({"x": math.nan, "y": math.inf}) == b'{"x":null,"y":null}'


@pytest.mark.parametrize(
    "text, expected",
    [
        (b'"a \\ud800 b"', "a \ufffd b"),  # a lone surrogate escape, as some models send
        (b'{"\\udc00": ["\\ud83d\\ude00 \\ud83d"]}', {"\ufffd": ["\U0001f600 \ufffd"]}),
        (b'{"a": NaN}', {"a": math.nan}),
        (b'{"a": "caf\xc3\xa9"}', {"a": "café"}),
        ('{"a": 1}', {"a": 1}),
    ],
)
def test_what_json_decodes_is_decoded(text: bytes | str, expected: object) -> None:
    got = fastjson.loads(text)
    if isinstance(expected, dict) and isinstance(expected.get("a"), float):
        assert math.isnan(got["a"])
    else:
        assert got == expected


def test_an_integer_wider_than_64_bits_is_decoded_as_a_float() -> None:  # documented
    assert fastjson.loads(b"123456789012345678901234567890") == pytest.approx(1.2345678901e29)


@pytest.mark.parametrize("text", [b"", b"{", b"\xff", b"[1,]", b"nope", b'{"a": 1} x'])
def test_what_is_not_json_raises_value_error(text: bytes) -> None:
    with pytest.raises(ValueError):
        fastjson.loads(text)
