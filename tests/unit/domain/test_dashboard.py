"""The dashboard's filters and how it shows a body and a transaction's timeline."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest

from app.domain.dashboard import _body, _timeline, parse_group, parse_state
from app.errors import InvalidRequest
from app.vocabulary import State

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def test_a_state_filter_is_a_state_or_none() -> None:
    assert parse_state(None) is None
    assert parse_state("") is None
    assert parse_state("PREPARED") is State.PREPARED


@pytest.mark.parametrize("state", ["prepared", "DONE", "PREPARED "])
def test_a_state_not_spelled_as_one_is_refused(state: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse_state(state)
    assert caught.value.code == "invalid_query_parameter"
    assert caught.value.extra == {"parameter": "state"}


def test_a_group_filter_is_a_name_or_none() -> None:
    assert parse_group(None) is None
    assert parse_group("") is None
    assert parse_group("shop") == "shop"
    with pytest.raises(InvalidRequest) as caught:
        parse_group("no spaces")
    assert caught.value.code == "invalid_query_parameter"
    assert caught.value.extra == {"parameter": "group"}


def test_a_text_body_shows_as_text_and_says_when_it_is_cut() -> None:
    assert _body(b"hello", True, 5) == {"text": "hello", "hex": None, "cut": False}
    assert _body(b"hel", True, 5) == {"text": "hel", "hex": None, "cut": True}


def test_a_preview_cut_inside_a_character_does_not_fail() -> None:
    shown = _body("é".encode()[:1], True, 2)
    assert shown["text"] == "\ufffd" and shown["cut"]


def test_a_binary_body_shows_as_hex() -> None:
    assert _body(b"\x00\xff\x10", False, 3) == {"text": None, "hex": "00 ff 10", "cut": False}


def row(state: State) -> Any:
    return SimpleNamespace(created_at=T0, message_count=2, state=state,
                           next_check_at=T0 + timedelta(seconds=90))


def test_the_timeline_orders_sends_checks_and_operations_by_time() -> None:
    checks: list[Any] = [SimpleNamespace(created_at=T0 + timedelta(seconds=30), check_times=1,
                              result="UNKNOWN", url="http://h/c", duration_ms=12.4),
              SimpleNamespace(created_at=T0 + timedelta(seconds=60), check_times=2,
                              result="TIMEOUT", url=None, duration_ms=None)]
    ops: list[Any] = [SimpleNamespace(created_at=T0 + timedelta(seconds=45), op="COMMIT", source="api",
                           check_times=1)]
    events = _timeline(row(State.COMMITTED), checks, ops)
    assert [(e.at - T0).seconds for e in events] == [0, 30, 45, 60]
    assert [(e.what, e.detail) for e in events] == [
        ("sent", "2 message(s)"),
        ("check #1: UNKNOWN", "http://h/c in 12 ms"),
        ("COMMIT", "by api, after 1 check(s)"),
        ("check #2: TIMEOUT", "no URL"),
    ]


def test_only_an_unresolved_transaction_shows_its_next_check() -> None:
    assert [e.what for e in _timeline(row(State.PREPARED), [], [])] == ["sent",
                                                                         "next check due"]
    assert [e.what for e in _timeline(row(State.ROLLED_BACK), [], [])] == ["sent"]
