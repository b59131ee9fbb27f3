"""A request's trace context from its header fields as the ASGI front carries them."""

from __future__ import annotations

from app.api.tracing import request_trace
from app.domain.trace_context import TraceContext

VALID = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
OTHER = "00-4bf92f3577b34da6a3ce929d0e0e4737-00f067aa0ba902b8-01"


def test_no_traceparent_no_context() -> None:
    assert request_trace([]) is None
    assert request_trace([(b"tracestate", b"a=b"), (b"x-traceparent", VALID.encode())]) is None


def test_the_context_of_the_header_fields() -> None:
    headers = [(b"host", b"h"), (b"traceparent", VALID.encode()), (b"tracestate", b"a=b")]
    assert request_trace(headers) == TraceContext(VALID, "a=b")
    assert request_trace([(b"traceparent", VALID.encode())]) == TraceContext(VALID, None)


def test_two_traceparents_make_an_invalid_one() -> None:
    assert request_trace([(b"traceparent", VALID.encode()),
                          (b"traceparent", OTHER.encode())]) is None


def test_repeated_tracestates_are_joined() -> None:
    headers = [(b"traceparent", VALID.encode()), (b"tracestate", b"a=1"), (b"tracestate", b"b=2")]
    assert request_trace(headers) == TraceContext(VALID, "a=1,b=2")

