"""OpenTelemetry spans of txmsg's operations: when they are on, their parent, links and
messaging attributes."""

from __future__ import annotations

from typing import Any

import pytest

from app import tracing

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"
OTHER = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.mark.parametrize(("environ", "on"), [
    ({}, False),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True),
    ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, True),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": ""}, False),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://h:4318", "OTEL_SDK_DISABLED": " TRUE "}, False),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://h:4318", "OTEL_SDK_DISABLED": "false"}, True),
])
def test_configured(environ: dict[str, str], on: bool) -> None:
    assert tracing.configured(environ) is on


def test_install_does_nothing_unless_asked() -> None:
    assert tracing.install({}) is False
    assert tracing.TRACER is None


def test_one_topic() -> None:
    assert tracing.one_topic(["a", "a"]) == "a"
    assert tracing.one_topic(["a", "b"]) is None
    assert tracing.one_topic([]) is None


def test_links_go_to_each_distinct_valid_context() -> None:
    found = tracing.links([{"traceparent": PARENT}, {"traceparent": PARENT, "tracestate": "a=b"},
                           {"traceparent": "00-junk"}, {}, {"traceparent": OTHER}])
    assert [format(link.context.trace_id, "032x") for link in found] == [
        TRACE_ID, "0af7651916cd43dd8448eb211c80319c"]


def test_an_operation_is_a_child_of_its_traceparent(exported: Any) -> None:
    with tracing.operation("send", "send", "orders", "PRODUCER", traceparent=PARENT,
                           tracestate="vendor=1", attributes={"txmsg.producer_group": "shop"}):
        pass
    [span] = exported.get_finished_spans()
    assert span.name == "send orders"
    assert span.kind.name == "PRODUCER"
    assert format(span.context.trace_id, "032x") == TRACE_ID
    assert format(span.parent.span_id, "016x") == "00f067aa0ba902b7"
    assert span.context.trace_state.get("vendor") == "1"
    assert dict(span.attributes) == {
        "messaging.system": "txmsg", "messaging.operation.name": "send",
        "messaging.operation.type": "send", "messaging.destination.name": "orders",
        "txmsg.producer_group": "shop"}


def test_an_operation_without_a_parent_or_destination_is_a_root_named_for_itself(
        exported: Any) -> None:
    with tracing.operation("commit", "settle", None, "CLIENT", linked=[{"traceparent": OTHER}]):
        pass
    [span] = exported.get_finished_spans()
    assert span.name == "commit" and span.parent is None
    assert "messaging.destination.name" not in span.attributes
    assert [format(link.context.span_id, "016x") for link in span.links] == ["b7ad6b7169203331"]


def test_an_error_escaping_an_operation_is_recorded_on_it(exported: Any) -> None:
    with pytest.raises(RuntimeError), tracing.operation("ack", "settle", "t", "CLIENT"):
        raise RuntimeError("database gone")
    [span] = exported.get_finished_spans()
    assert span.status.status_code.name == "ERROR"
    assert [e.name for e in span.events] == ["exception"]


def test_count_messages(exported: Any) -> None:
    for ids in (["M1"], ["M1", "M2"], []):
        with tracing.operation("x", "send", None, "INTERNAL") as span:
            tracing.count_messages(span, ids)
    one, two, none = (dict(s.attributes) for s in exported.get_finished_spans())
    assert one["messaging.message.id"] == "M1" and "messaging.batch.message_count" not in one
    assert two["messaging.batch.message_count"] == 2 and "messaging.message.id" not in two
    assert "messaging.message.id" not in none and "messaging.batch.message_count" not in none


def test_shutdown_turns_tracing_off(exported: Any) -> None:
    assert tracing.TRACER is not None
    tracing.shutdown()
    assert tracing.TRACER is None
    tracing.shutdown()  # twice is harmless
