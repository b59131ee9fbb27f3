"""What each domain operation's span records (tracing on, spans kept in memory)."""

from __future__ import annotations

from typing import Any

import orjson

from app.domain import spans
from app.domain.lifecycle import FinishResult, SendResult
from app.domain.messages import TransactionIn
from app.domain.trace_context import TraceContext
from app.vocabulary import Op

PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
STORED = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def test_stored_traces_are_the_properties_that_carry_one() -> None:
    stored = ['{"a":"1"}', orjson.dumps({"traceparent": STORED}).decode(), "{}"]
    assert spans.stored_traces(stored) == [{"traceparent": STORED}]


def send(*topics: str) -> TransactionIn:
    return TransactionIn.model_validate({"messages": [{"topic": t, "body": "x"}
                                                      for t in topics]})


def test_a_send_is_a_producer_span_under_the_requests_context(exported: Any) -> None:
    result = SendResult({"transaction_id": "t-1", "messages": [{"message_id": "M1"}]}, True)
    with spans.sending("shop", send("orders"), TraceContext(PARENT, None)) as span:
        assert spans.sent(span, result) is result
    [done] = exported.get_finished_spans()
    assert (done.name, done.kind.name) == ("send orders", "PRODUCER")
    assert format(done.parent.span_id, "016x") == "00f067aa0ba902b7"
    assert done.attributes["txmsg.producer_group"] == "shop"
    assert done.attributes["txmsg.transaction_id"] == "t-1"
    assert done.attributes["messaging.message.id"] == "M1"


def test_a_send_to_several_topics_names_none(exported: Any) -> None:
    with spans.sending("shop", send("a", "b"), None):
        pass
    [done] = exported.get_finished_spans()
    assert done.name == "send" and done.parent is None


def test_a_finish_links_to_its_messages_stored_contexts(exported: Any) -> None:
    result = FinishResult(
        {"messages": [{"topic": "orders", "message_id": "M1"},
                      {"topic": "orders", "message_id": "M2"}]},
        applied=True, extra={spans.STORED_TRACES: [{"traceparent": STORED}]})
    with spans.finishing("shop", "t-1", Op.COMMIT, None) as span:
        spans.finished(span, result)
    [done] = exported.get_finished_spans()
    assert (done.name, done.kind.name) == ("commit orders", "CLIENT")
    assert done.attributes["txmsg.applied"] is True
    assert done.attributes["messaging.destination.name"] == "orders"
    assert done.attributes["messaging.batch.message_count"] == 2
    assert [format(link.context.span_id, "016x") for link in done.links] == ["b7ad6b7169203331"]
    assert spans.STORED_TRACES not in result.extra  # not left for the answer


def test_a_finish_that_applied_nothing_has_no_destination(exported: Any) -> None:
    with spans.finishing("shop", "t-1", Op.ROLLBACK, TraceContext(PARENT, None)) as span:
        spans.finished(span, FinishResult({}, applied=False))
    [done] = exported.get_finished_spans()
    assert done.name == "rollback" and done.attributes["txmsg.applied"] is False
    assert "messaging.destination.name" not in done.attributes


def test_a_check_links_to_the_contexts_its_messages_carry(exported: Any) -> None:
    messages: list[dict[str, Any]] = [{"topic": "orders", "message_id": "M1",
                 "properties": orjson.Fragment(orjson.dumps({"traceparent": STORED}))},
                {"topic": "orders", "message_id": "M2", "properties": None}]
    with spans.checking("shop", "t-1", 3, messages) as span:
        spans.checked(span, "UNKNOWN", "retry")
    [done] = exported.get_finished_spans()
    assert done.name == "check orders" and done.attributes["txmsg.check.number"] == 3
    assert (done.attributes["txmsg.check.result"],
            done.attributes["txmsg.check.resolution"]) == ("UNKNOWN", "retry")
    assert len(done.links) == 1


def test_a_receive_starts_when_it_was_asked(exported: Any) -> None:
    started = spans.now_ns() - 5_000_000
    spans.received("orders", "billing", [{"message_id": "M1", "properties": {}}], started)
    [done] = exported.get_finished_spans()
    assert done.name == "receive orders" and done.start_time == started
    assert done.attributes["messaging.consumer.group.name"] == "billing"


def test_an_ack_of_several_offsets_counts_them(exported: Any) -> None:
    with spans.acking("orders", "billing", [1, 2, 3], None):
        pass
    with spans.acking("orders", "billing", [1], None):
        pass
    many, one = exported.get_finished_spans()
    assert many.attributes["messaging.batch.message_count"] == 3
    assert "messaging.batch.message_count" not in one.attributes
