"""OpenTelemetry in the SDK, when it is installed (the ``otel`` extra): nothing otherwise.

The producer's and consumer's requests carry the current trace context (W3C
``traceparent`` / ``tracestate``, injected with ``opentelemetry.propagate`` and the
globally configured propagators); the service stores a send's with its messages. A
consumer's ``handle`` (and so ``run``) runs the handler of each message inside a CONSUMER
span ``process <topic>``, child of the context the message carries. Spans go to the
global tracer provider, which the application sets up (without one, OpenTelemetry's API
records nothing).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator, Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from txmsg_client.consumer import ReceivedMessage

SYSTEM = "txmsg"


@functools.cache
def _api() -> tuple[ModuleType, ModuleType] | None:
    """OpenTelemetry's ``propagate`` and ``trace``, or None when it is not installed."""
    try:
        from opentelemetry import propagate, trace
    except ImportError:
        return None
    return propagate, trace


def headers(base: dict[str, str]) -> dict[str, str]:
    """``base`` plus the current trace context's header fields (``base`` itself when there
    are none to add)."""
    api = _api()
    if api is None:
        return base
    carrier: dict[str, str] = {}
    api[0].inject(carrier)
    return {**base, **carrier} if carrier else base


@contextlib.contextmanager
def handling(message: ReceivedMessage, subscription: str) -> Iterator[Any]:
    """The span a handler of ``message`` runs in (None without OpenTelemetry): an error
    it raises is recorded on the span, and goes on."""
    api = _api()
    if api is None:
        yield None
        return
    propagate, trace = api
    parent = propagate.extract(_carrier(message.properties))
    attributes = {
        "messaging.system": SYSTEM, "messaging.operation.type": "process",
        "messaging.operation.name": "process", "messaging.destination.name": message.topic,
        "messaging.consumer.group.name": subscription,
        "messaging.message.id": message.message_id, "txmsg.offset": message.offset,
        "txmsg.redelivery_count": message.redelivery_count}
    tracer = trace.get_tracer("txmsg_client")
    with tracer.start_as_current_span(f"process {message.topic}", context=parent,
                                      kind=trace.SpanKind.CONSUMER,
                                      attributes=attributes) as span:
        yield span


def _carrier(properties: Mapping[str, str]) -> dict[str, str]:
    return {k: properties[k] for k in ("traceparent", "tracestate") if k in properties}
