"""Subscriptions: create, inspect, receive, ack, nack, renew, seek (``app.domain.subscriptions``).

``receive`` with ``wait_ms`` is served by the ASGI front (``app.api.asgi``), whose wait holds
no thread; served here (``TXMSG_WEB_HOT_ROUTES=false``, or a WSGI server) it waits on a
thread, woken by this process's commits and re-checking at least once a second.
"""

from __future__ import annotations

import time
from typing import Any

from flask import Blueprint, Response, request

from app import tracing
from app.api.access import Access, authorize, current_principal, requires
from app.api.http import (
    json_body,
    json_response,
    limit_arg,
    no_content,
    parse_json,
    request_body,
    state,
)
from app.api.tracing import flask_trace
from app.domain import spans
from app.domain import subscriptions as subs
from app.domain.access import CONSUME
from app.domain.messages import parse_body
from app.domain.names import check_readable_topic, is_valid_name
from app.domain.trace_context import TraceContext
from app.domain.wakeups import RECHECK_SECONDS
from app.errors import InvalidRequest

bp = Blueprint("subscriptions", __name__, url_prefix="/v1/topics/<topic>/subscriptions")


def check_names(topic: str, subscription: str | None = None) -> None:
    """Shared by these routes and the ASGI front."""
    check_readable_topic(topic)
    if subscription is not None:
        subs.check_subscription_name(subscription)


def parse_receive(raw: bytes) -> subs.ReceiveIn:
    """A receive's body (an empty one: the defaults)."""
    return parse_body(subs.ReceiveIn, parse_json(raw) if raw else {})


def receive_once(app_state: Any, topic: str, subscription: str,
                 request: subs.ReceiveIn) -> subs.Received:
    started = spans.now_ns() if tracing.TRACER is not None else 0
    received: subs.Received = app_state.subscriptions.receive(topic, subscription,
                                                              request.max_messages)
    if started and received.messages:
        spans.received(topic, subscription, received.messages, started)
    return received


def parse_ack(raw: bytes) -> list[int]:
    """An ack's offsets."""
    return parse_body(subs.OffsetsIn, parse_json(raw)).offsets


def ack_once(app_state: Any, topic: str, subscription: str, offsets: list[int],
             trace: TraceContext | None = None) -> dict[str, int]:
    """``trace``: the request's trace context (the ack's span is its child)."""
    if tracing.TRACER is not None:
        with spans.acking(topic, subscription, offsets, trace):
            return {"acked": app_state.subscriptions.ack(topic, subscription, offsets)}
    return {"acked": app_state.subscriptions.ack(topic, subscription, offsets)}


@bp.put("/<subscription>")
@requires(CONSUME, "topic")
def put_subscription(topic: str, subscription: str) -> Response:
    """Create a subscription (201) or change its settings (200). A dead-letter topic other
    than the default is written to by the subscription: it needs consume on that topic
    too (403)."""
    check_names(topic, subscription)
    raw = request_body()
    req = parse_body(subs.SubscriptionIn, parse_json(raw) if raw else {})
    if subs.names_other_dead_letter_topic(topic, subscription, req):
        authorize(_CONSUME_DEAD_LETTER_TOPIC, current_principal(),
                  {"dead_letter_topic": req.dead_letter_topic})
    body, created = state().subscriptions.put(topic, subscription, req)
    return json_response(body, 201 if created else 200)


_CONSUME_DEAD_LETTER_TOPIC = Access(action=CONSUME, param="dead_letter_topic")


@bp.get("/<subscription>")
@requires(CONSUME, "topic")
def get_subscription(topic: str, subscription: str) -> Response:
    """A subscription's settings, backlog, leases in flight and ack cursor."""
    check_names(topic, subscription)
    return json_response(state().subscriptions.get(topic, subscription))


@bp.delete("/<subscription>")
@requires(CONSUME, "topic")
def delete_subscription(topic: str, subscription: str) -> Response:
    """Remove a subscription and its state."""
    check_names(topic, subscription)
    state().subscriptions.delete(topic, subscription)
    return no_content()


@bp.get("")
@requires(CONSUME, "topic")
def list_subscriptions(topic: str) -> Response:
    """The topic's subscriptions by name; ``after`` pages."""
    check_names(topic)
    after = request.args.get("after")
    if after is not None and not is_valid_name(after):
        raise InvalidRequest(f"query parameter after must be a subscription name, got "
                             f"{after!r}", code="invalid_query_parameter", parameter="after")
    return json_response(state().subscriptions.list(topic, after or "", limit_arg()))


@bp.post("/<subscription>/receive")
@requires(CONSUME, "topic")
def receive(topic: str, subscription: str) -> Response:
    """Lease deliverable messages, lowest offsets first; with ``wait_ms``, wait for one."""
    check_names(topic, subscription)
    req = parse_receive(request_body())
    app_state = state()
    deadline = time.monotonic() + req.wait_ms / 1000
    while True:
        seen = app_state.signal.version(topic)
        received = receive_once(app_state, topic, subscription, req)
        left = deadline - time.monotonic()
        if received.messages or left <= 0:
            return json_response({"messages": received.messages})
        app_state.signal.wait(topic, seen, min(left, RECHECK_SECONDS))


@bp.post("/<subscription>/ack")
@requires(CONSUME, "topic")
def ack(topic: str, subscription: str) -> Response:
    """Acknowledge offsets; ``acked``: how many were not acknowledged before."""
    check_names(topic, subscription)
    return json_response(ack_once(state(), topic, subscription, parse_ack(request_body()),
                                  flask_trace()))


@bp.post("/<subscription>/nack")
@requires(CONSUME, "topic")
def nack(topic: str, subscription: str) -> Response:
    """Give leased messages back: redelivered after ``delay_ms`` or the backoff."""
    check_names(topic, subscription)
    req = parse_body(subs.NackIn, json_body())
    return json_response({"nacked": state().subscriptions.nack(topic, subscription,
                                                               req.offsets, req.delay_ms)})


@bp.post("/<subscription>/renew")
@requires(CONSUME, "topic")
def renew(topic: str, subscription: str) -> Response:
    """Leases still held on these offsets run for another ack timeout from now."""
    check_names(topic, subscription)
    req = parse_body(subs.OffsetsIn, json_body())
    return json_response({"renewed": state().subscriptions.renew(topic, subscription,
                                                                 req.offsets)})


@bp.post("/<subscription>/seek")
@requires(CONSUME, "topic")
def seek(topic: str, subscription: str) -> Response:
    """Acknowledge every offset below ``offset``, none from it on; leases dropped."""
    check_names(topic, subscription)
    req = parse_body(subs.SeekIn, json_body())
    return json_response(state().subscriptions.seek(topic, subscription, req.offset))
