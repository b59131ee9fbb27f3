"""A request's W3C trace context (``app.domain.trace_context``), from its header fields:
the ASGI front's and Flask's read them alike."""

from __future__ import annotations

from collections.abc import Iterable

from flask import request

from app.domain.trace_context import TraceContext, from_headers


def request_trace(headers: Iterable[tuple[bytes, bytes]]) -> TraceContext | None:
    """The trace context of an ASGI request's header fields: fields repeated are joined
    with commas (so that two traceparents make an invalid one, as W3C would have it)."""
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


def flask_trace() -> TraceContext | None:
    """The trace context of the Flask request's header fields, as ``request_trace``."""
    traceparent = request.headers.getlist("traceparent")
    if not traceparent:
        return None
    tracestate = request.headers.getlist("tracestate")
    return from_headers(",".join(traceparent), ",".join(tracestate) if tracestate else None)
