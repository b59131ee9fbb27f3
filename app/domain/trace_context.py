"""W3C trace context (https://www.w3.org/TR/trace-context/) carried from a send to its
messages: the request's ``traceparent`` / ``tracestate`` headers become the messages'
properties of those names, so a consumer continues the producer's trace.

As W3C says of a receiver, an invalid ``traceparent`` is ignored (never a 400), and with
it its ``tracestate``. A header value never turns a valid send into a refused one: a
message that sets either property keeps its own context (and gets none of the request's),
and a message whose properties
are at their limits (``MAX_PROPERTIES`` entries, ``MAX_PROPERTIES_BYTES`` bytes) is
stored without the header values that would not fit.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from app.domain.messages import (
    MAX_PROPERTIES,
    MAX_PROPERTIES_BYTES,
    TRACEPARENT,
    TRACESTATE,
    MessageIn,
    TransactionIn,
)

# W3C's guidance: a tracestate may be cut to 512 characters; longer ones are not kept
MAX_TRACESTATE = 512
MAX_TRACESTATE_MEMBERS = 32
# version-traceid-parentid-flags; a later version may append "-..." fields
_TRACEPARENT = re.compile(
    r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-[\x21-\x7e]*)?")
_PRINTABLE = re.compile(r"[\x20-\x7e]*")


class TraceContext(NamedTuple):
    traceparent: str
    tracestate: str | None

    def properties(self) -> dict[str, str]:
        if self.tracestate is None:
            return {TRACEPARENT: self.traceparent}
        return {TRACEPARENT: self.traceparent, TRACESTATE: self.tracestate}


def valid_traceparent(value: str) -> bool:
    match = _TRACEPARENT.fullmatch(value)
    if match is None:
        return False
    version, trace_id, parent_id, _, rest = match.groups()
    if version == "ff" or (version == "00" and rest is not None):
        return False
    return trace_id != "0" * 32 and parent_id != "0" * 16


def from_headers(traceparent: str | None, tracestate: str | None) -> TraceContext | None:
    """The request's trace context; None without a valid ``traceparent``. A ``tracestate``
    longer than ``MAX_TRACESTATE`` characters, with more than 32 members or other than
    printable ASCII is dropped (the ``traceparent`` is kept)."""
    if traceparent is None:
        return None
    traceparent = traceparent.strip(" \t")
    if not valid_traceparent(traceparent):
        return None
    if tracestate is not None:
        tracestate = tracestate.strip(" \t")
        if (not tracestate or len(tracestate) > MAX_TRACESTATE
                or not _PRINTABLE.fullmatch(tracestate)
                or tracestate.count(",") >= MAX_TRACESTATE_MEMBERS):
            tracestate = None
    return TraceContext(traceparent, tracestate)


def stamp(request: TransactionIn, trace: TraceContext) -> TransactionIn:
    """``request`` with ``trace`` in each message's properties, where it is not set and
    fits. Not part of the send's fingerprint (``TransactionIn.fingerprint``): a retried
    send runs under another span, and is still the same send."""
    messages = [_stamped(m, trace) for m in request.messages]
    if all(new is old for new, old in zip(messages, request.messages, strict=True)):
        return request
    return request.model_copy(update={"messages": messages})


def _stamped(message: MessageIn, trace: TraceContext) -> MessageIn:
    props = message.properties
    if TRACEPARENT in props or TRACESTATE in props:  # its own context: none of the request's
        return message
    added: dict[str, str] = {}
    count = len(props)
    size = sum(len(k.encode()) + len(v.encode()) for k, v in props.items())
    for key, value in trace.properties().items():
        grown = size + len(key) + len(value)  # both ASCII
        if count + 1 > MAX_PROPERTIES or grown > MAX_PROPERTIES_BYTES:
            break  # no tracestate without its traceparent
        added[key], count, size = value, count + 1, grown
    if not added:
        return message
    return message.model_copy(update={"properties": {**props, **added}})
