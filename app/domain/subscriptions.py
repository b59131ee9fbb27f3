"""Shared subscriptions (Pulsar's, over HTTP): leasing, acknowledging, redelivery with
backoff, dead-lettering, seek.

Every committed message of the topic goes to one receive at a time, lowest offsets first.
A receive leases what it returns for ``ack_timeout_ms``; a lease that runs out, or a
nack, makes the message deliverable again after the backoff (``min_ms × 2^r`` for a
message delivered with ``redelivery_count`` r, at most ``max_ms``) or the nack's delay.
A message due for its delivery number ``2 + max_redeliveries`` is appended to the
dead-letter topic instead, and counts as acknowledged, in the same database transaction
that decided it: receives take turns on the subscription row and lock the offset rows they
deliver again or dead-letter, so two receives can neither deliver one offset twice nor
dead-letter it twice, in one process or several. Acks, nacks and renews lock only the
offset rows they change, so they do not wait for receives (``app.storage.subscriptions``).

The state kept is Pulsar's "individually deleted messages": a cursor below which all is
acknowledged, and one row per offset above it that was looked at
(``app.storage.subscriptions``).

The rules live by concept, and this module is what the rest of the service imports:
``subscription_models`` (what clients send), ``subscription_settings`` (administration),
``subscription_receives`` (leases and dead letters), ``subscription_acks`` (acks, nacks,
renews, seeks), ``transactional_acks`` (acks held by a transaction until it resolves),
``leasing`` (the backoff).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Engine

from app import metrics
from app.domain.consumers import leave
from app.domain.leasing import backoff_ms
from app.domain.limits import MAX_BACKOFF_MS
from app.domain.subscription_acks import Nacked, ack, ack_through, nack, renew, seek
from app.domain.subscription_models import (
    MAX_OFFSETS,
    MAX_RECEIVE,
    MAX_WAIT_MS,
    BackoffIn,
    NackIn,
    OffsetsIn,
    ReceiveIn,
    SeekIn,
    SubscriptionAckIn,
    SubscriptionIn,
    check_consumer_name,
    check_subscription_name,
    dead_letter_topic,
    default_dead_letter_topic,
    names_other_dead_letter_topic,
)
from app.domain.subscription_receives import Received, anything_due, receive
from app.domain.subscription_settings import (
    alive_consumers,
    backlogs,
    delete,
    describe_each,
    get,
    list_subscriptions,
    put,
)
from app.domain.transactional_acks import FinishAcks, hold_acks
from app.domain.wakeups import TopicSignal

__all__ = [
    "MAX_BACKOFF_MS", "MAX_OFFSETS", "MAX_RECEIVE", "MAX_WAIT_MS", "BackoffIn",
    "FinishAcks",
    "NackIn", "Nacked", "OffsetsIn", "ReceiveIn", "Received", "SeekIn", "SubscriptionAckIn",
    "SubscriptionIn",
    "Subscriptions", "ack", "alive_consumers", "anything_due", "backlogs", "backoff_ms", "check_consumer_name",
    "check_subscription_name",
    "dead_letter_topic", "default_dead_letter_topic", "delete", "describe_each", "get",
    "hold_acks", "list_subscriptions", "nack", "names_other_dead_letter_topic",
    "put", "receive", "renew", "seek",
]


class Subscriptions:
    """The subscription operations of one process, with what they tell others: the
    receives waiting on a topic (``signal``) and the metrics."""

    def __init__(self, engine: Engine, max_read_bytes: int, signal: TopicSignal) -> None:
        self.engine = engine
        self.max_read_bytes = max_read_bytes
        self.signal = signal

    def put(self, topic: str, name: str, request: SubscriptionIn
            ) -> tuple[dict[str, Any], bool]:
        return put(self.engine, topic, name, request)

    def get(self, topic: str, name: str) -> dict[str, Any]:
        return get(self.engine, topic, name)

    def list(self, topic: str, after: str, limit: int) -> dict[str, Any]:
        return list_subscriptions(self.engine, topic, after, limit)

    def delete(self, topic: str, name: str) -> None:
        delete(self.engine, topic, name)

    def receive(self, topic: str, name: str, max_messages: int,
                consumer: str | None = None) -> Received:
        received = receive(self.engine, topic, name, max_messages, self.max_read_bytes,
                           consumer)
        if received.redelivered:
            metrics.REDELIVERIES.labels(topic, name).inc(received.redelivered)
        if received.dead_lettered:
            metrics.DEAD_LETTERS.labels(topic, name).inc(received.dead_lettered)
            self.signal.notify((received.dead_letter_topic,))
        return received

    def ack(self, topic: str, name: str, offsets: Sequence[int],
            consumer: str | None = None) -> int:
        acked = ack(self.engine, topic, name, offsets, consumer)
        if acked.promoted:  # key_shared: the next message of a key is deliverable now
            self.signal.notify((topic,))
        return acked.acked

    def ack_through(self, topic: str, name: str, through: int, consumer: str | None) -> int:
        return ack_through(self.engine, topic, name, through, consumer)

    def leave(self, topic: str, name: str, consumer: str) -> None:
        """The consumer leaves: its leases go back at once (waiting receives look again)."""
        leave(self.engine, topic, name, consumer)
        self.signal.notify((topic,))

    def nack(self, topic: str, name: str, offsets: Sequence[int], delay_ms: int | None,
             consumer: str | None = None) -> int:
        """The receives waiting on the topic are woken when the first of these is
        deliverable again (at once for no delay), not at their next probe."""
        nacked = nack(self.engine, topic, name, offsets, delay_ms, consumer)
        if nacked.soonest is not None:
            self.signal.notify_later((topic,), nacked.soonest.total_seconds())
        return nacked.count

    def renew(self, topic: str, name: str, offsets: Sequence[int],
              consumer: str | None = None) -> int:
        return renew(self.engine, topic, name, offsets, consumer)

    def seek(self, topic: str, name: str, offset: int) -> dict[str, Any]:
        body = seek(self.engine, topic, name, offset)
        self.signal.notify((topic,))
        return body
