"""The spans of the domain's operations (``app.tracing``): what each one records.

Called only when tracing is on (``app.tracing.TRACER`` is set): the callers check that
first, so that with tracing off none of this runs.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from app import tracing
from app.domain.messages import TRACEPARENT, TransactionIn
from app.domain.trace_context import TraceContext
from app.vocabulary import Op

if TYPE_CHECKING:
    from opentelemetry.trace import Span

    from app.domain.lifecycle import FinishResult, SendResult

# FinishResult.extra: the trace contexts stored with the transaction's messages
STORED_TRACES = "stored_traces"


def stored_traces(properties: Sequence[str]) -> list[dict[str, str]]:
    """The messages' properties (JSON, as stored) that carry a trace context."""
    import orjson

    return [orjson.loads(p) for p in properties if TRACEPARENT in p]


@contextmanager
def sending(group: str, request: TransactionIn, trace: TraceContext | None) -> Iterator[Span]:
    """A send: a PRODUCER span, child of the request's trace context."""
    with tracing.operation(
            "send", "send", tracing.one_topic(m.topic for m in request.messages), "PRODUCER",
            traceparent=trace.traceparent if trace else None,
            tracestate=trace.tracestate if trace else None,
            attributes={"txmsg.producer_group": group}) as span:
        yield span


def sent(span: Span, result: SendResult) -> SendResult:
    body = result.body
    span.set_attribute("txmsg.transaction_id", body["transaction_id"])
    tracing.count_messages(span, [m["message_id"] for m in body["messages"]])
    return result


@contextmanager
def finishing(group: str, transaction_id: str, op: Op,
              trace: TraceContext | None) -> Iterator[Span]:
    """A commit, rollback, discard or resume: a CLIENT span (a settlement), child of the
    request's trace context (a check's, when the checker finishes it)."""
    with tracing.operation(
            op.value.lower(), "settle", None, "CLIENT",
            traceparent=trace.traceparent if trace else None,
            tracestate=trace.tracestate if trace else None,
            attributes={"txmsg.producer_group": group,
                        "txmsg.transaction_id": transaction_id}) as span:
        yield span


def finished(span: Span, result: FinishResult) -> FinishResult:
    """What the finish did: its messages, and links to their stored trace contexts."""
    span.set_attribute("txmsg.applied", result.applied)
    for link in tracing.links(result.extra.pop(STORED_TRACES, ())):
        span.add_link(link.context)
    messages = result.body.get("messages") or []
    topic = tracing.one_topic(m["topic"] for m in messages)
    if topic is not None:
        span.set_attribute("messaging.destination.name", topic)
        span.update_name(f"{span.name} {topic}")  # type: ignore[attr-defined]
    tracing.count_messages(span, [m["message_id"] for m in messages])
    return result


@contextmanager
def checking(group: str, transaction_id: str, number: int,
             messages: Sequence[Mapping[str, Any]]) -> Iterator[Span]:
    """A check: the server asks the producer (a CLIENT span), linked to the contexts the
    messages carry; its result is ``txmsg.check.result``."""
    with tracing.operation(
            "check", "settle", tracing.one_topic(m["topic"] for m in messages), "CLIENT",
            linked=(_properties(m.get("properties")) for m in messages),
            attributes={"txmsg.producer_group": group, "txmsg.transaction_id": transaction_id,
                        "txmsg.check.number": number}) as span:
        tracing.count_messages(span, [m["message_id"] for m in messages])
        yield span


def checked(span: Span, result: str, resolution: str) -> None:
    span.set_attribute("txmsg.check.result", result)
    span.set_attribute("txmsg.check.resolution", resolution)


def received(topic: str, subscription: str, messages: Sequence[Mapping[str, Any]],
             started_ns: int) -> None:
    """A receive that delivered messages (looks that found none make no span): a CLIENT
    span from ``started_ns``, linked to the contexts the messages carry."""
    with tracing.operation(
            "receive", "receive", topic, "CLIENT",
            linked=(_properties(m.get("properties")) for m in messages),
            attributes={"messaging.consumer.group.name": subscription},
            start_time=started_ns) as span:
        tracing.count_messages(span, [m["message_id"] for m in messages])


def _properties(value: Any) -> Mapping[str, str]:
    """A read message's properties: a mapping, or the stored JSON (an ``orjson.Fragment``)."""
    if value is None or isinstance(value, Mapping):
        return value or {}
    import orjson

    parsed: dict[str, str] = orjson.loads(orjson.dumps(value))  # a Fragment dumps as is
    return parsed


def now_ns() -> int:
    return time.time_ns()


@contextmanager
def acking(topic: str, subscription: str, offsets: Sequence[int],
           trace: TraceContext | None) -> Iterator[Span]:
    """An ack: a settlement (CLIENT span), child of the request's trace context."""
    with tracing.operation(
            "ack", "settle", topic, "CLIENT",
            traceparent=trace.traceparent if trace else None,
            tracestate=trace.tracestate if trace else None,
            attributes={"messaging.consumer.group.name": subscription}) as span:
        if len(offsets) > 1:
            span.set_attribute("messaging.batch.message_count", len(offsets))
        yield span
