"""Subscription requests as validated models: bounds, refusal codes, dead-letter topics,
and which settings a request names."""

from __future__ import annotations

from typing import Any

import pytest

from app.domain.limits import MAX_BACKOFF_MS, MAX_INT64, MIN_ACK_TIMEOUT_MS
from app.domain.messages import parse_body
from app.domain.subscription_models import (
    MAX_OFFSETS,
    MAX_RECEIVE,
    MAX_WAIT_MS,
    BackoffIn,
    NackIn,
    OffsetsIn,
    ReceiveIn,
    SeekIn,
    SubscriptionIn,
    backoff_refusal,
    check_subscription_name,
    dead_letter_topic,
    default_dead_letter_topic,
    named_settings,
    names_other_dead_letter_topic,
)
from app.errors import InvalidRequest


def refusal(model: type[Any], payload: Any) -> str:
    with pytest.raises(InvalidRequest) as caught:
        parse_body(model, payload)
    return caught.value.code


def test_a_subscription_without_settings_takes_the_defaults() -> None:
    request = parse_body(SubscriptionIn, {})
    assert request.initial_position == "latest"
    assert (request.ack_timeout_ms, request.max_redeliveries) == (30000, 16)
    assert (request.redelivery_backoff.min_ms, request.redelivery_backoff.max_ms) == (1000, 60000)
    assert request.dead_letter_topic is None


@pytest.mark.parametrize(("payload", "code"), [
    ({"ack_timeout_ms": MIN_ACK_TIMEOUT_MS - 1}, "out_of_range"),
    ({"ack_timeout_ms": "30000"}, "invalid_type"),  # strict: no numeric strings
    ({"ack_timeout_ms": 30000.0}, "invalid_type"),
    ({"max_redeliveries": -1}, "out_of_range"),
    ({"initial_position": "middle"}, "invalid_value"),
    ({"shiny": True}, "unknown_field"),
    ({"redelivery_backoff": {"min_ms": 5000, "max_ms": 10}}, "invalid_backoff"),
    ({"redelivery_backoff": {"max_ms": MAX_BACKOFF_MS + 1}}, "out_of_range"),
    ({"dead_letter_topic": "has space"}, "invalid_topic"),
    ({"dead_letter_topic": "TRANS_CHECK_MAX_TIME_TOPIC"}, "reserved_topic"),
    ({"dead_letter_topic": "RMQ_SYS_x"}, "reserved_topic"),
])
def test_bad_settings_are_refused_with_their_code(payload: dict[str, Any], code: str) -> None:
    assert refusal(SubscriptionIn, payload) == code


def test_one_backoff_bound_alone_is_not_checked_against_the_others_default() -> None:
    # a stored max_ms of 100 s may be paired with a new min_ms above the default max_ms
    assert BackoffIn.model_validate({"min_ms": 90_000}).min_ms == 90_000
    assert BackoffIn.model_validate({"min_ms": 7, "max_ms": 7}).max_ms == 7


def test_backoff_refusal() -> None:
    assert backoff_refusal(1, 1) is None
    refused = backoff_refusal(2, 1)
    assert refused is not None and "min_ms (2)" in refused and "max_ms (1)" in refused


@pytest.mark.parametrize(("payload", "code"), [
    ({"max_messages": 0}, "out_of_range"),
    ({"max_messages": MAX_RECEIVE + 1}, "out_of_range"),
    ({"wait_ms": MAX_WAIT_MS + 1}, "out_of_range"),
    ({"wait_ms": True}, "invalid_type"),  # strict: a bool is no integer
])
def test_receive_bounds(payload: dict[str, Any], code: str) -> None:
    assert refusal(ReceiveIn, payload) == code


def test_receive_at_its_bounds() -> None:
    request = parse_body(ReceiveIn, {"max_messages": MAX_RECEIVE, "wait_ms": MAX_WAIT_MS})
    assert (request.max_messages, request.wait_ms) == (MAX_RECEIVE, MAX_WAIT_MS)


