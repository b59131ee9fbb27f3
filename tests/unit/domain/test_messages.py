"""The request parsers of app.domain.messages: forms, fingerprints, body size, error codes."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from app.domain.messages import (
    MessageIn,
    TransactionIn,
    parse_producer_group,
    parse_transaction,
)
from app.errors import ApiError, InvalidRequest, PayloadTooLarge

LIMIT = 16


def parse(payload: Any, limit: int = LIMIT) -> TransactionIn:
    return parse_transaction(payload, max_body_bytes=limit)


def fingerprint(**message: Any) -> str:
    return parse({"messages": [{"topic": "orders", "body": "hello", **message}]}).fingerprint()


def test_a_single_message_may_be_given_at_the_top_level() -> None:
    single = parse({"transaction_id": "t-1", "check_immunity_seconds": 30,
                    "check_url": "http://127.0.0.1:9/c", "topic": "orders", "body": "hi",
                    "keys": ["k"], "tag": "created", "properties": {"a": "b"}})
    assert single.transaction_id == "t-1" and single.check_immunity_seconds == 30
    assert single.check_url == "http://127.0.0.1:9/c"
    assert single.messages == [MessageIn(topic="orders", body="hi", keys=["k"], tag="created",
                                         properties={"a": "b"})]
    batch = parse({"transaction_id": "t-1", "check_immunity_seconds": 30,
                   "check_url": "http://127.0.0.1:9/c",
                   "messages": [{"topic": "orders", "body": "hi", "keys": ["k"],
                                 "tag": "created", "properties": {"a": "b"}}]})
    assert single == batch
    assert single.fingerprint() == batch.fingerprint()


def test_the_single_form_does_not_change_the_callers_dict() -> None:
    payload = {"topic": "orders", "body": "hi"}
    parse(payload)
    assert payload == {"topic": "orders", "body": "hi"}


def test_defaults() -> None:
    t = parse({"topic": "orders", "body": "hi"})
    assert t.transaction_id is None and t.check_url is None and t.check_immunity_seconds == 0
    m = t.messages[0]
    assert m.keys == [] and m.tag is None and m.properties == {}
    assert parse_producer_group({"check_urls": ["http://h/c"]}).check_timeout_ms == 3000


def test_equal_messages_have_equal_fingerprints_whatever_the_options() -> None:
    a = parse({"transaction_id": "a", "topic": "orders", "body": "hi", "properties": {"x": "1",
                                                                                    "y": "2"}})
    b = parse({"transaction_id": "b", "check_immunity_seconds": 99,
               "check_url": "https://h/c", "topic": "orders", "body": "hi",
               "properties": {"y": "2", "x": "1"}})
    assert a.fingerprint() == b.fingerprint()
    assert len(a.fingerprint()) == 64


@pytest.mark.parametrize("change", [
    {"topic": "invoices"},
    {"body": "hello!"},
    {"body": None, "body_base64": base64.b64encode(b"hello").decode()},  # same bytes, binary
    {"keys": ["k1"]},
    {"tag": "created"},
    {"tag": ""},
    {"properties": {"a": "b"}},
    {"properties": {"": ""}},
], ids=lambda c: ",".join(f"{k}={v!r}" for k, v in c.items()))
def test_fingerprints_differ_when_any_field_differs(change: dict[str, Any]) -> None:
    assert fingerprint(**change) != fingerprint()


def test_fingerprints_see_order_and_count_of_messages_and_keys() -> None:
    m1, m2 = {"topic": "a", "body": "1"}, {"topic": "b", "body": "2"}
    assert parse({"messages": [m1, m2]}).fingerprint() != parse({"messages": [m2, m1]}).fingerprint()
    assert parse({"messages": [m1]}).fingerprint() != parse({"messages": [m1, m1]}).fingerprint()
    assert fingerprint(keys=["a", "b"]) != fingerprint(keys=["b", "a"])
    # field boundaries are not ambiguous
    assert fingerprint(keys=["ab"]) != fingerprint(keys=["a", "b"])
    assert fingerprint(body="ab", tag="c") != fingerprint(body="a", tag="bc")


def test_body_size_is_measured_after_base64_decoding() -> None:
    exact = base64.b64encode(b"\x00" * LIMIT).decode()
    assert len(exact) > LIMIT
    m = parse({"topic": "orders", "body_base64": exact}).messages[0]
    assert m.raw_body == b"\x00" * LIMIT and not m.body_is_text
    with pytest.raises(PayloadTooLarge) as err:
        parse({"topic": "orders", "body_base64": base64.b64encode(b"\x00" * (LIMIT + 1)).decode()})
    assert err.value.status == 413 and err.value.code == "body_too_large"


def test_a_base64_body_is_decoded_once_and_left_out_of_the_model() -> None:
    """The validator decodes it; the store and the fingerprint reuse those bytes, and
    they are no field: not dumped, not compared."""
    one = parse({"topic": "orders", "body_base64": "AAEC"}).messages[0]
    assert one.raw_body is one.raw_body == b"\x00\x01\x02"
    assert one.model_dump(exclude_defaults=True) == {"topic": "orders", "body_base64": "AAEC"}
    other = parse({"topic": "orders", "body_base64": "AAEC"}).messages[0]
    assert one == other


def test_text_body_size_is_in_utf8_bytes() -> None:
    m = parse({"topic": "orders", "body": "é" * (LIMIT // 2)}).messages[0]
    assert m.raw_body == ("é" * (LIMIT // 2)).encode() and m.body_is_text
    with pytest.raises(PayloadTooLarge):
        parse({"topic": "orders", "body": "é" * (LIMIT // 2 + 1)})  # LIMIT // 2 + 1 chars


def test_too_large_wins_over_other_errors_in_other_messages() -> None:
    with pytest.raises(PayloadTooLarge):
        parse({"messages": [{"topic": "orders", "body": 5},
                            {"topic": "orders", "body": "x" * (LIMIT + 1)}]})


@pytest.mark.parametrize(("payload", "code"), [
    ([], "invalid_body_type"),
    ({}, "missing_field"),
    ({"topic": "orders", "body": "x", "extra": 1}, "unknown_field"),
    ({"topic": "orders", "body": "x", "keys": "k"}, "invalid_type"),
    ({"topic": "orders", "body": "x", "check_immunity_seconds": "5"}, "invalid_type"),
    ({"topic": "orders", "body": "x", "check_immunity_seconds": True}, "invalid_type"),
    ({"topic": "orders", "body": "x", "check_immunity_seconds": -1}, "out_of_range"),
    ({"topic": "orders", "body": "x", "tag": "t" * 1025}, "invalid_length"),
    ({"topic": "orders", "body": "x", "tag": "\x00"}, "invalid_tag"),
    ({"topic": "a b", "body": "x"}, "invalid_topic"),
    ({"topic": "RMQ_SYS_X", "body": "x"}, "reserved_topic"),
    ({"topic": "TRANS_CHECK_MAX_TIME_TOPIC", "body": "x"}, "reserved_topic"),
    ({"topic": "orders"}, "invalid_body"),
    ({"topic": "orders", "body": "x", "body_base64": "eA=="}, "invalid_body"),
    ({"topic": "orders", "body_base64": "e"}, "invalid_base64"),
    ({"topic": "orders", "body": "x", "properties": {str(i): "" for i in range(129)}},
     "too_many_properties"),
    ({"topic": "orders", "body": "x", "properties": {"k": "v" * 16384}},
     "properties_too_large"),
    ({"topic": "orders", "body": "x", "transaction_id": "a b"}, "invalid_transaction_id"),
    ({"topic": "orders", "body": "x", "check_url": "ftp://h/c"}, "invalid_callback_url"),
    ({"messages": []}, "invalid_length"),
])
def test_transaction_errors_have_stable_codes(payload: Any, code: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        parse(payload)
    assert err.value.code == code and err.value.status == 400


def test_validation_errors_list_every_failure_with_its_field() -> None:
    with pytest.raises(ApiError) as err:
        parse({"messages": [{"topic": 5, "body": "x"}, {"topic": "orders", "body": 5}]})
    fields = [e["field"] for e in err.value.extra["errors"]]
    assert fields == ["messages.0.topic", "messages.1.body"]
    assert err.value.detail.startswith("messages.0.topic:")


@pytest.mark.parametrize("url", [
    "http://127.0.0.1:9/check", "https://example.com", "HTTP://h:1/c?x=1#f",
])
def test_absolute_http_urls_are_check_urls(url: str) -> None:
    assert parse_producer_group({"check_urls": [url]}).check_urls == [url]
    assert parse({"topic": "t", "body": "b", "check_url": url}).check_url == url


@pytest.mark.parametrize("url", [
    "", "/check", "h:80/check", "ftp://h/c", "http://", "http:///c", "http://[::1/c",
    "http://h:99999/c", "http://h:port/c", "http://h/a b", "http://h\x00/c", "javascript:x",
    "http://user:secret@h/c", "http://user@h/c", "http://:secret@h/c", "http://h\\@evil/c",
    "ftp://user:secret@h/c", "user:secret@h/c",
    "http://a<b/c", "http://ex%41mple/c", "http://[zz]/c",
])
def test_other_strings_are_not(url: str) -> None:
    for parse_one in (lambda: parse_producer_group({"check_urls": [url]}),
                      lambda: parse({"topic": "t", "body": "b", "check_url": url})):
        with pytest.raises(InvalidRequest) as err:
            parse_one()
        assert err.value.code == "invalid_callback_url"
        assert "secret" not in err.value.detail
