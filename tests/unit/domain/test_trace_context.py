"""W3C trace context from a request's headers, and its stamping onto a send's messages."""

from __future__ import annotations

import pytest

from app.domain.messages import MAX_PROPERTIES, MAX_PROPERTIES_BYTES, TransactionIn
from app.domain.trace_context import (
    MAX_TRACESTATE,
    MAX_TRACESTATE_MEMBERS,
    TraceContext,
    from_headers,
    stamp,
    valid_traceparent,
)

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
VALID = f"00-{TRACE_ID}-{PARENT_ID}-01"


@pytest.mark.parametrize("value", [
    VALID,
    f"00-{TRACE_ID}-{PARENT_ID}-00",  # not sampled: still a context
    f"01-{TRACE_ID}-{PARENT_ID}-01",  # a later version
    f"01-{TRACE_ID}-{PARENT_ID}-01-extra.fields",  # a later version may append fields
])
def test_valid_traceparents(value: str) -> None:
    assert valid_traceparent(value)


@pytest.mark.parametrize("value", [
    "",
    f"ff-{TRACE_ID}-{PARENT_ID}-01",  # version ff is forbidden
    f"00-{TRACE_ID}-{PARENT_ID}-01-extra",  # version 00 has exactly four fields
    f"00-{'0' * 32}-{PARENT_ID}-01",  # all-zero trace id
    f"00-{TRACE_ID}-{'0' * 16}-01",  # all-zero parent id
    f"00-{TRACE_ID.upper()}-{PARENT_ID}-01",  # upper-case hex
    f"00-{TRACE_ID[:-1]}-{PARENT_ID}-01",  # a short trace id
    f"00-{TRACE_ID}-{PARENT_ID}",  # no flags
    f"00_{TRACE_ID}_{PARENT_ID}_01",
    f"{VALID},{VALID}",  # two headers joined
])
def test_invalid_traceparents(value: str) -> None:
    assert not valid_traceparent(value)


def test_no_or_an_invalid_traceparent_is_no_context_and_drops_its_tracestate() -> None:
    assert from_headers(None, "a=b") is None
    assert from_headers("00-nonsense", "a=b") is None


def test_surrounding_blanks_are_trimmed() -> None:
    assert from_headers(f" \t{VALID} ", " a=b\t") == TraceContext(VALID, "a=b")


@pytest.mark.parametrize("tracestate", [
    "",
    "   ",
    "a=" + "x" * MAX_TRACESTATE,  # too long
    ",".join(f"k{i}=v" for i in range(MAX_TRACESTATE_MEMBERS + 1)),  # too many members
    "a=b\x01",  # a control character
    "a=\u00e9",  # not ASCII
])
def test_a_bad_tracestate_is_dropped_and_the_traceparent_kept(tracestate: str) -> None:
    assert from_headers(VALID, tracestate) == TraceContext(VALID, None)


def test_a_tracestate_at_the_limits_is_kept() -> None:
    members = ",".join(f"k{i}=v" for i in range(MAX_TRACESTATE_MEMBERS))
    assert from_headers(VALID, members) == TraceContext(VALID, members)
    longest = "a=" + "x" * (MAX_TRACESTATE - 2)
    assert from_headers(VALID, longest) == TraceContext(VALID, longest)


def test_properties_name_only_what_is_there() -> None:
    assert TraceContext(VALID, None).properties() == {"traceparent": VALID}
    assert TraceContext(VALID, "a=b").properties() == {"traceparent": VALID, "tracestate": "a=b"}


def send(*messages: dict[str, object]) -> TransactionIn:
    return TransactionIn.model_validate({"messages": [{"topic": "orders", "body": "x", **m}
                                                      for m in messages]})


def test_stamping_adds_the_context_to_each_message() -> None:
    stamped = stamp(send({}, {"properties": {"k": "v"}}), TraceContext(VALID, "a=b"))
    assert [m.properties for m in stamped.messages] == [
        {"traceparent": VALID, "tracestate": "a=b"},
        {"k": "v", "traceparent": VALID, "tracestate": "a=b"},
    ]


def test_a_message_with_its_own_context_keeps_it_whole() -> None:
    own = send({"properties": {"tracestate": "mine=1"}})
    assert stamp(own, TraceContext(VALID, "a=b")) is own


def test_stamping_does_not_change_the_request_nor_its_fingerprint() -> None:
    request = send({})
    stamped = stamp(request, TraceContext(VALID, None))
    assert request.messages[0].properties == {}
    assert stamped.fingerprint() == request.fingerprint()


def test_a_message_at_the_count_limit_gets_nothing() -> None:
    full = send({"properties": {f"p{i}": "" for i in range(MAX_PROPERTIES)}})
    assert stamp(full, TraceContext(VALID, "a=b")) is full


def test_near_the_count_limit_the_traceparent_goes_without_its_tracestate() -> None:
    props = {f"p{i}": "" for i in range(MAX_PROPERTIES - 1)}
    stamped = stamp(send({"properties": props}), TraceContext(VALID, "a=b"))
    assert stamped.messages[0].properties == {**props, "traceparent": VALID}


def test_near_the_size_limit_what_does_not_fit_is_left_out() -> None:
    room = len("traceparent") + len(VALID)
    props = {"big": "x" * (MAX_PROPERTIES_BYTES - len("big") - room)}
    stamped = stamp(send({"properties": props}), TraceContext(VALID, "a=b"))
    assert stamped.messages[0].properties == {**props, "traceparent": VALID}
    props = {"big": "x" * (MAX_PROPERTIES_BYTES - len("big") - room + 1)}
    request = send({"properties": props})
    assert stamp(request, TraceContext(VALID, "a=b")) is request
