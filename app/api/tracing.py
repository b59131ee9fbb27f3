"""A request's W3C trace context (``app.domain.trace_context``), from its header fields
as a ``Call`` carries them (``app.api.call``): the ASGI front's and Flask's alike."""

from __future__ import annotations

from collections.abc import Iterable

from app.domain.trace_context import TraceContext, from_headers


def request_trace(headers: Iterable[tuple[bytes, bytes]]) -> TraceContext | None:
    """The trace context of a request's header fields: fields repeated are joined with
    commas (so that two traceparents make an invalid one, as W3C would have it)."""
    traceparent: list[str] = []
    tracestate: list[str] = []
    for name, value in headers:
        if name == b"traceparent":
            traceparent.append(value.decode("latin-1"))
        elif name == b"tracestate":
            tracestate.append(value.decode("latin-1"))
    if not traceparent:
        return None
    return from_headers(",".join(traceparent), ",".join(tracestate) if tracestate else None)