def test_offsets() -> None:
    assert parse_body(OffsetsIn, {"offsets": [0, MAX_INT64]}).offsets == [0, MAX_INT64]
    assert refusal(OffsetsIn, {"offsets": [-1]}) == "invalid_offset"
    assert refusal(OffsetsIn, {"offsets": [MAX_INT64 + 1]}) == "invalid_offset"
    assert refusal(OffsetsIn, {"offsets": [0] * (MAX_OFFSETS + 1)}) == "invalid_length"
    assert refusal(OffsetsIn, {}) == "missing_field"
    assert refusal(NackIn, {"offsets": [1], "delay_ms": -1}) == "out_of_range"
    assert parse_body(NackIn, {"offsets": [1]}).delay_ms is None


def test_seek() -> None:
    assert parse_body(SeekIn, {"offset": 0}).offset == 0
    assert refusal(SeekIn, {"offset": -1}) == "out_of_range"
    assert refusal(SeekIn, {}) == "missing_field"


def test_subscription_names() -> None:
    assert check_subscription_name("billing-1") == "billing-1"
    with pytest.raises(InvalidRequest) as caught:
        check_subscription_name("a/b")
    assert caught.value.code == "invalid_subscription"


def test_the_dead_letter_topic_is_the_default_unless_named() -> None:
    assert default_dead_letter_topic("orders", "billing") == "orders-billing-DLQ"
    assert dead_letter_topic("orders", "billing", SubscriptionIn()) == "orders-billing-DLQ"
    named = SubscriptionIn(dead_letter_topic="dead")
    assert dead_letter_topic("orders", "billing", named) == "dead"


def test_a_subscription_may_not_dead_letter_into_its_own_topic() -> None:
    with pytest.raises(InvalidRequest) as caught:
        dead_letter_topic("orders", "billing", SubscriptionIn(dead_letter_topic="orders"))
    assert caught.value.code == "invalid_dead_letter_topic"


def test_only_another_topic_than_the_default_needs_consume_on_it() -> None:
    assert not names_other_dead_letter_topic("orders", "billing", SubscriptionIn())
    same = SubscriptionIn(dead_letter_topic="orders-billing-DLQ")
    assert not names_other_dead_letter_topic("orders", "billing", same)
    assert names_other_dead_letter_topic("orders", "billing",
                                         SubscriptionIn(dead_letter_topic="dead"))


def test_a_new_subscription_stores_every_setting() -> None:
    assert named_settings("orders", "billing", SubscriptionIn(), new=True) == {
        "ack_timeout_ms": 30000, "max_redeliveries": 16, "backoff_min_ms": 1000,
        "backoff_max_ms": 60000, "dead_letter_topic": "orders-billing-DLQ",
        "type": "shared", "consumer_timeout_ms": 30000, "tag_filter": "*"}


def test_an_existing_subscription_stores_only_what_the_request_names() -> None:
    assert named_settings("orders", "billing", SubscriptionIn(), new=False) == {}
    request = parse_body(SubscriptionIn, {"max_redeliveries": 3,
                                          "redelivery_backoff": {"max_ms": 5}})
    assert named_settings("orders", "billing", request, new=False) == {
        "max_redeliveries": 3, "backoff_max_ms": 5}


def test_a_default_dead_letter_topic_too_long_for_a_name_must_be_given() -> None:
    long_name = "s" * 120
    with pytest.raises(InvalidRequest) as caught:
        named_settings("orders", long_name, SubscriptionIn(), new=True)
    assert caught.value.code == "invalid_dead_letter_topic"
    given = SubscriptionIn(dead_letter_topic="dead")
    assert named_settings("orders", long_name, given, new=True)["dead_letter_topic"] == "dead"


@pytest.mark.parametrize(("given", "stored"), [
    ("*", "*"), (" * ", "*"), ("created", "created"), ("created || paid", "created||paid"),
    ("a||b||a", "a||b"), ("x y||z", "x y||z")])
def test_a_tag_filter_is_stored_normalized(given: str, stored: str) -> None:
    request = parse_body(SubscriptionIn, {"tag_filter": given})
    assert named_settings("orders", "billing", request, new=False) == {"tag_filter": stored}


@pytest.mark.parametrize("given", ["", "||", "a||", "||a", "a|b", "a||*", "*||a", "a*",
                                   "a\x00", "t" * 5000])
def test_a_malformed_tag_filter_is_refused(given: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse_body(SubscriptionIn, {"tag_filter": given})
    assert caught.value.code == "invalid_tag_filter"
