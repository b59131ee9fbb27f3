"""OpenTelemetry spans of txmsg's operations, exported over OTLP/HTTP.

Off unless ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) is
set when a process starts (``install``); ``OTEL_SDK_DISABLED=true`` keeps it off. Off,
nothing of OpenTelemetry is imported and the hot path pays one check, ``TRACER is None``,
at each hook (``app.domain.lifecycle``, ``app.api.subscriptions``, ``checker.service``).
On, the OpenTelemetry SDK reads the other standard ``OTEL_*`` variables itself (headers,
timeouts, ``OTEL_BSP_*`` for its BatchSpanProcessor, ``OTEL_SERVICE_NAME``, default
``txmsg``), and ``shutdown`` flushes what is left, within a bound.

The spans follow OpenTelemetry's messaging semantic conventions (``messaging.system`` is
``txmsg``): send is a PRODUCER span, child of the request's ``traceparent``; commit,
rollback, ack and check settle messages and receive fetches them (CLIENT spans, as the
conventions have them for settlement and pull receives); commit, check and receive link
to the contexts stored with the messages (``app.domain.trace_context``).
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span, SpanKind, Tracer

log = logging.getLogger(__name__)

SYSTEM = "txmsg"
# the longest a process's end waits for its last spans: on SIGTERM, `txmsg serve` ends
# within 10 s, a web worker's export and then the check service's, whatever the endpoint does
SHUTDOWN_SECONDS = 2.0
TRACER: Tracer | None = None
_PROVIDER: TracerProvider | None = None


def configured(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether ``environ`` asks for spans to be exported."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return bool(environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
                or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


def install(environ: Mapping[str, str] = os.environ) -> bool:
    """Export this process's spans if ``environ`` asks for it (once per process)."""
    if TRACER is not None or not configured(environ):
        return TRACER is not None
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        log.warning("OTEL_EXPORTER_OTLP_ENDPOINT is set but OpenTelemetry is not installed "
                    "(pip install 'txmsg[otel]'): no spans exported (%s)", exc)
        return False

    attributes = {} if environ.get("OTEL_SERVICE_NAME") else {"service.name": "txmsg"}
    # at exit, the bounded ``shutdown`` rather than the SDK's own (a WSGI worker has no
    # lifespan to call it)
    provider = TracerProvider(resource=Resource.create(attributes), shutdown_on_exit=False)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    use(provider)
    atexit.register(shutdown)
    return True


def use(provider: TracerProvider) -> None:
    """Record spans with ``provider`` (``install``'s, or a test's)."""
    global TRACER, _PROVIDER
    _PROVIDER = provider
    TRACER = provider.get_tracer("txmsg")


def shutdown(timeout: float = SHUTDOWN_SECONDS) -> None:
    """Export the spans still buffered for at most ``timeout`` seconds, then stop (at a
    process's end). The SDK bounds neither: its BatchSpanProcessor waits up to 30 s for
    its last batches, each of which waits the exporter's timeout (10 s) for an endpoint
    that does not answer. Past ``timeout`` what is left is dropped: the export goes on
    in a daemon thread, which the process's exit ends."""
    global TRACER, _PROVIDER
    provider, TRACER, _PROVIDER = _PROVIDER, None, None
    if provider is None:
        return
    stopping = threading.Thread(target=provider.shutdown, name="txmsg-tracing-shutdown",
                                daemon=True)
    stopping.start()
    stopping.join(timeout)
    if stopping.is_alive():
        log.warning("the OTLP endpoint took no spans within %g s: the last ones are dropped",
                    timeout)


def _context(traceparent: str | None, tracestate: str | None = None) -> Any:
    """The OpenTelemetry context of a W3C trace context (None: no parent)."""
    if traceparent is None:
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier = {"traceparent": traceparent}
    if tracestate is not None:
        carrier["tracestate"] = tracestate
    return TraceContextTextMapPropagator().extract(carrier)


def links(properties: Iterable[Mapping[str, str]]) -> list[Any]:
    """A link to each distinct valid trace context among messages' ``properties``."""
    from opentelemetry.trace import Link, get_current_span

    seen: set[str] = set()
    out: list[Any] = []
    for props in properties:
        traceparent = props.get("traceparent")
        if traceparent is None or traceparent in seen:
            continue
        seen.add(traceparent)
        context = get_current_span(_context(traceparent, props.get("tracestate")))
        span_context = context.get_span_context()
        if span_context.is_valid:
            out.append(Link(span_context))
    return out


def kind(name: str) -> SpanKind:
    from opentelemetry.trace import SpanKind

    return SpanKind[name]


@contextmanager
def operation(name: str, operation_type: str, destination: str | None, span_kind: str, *,
              traceparent: str | None = None, tracestate: str | None = None,
              linked: Iterable[Mapping[str, str]] = (),
              attributes: Mapping[str, Any] | None = None,
              start_time: int | None = None) -> Iterator[Span]:
    """A span ``"{name} {destination}"`` with the messaging attributes, child of
    ``traceparent`` (else a root), linked to the trace contexts in ``linked``; an error
    escaping it is recorded on it. Only called when ``TRACER`` is set."""
    assert TRACER is not None
    attrs: dict[str, Any] = {"messaging.system": SYSTEM, "messaging.operation.name": name,
                             "messaging.operation.type": operation_type}
    if destination is not None:
        attrs["messaging.destination.name"] = destination
    attrs.update(attributes or {})
    with TRACER.start_as_current_span(
            f"{name} {destination}" if destination else name,
            context=_context(traceparent, tracestate), kind=kind(span_kind),
            links=links(linked), attributes=attrs, start_time=start_time) as span:
        yield span


def one_topic(topics: Iterable[str]) -> str | None:
    """The destination of messages all on one topic; None when they are on several."""
    distinct = set(topics)
    return distinct.pop() if len(distinct) == 1 else None


def count_messages(span: Span, message_ids: list[str]) -> None:
    """``messaging.message.id`` of a single message, else the batch's size."""
    if len(message_ids) == 1:
        span.set_attribute("messaging.message.id", message_ids[0])
    elif message_ids:
        span.set_attribute("messaging.batch.message_count", len(message_ids))
