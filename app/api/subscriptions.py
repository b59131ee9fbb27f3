"""Subscriptions: create, inspect, receive, ack, nack, renew, seek (``app.domain.subscriptions``).

A receive with ``wait_ms`` long-polls (``app.api.longpoll.long_poll``) on the front's
event loop: its waits hold no thread.
"""

from __future__ import annotations

from app import tracing
from app.api.access import Access, authorize
from app.api.call import Answer, Call
from app.api.http import parse_json
from app.api.longpoll import long_poll
from app.api.tracing import request_trace
from app.domain import spans
from app.domain import subscriptions as subs
from app.domain.access import CONSUME
from app.domain.messages import parse_body
from app.domain.names import check_readable_topic


def _names(call: Call) -> tuple[str, str]:
    return (check_readable_topic(call.params["topic"]),
            subs.check_subscription_name(call.params["subscription"]))


def put_subscription(call: Call) -> Answer:
    """Create a subscription (201) or change its settings (200). A dead-letter topic other
    than the default is written to by the subscription: it needs consume on that topic
    too (403)."""
    topic, name = _names(call)
    request = parse_body(subs.SubscriptionIn, parse_json(call.body) if call.body else {})
    if subs.names_other_dead_letter_topic(topic, name, request):
        authorize(_CONSUME_DEAD_LETTER_TOPIC, call.principal,
                  {"dead_letter_topic": request.dead_letter_topic})
    body, created = call.state.subscriptions.put(topic, name, request)
    return 201 if created else 200, body


_CONSUME_DEAD_LETTER_TOPIC = Access(action=CONSUME, param="dead_letter_topic")


def get_subscription(call: Call) -> Answer:
    """A subscription's settings, backlog, leases in flight and ack cursor."""
    return 200, call.state.subscriptions.get(*_names(call))


def delete_subscription(call: Call) -> Answer:
    """Remove a subscription and its state."""
    call.state.subscriptions.delete(*_names(call))
    return 204, None


def list_subscriptions(call: Call) -> Answer:
    """The topic's subscriptions by name; ``after`` pages."""
    topic = check_readable_topic(call.params["topic"])
    return 200, call.state.subscriptions.list(topic, call.arg("after"), call.arg("limit"))


async def receive(call: Call) -> Answer:
    """Lease deliverable messages, lowest offsets first; with ``wait_ms``, wait for one."""
    topic, name = _names(call)
    request = parse_body(subs.ReceiveIn, parse_json(call.body) if call.body else {})
    return 200, await long_poll(call, topic, name, request.max_messages, request.wait_ms,
                                request.consumer)


def ack(call: Call) -> Answer:
    """Acknowledge offsets, or every offset ``through`` one (failover, exclusive);
    ``acked``: how many were not acknowledged before."""
    topic, name = _names(call)
    request = parse_body(subs.SubscriptionAckIn, parse_json(call.body))
    subscriptions = call.state.subscriptions
    if request.offsets is None:
        assert request.through is not None  # SubscriptionAckIn takes one
        return 200, {"acked": subscriptions.ack_through(topic, name, request.through,
                                                        request.consumer)}
    offsets = request.offsets
    if tracing.TRACER is not None:  # the ack's span is the request's trace's child
        with spans.acking(topic, name, offsets, request_trace(call.headers)):
            return 200, {"acked": subscriptions.ack(topic, name, offsets, request.consumer)}
    return 200, {"acked": subscriptions.ack(topic, name, offsets, request.consumer)}


def leave(call: Call) -> Answer:
    """A consumer leaves at once: its leases go back for redelivery."""
    topic, name = _names(call)
    consumer = subs.check_consumer_name(call.params["consumer"])
    call.state.subscriptions.leave(topic, name, consumer)
    return 204, None


def nack(call: Call) -> Answer:
    """Give leased messages back: redelivered after ``delay_ms`` or the backoff."""
    topic, name = _names(call)
    request = parse_body(subs.NackIn, parse_json(call.body))
    return 200, {"nacked": call.state.subscriptions.nack(topic, name, request.offsets,
                                                         request.delay_ms, request.consumer)}


def renew(call: Call) -> Answer:
    """Leases still held on these offsets run for another ack timeout from now."""
    topic, name = _names(call)
    request = parse_body(subs.OffsetsIn, parse_json(call.body))
    return 200, {"renewed": call.state.subscriptions.renew(topic, name, request.offsets,
                                                           request.consumer)}


def seek(call: Call) -> Answer:
    """Acknowledge every offset below ``offset``, none from it on; leases dropped."""
    topic, name = _names(call)
    request = parse_body(subs.SeekIn, parse_json(call.body))
    return 200, call.state.subscriptions.seek(topic, name, request.offset)
