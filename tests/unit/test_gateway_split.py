"""Sending long answers to chats: the reference's splitting (hermesd.gateway.split), the
session keys of chats (hermesd.gateway.sessions) and pairing codes (hermesd.gateway.users)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hermesd.gateway.base import MessageEvent, Platform, SessionSource
from hermesd.gateway.core import _chat_and_thread
from hermesd.gateway.outbound import take_media
from hermesd.gateway.sessions import session_key
from hermesd.gateway.split import split_message, utf16_len
from hermesd.gateway.users import ALPHABET, ChatUsers


def test_a_message_within_the_limit_is_sent_whole() -> None:
    assert split_message("short", 100) == ["short"]


def test_a_long_message_splits_at_newlines_with_part_numbers() -> None:
    text = "\n".join(f"line {i:03d} " + "x" * 40 for i in range(60))
    pieces = split_message(text, 500)
    assert len(pieces) > 1
    assert all(len(p) <= 500 for p in pieces)
    assert all(p.endswith(f"({i}/{len(pieces)})") for i, p in enumerate(pieces, 1))
    assert pieces[0].split(" (1/")[0].endswith("x" * 40)  # broken at a line's end


def test_a_code_fence_cut_by_a_split_is_closed_and_reopened_with_its_language() -> None:
    text = "intro\n```python\n" + "\n".join(f"print({i})" for i in range(200)) + "\n```\nend"
    pieces = split_message(text, 300)
    assert pieces[0].split(" (1/")[0].endswith("\n```")
    assert pieces[1].startswith("```python\n")
    assert all(p.count("```") % 2 == 0 for p in pieces)


def test_telegram_lengths_count_utf16_units() -> None:
    assert utf16_len("a😀") == 3
    text = "😀" * 3000  # 3000 code points, 6000 UTF-16 units
    pieces = split_message(text, 4096, utf16_len)
    assert len(pieces) == 2 and all(utf16_len(p) <= 4096 for p in pieces)


def test_a_split_never_stalls_on_a_tiny_limit() -> None:
    assert "".join(split_message("abcdef", 1)).count("a") == 1


def test_media_lines_are_taken_out_of_the_text() -> None:
    assert take_media("here\nMEDIA:/tmp/a.png\nthere") == ("here\nthere", ["/tmp/a.png"])


def _source(**kw: object) -> SessionSource:
    return SessionSource(Platform.TELEGRAM, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("source", "key"),
    [
        (_source(chat_id="5", user_id="5"), "agent:main:telegram:dm:5"),
        (_source(chat_id="5", user_id="5", thread_id="9"), "agent:main:telegram:dm:5:9"),
        (_source(chat_id="-7", chat_type="group", user_id="5"), "agent:main:telegram:group:-7:5"),
        (
            _source(chat_id="-7", chat_type="group", user_id="5", thread_id="3"),
            "agent:main:telegram:group:-7:3",
        ),
    ],
)
def test_session_keys_follow_the_reference(source: SessionSource, key: str) -> None:
    assert session_key(source) == key


def test_a_group_shares_one_session_when_not_per_user() -> None:
    source = _source(chat_id="-7", chat_type="group", user_id="5")
    assert session_key(source, group_sessions_per_user=False) == "agent:main:telegram:group:-7"


def test_plugin_platform_names_make_members() -> None:
    assert Platform("irc") is Platform("irc")
    assert Platform("irc").value == "irc"
    with pytest.raises(ValueError):
        Platform("Not A Name!")


def test_commands_lose_the_bot_name() -> None:
    event = MessageEvent("/approve@hermes_bot always")
    assert (event.get_command(), event.get_command_args()) == ("approve", "always")


def test_a_pairing_code_admits_its_user_once(tmp_path: Path) -> None:
    users = ChatUsers(tmp_path / "paired.json")
    code = users.request_code("telegram", "42", "ann")
    assert code is not None and len(code) == 8 and set(code) <= set(ALPHABET)
    assert users.identity("telegram", "42") is None
    assert users.pair(code.lower()).user_id == "42"
    assert users.identity("telegram", "42") is not None
    with pytest.raises(KeyError):
        users.pair(code)
    again = ChatUsers(tmp_path / "paired.json")
    again.load()
    assert again.identity("telegram", "42") is not None


def test_pairing_requests_are_rate_limited_and_bounded(tmp_path: Path) -> None:
    users = ChatUsers(tmp_path / "paired.json")
    assert users.request_code("telegram", "1", "") is not None
    assert users.request_code("telegram", "1", "") is None  # again within 10 minutes
    assert users.request_code("telegram", "2", "") is not None
    assert users.request_code("telegram", "3", "") is not None
    assert users.request_code("telegram", "4", "") is None  # three are waiting already


def test_owners_act_as_the_owner_and_allowed_users_as_members(tmp_path: Path) -> None:
    users = ChatUsers(tmp_path / "paired.json")
    users.configure("telegram", {"owners": [1], "allow": ["2"], "as_user": "65534"})
    owner, member = users.identity("telegram", "1"), users.identity("telegram", "2")
    assert owner is not None and owner.trust == "owner"
    assert member is not None and (member.trust, member.uid) == ("member", 65534)
    assert users.identity("telegram", "3") is None


@pytest.mark.parametrize(
    ("rest", "parts"),
    [
        ("-100123:42", ("-100123", "42")),
        ("123", ("123", "")),
        ("!room:example.org", ("!room:example.org", "")),
        ("!room:example.org:8448", ("!room:example.org:8448", "")),
    ],
)
def test_delivery_targets_split_a_thread_only_off_numeric_chat_ids(
    rest: str, parts: tuple[str, str]
) -> None:
    assert _chat_and_thread(rest) == parts


def test_allow_may_map_each_user_to_a_local_user(tmp_path: Path) -> None:
    users = ChatUsers(tmp_path / "paired.json")
    users.configure("telegram", {"allow": {"2": "65533", "3": None}, "as_user": "65534"})
    assert [users.identity("telegram", u).uid for u in ("2", "3")] == [65533, 65534]  # type: ignore[union-attr]
