"""JSON on a model round's hot path: the request body and every streamed chunk, with ``orjson``.

Every model round encodes the whole conversation as its request body and decodes every chunk
of the streamed answer: ``json.dumps`` of a 17-message history took 16 µs and ``orjson`` 1.3 µs,
a 236-byte chunk 2.2 µs and 0.7 µs (a 200-message session, or an answer of 500 chunks, scales
those up). ``bench/json_path.py`` measures hermesd's own encode and stream-reading functions
with either codec side by side.

The standard library stays behind both functions for what ``orjson`` refuses and ``json``
accepts, so no input that worked before fails now: text with lone surrogates (such a request
goes out ASCII-escaped, as every request did before; a chunk's lone surrogate escapes decode
as U+FFFD, since a turn could neither store nor send them), integers wider than 64 bits, the
``NaN`` and ``Infinity`` literals some servers write. Two differences remain: a NaN or
infinite float in a request becomes ``null`` (``json`` refused to encode it at all), and an
integer wider than 64 bits in a decoded chunk becomes a float (no field of a chunk holds one).
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

_SURROGATE = re.compile("[\ud800-\udfff]")
_OPTIONS = orjson.OPT_NON_STR_KEYS  # int, float, bool and None keys become strings, as in json


def dumps(value: Any) -> bytes:
    """Compact JSON as UTF-8 bytes."""
    try:
        return orjson.dumps(value, option=_OPTIONS)
    except TypeError:  # lone surrogates, a >64-bit int, a type neither codec knows
        return json.dumps(value, separators=(",", ":"), allow_nan=False).encode("ascii")


def loads(data: bytes | str) -> Any:
    """A JSON document; ``ValueError`` when it is none. A lone surrogate escape (``\\ud800``,
    which some models send) decodes as U+FFFD: a string holding one cannot be encoded as
    UTF-8, so neither SQLite nor msgpack could store or send it."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:  # a lone surrogate escape, NaN, or not JSON at all
        return _valid_text(json.loads(data))


def valid_text(text: str) -> str:
    """``text`` with lone surrogates (which no UTF-8 encoder takes) replaced by U+FFFD."""
    return _SURROGATE.sub("\ufffd", text) if _SURROGATE.search(text) else text


def _valid_text(value: Any) -> Any:
    """``value`` with lone surrogates in its strings (keys too) replaced by U+FFFD."""
    if type(value) is str:  # json.loads joins valid pairs: what is left is alone
        return valid_text(value)
    if type(value) is list:
        return [_valid_text(v) for v in value]
    if type(value) is dict:
        return {_valid_text(k): _valid_text(v) for k, v in value.items()}
    return value
