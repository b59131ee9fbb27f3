"""Acks, nacks, renews and seeks of received messages."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, NamedTuple

from sqlalchemy import Connection, Engine

from app.domain import clock, consumers, leasing
from app.domain import subscription_types as types
from app.domain.subscription_models import KEY_SHARED
from app.domain.subscription_settings import describe, found, not_found
from app.errors import Conflict, DatabaseUnavailable, InvalidRequest
from app.problems import ProblemCode
from app.storage import ordering, topics
from app.storage import subscription_acks as acks
from app.storage import subscriptions as store
from app.storage.db import commit_without_flush, each_statement_alone, write_transaction
from app.storage.dialects import dialect_of
from app.storage.schema import AnyRow

log = logging.getLogger(__name__)


def _locked(conn: Connection, topic: str, name: str) -> AnyRow:
    return found(conn, topic, name, lock=True)


class Acked(NamedTuple):
    acked: int     # newly acknowledged
    promoted: int  # key_shared: messages now deliverable, their key's earlier one gone


def ack(engine: Engine, topic: str, name: str, offsets: Sequence[int],
        consumer: str | None = None) -> Acked:
    """Acknowledge offsets (those delivered, not yet acknowledged, not held by a
    transaction); how many were newly acknowledged.

    The ack locks only its offset rows (one statement, on PostgreSQL with the
    subscription's lookup) and commits. The stored cursor moves at the next receive;
    where acks move the cursor (``Dialect.acks_move_the_cursor``: SQLite), if the ack
    acknowledged the offset at the cursor, right after it too, unless a receive holds the
    subscription row now. (On PostgreSQL receives move it in their one statement, and a
    second statement here for one ack in a few cost more than the lag it saves.)"""
    if types.maybe_key_shared(engine, topic, name):
        return _ack_by_key(engine, topic, name, offsets, consumer)
    with each_statement_alone(engine) as conn:
        sub, n = acks.acknowledge_named(conn, topic, name, offsets, unless_type=KEY_SHARED)
        if sub is not None:
            consumers.seen_now_and_then(conn, topic, name, consumer)
    if sub is None:
        raise not_found(topic, name)
    types.remember(engine, sub)
    if sub.type == KEY_SHARED:
        return _ack_by_key(engine, topic, name, offsets, consumer)
    if n and sub.ack_cursor in offsets and dialect_of(engine).acks_move_the_cursor:
        _advance_unless_busy(engine, sub.id)
    return Acked(n, 0)


def _ack_by_key(engine: Engine, topic: str, name: str, offsets: Sequence[int],
                consumer: str | None) -> Acked:
    """An ack on key_shared: the rows deleted, then, in the same transaction, the next
    message of each of their keys made deliverable (``app.storage.ordering``). Another
    type found (it changed) is acknowledged as ``ack`` does."""
    with write_transaction(engine) as conn:
        sub = found(conn, topic, name)
        types.remember(engine, sub)
        consumers.seen_now_and_then(conn, topic, name, consumer)
        if sub.type != KEY_SHARED:
            n = acks.acknowledge(conn, sub.id, offsets)
            promoted = 0
        else:
            n, keys = acks.acknowledge_keyed(conn, sub.id, offsets)
            if keys:
                ordering.take_turns(conn, sub.id, keys)
            promoted = ordering.promote(conn, sub.id, topic, keys, clock.utcnow())
    if n and sub.ack_cursor in offsets and dialect_of(engine).acks_move_the_cursor:
        _advance_unless_busy(engine, sub.id)
    return Acked(n, promoted)


def ack_through(engine: Engine, topic: str, name: str, through: int,
                consumer: str | None) -> int:
    """Cumulative: every offset up to ``through`` acknowledged, by the active consumer of a
    failover or exclusive subscription; how many were not acknowledged before."""
    with write_transaction(engine) as conn:
        sub = found(conn, topic, name)
        if not types.of(sub).cumulative_acks:
            raise InvalidRequest(f"subscription {name!r} on {topic!r} is {sub.type}: acks "
                                 "name their offsets one by one",
                                 code=ProblemCode.CUMULATIVE_ACK_UNSUPPORTED)
        if consumer is None:
            raise types.consumer_required(sub)
        if consumer != sub.active_consumer:
            raise Conflict(f"consumer {consumer!r} is not the active consumer of "
                           f"subscription {name!r} on {topic!r}",
                           code=ProblemCode.NOT_ACTIVE_CONSUMER, consumer=consumer)
        if through >= sub.read_offset:
            raise Conflict(f"offset {through} was not delivered on subscription {name!r} "
                           f"on {topic!r}", code=ProblemCode.ACK_NOT_PENDING,
                           topic=topic, subscription=name, offset=through)
        held = acks.held_through(conn, sub.id, through)
        if held is not None:
            raise Conflict(f"offset {held} of subscription {name!r} on {topic!r} is held by "
                           "an unresolved transaction", code=ProblemCode.ACK_CONFLICT,
                           topic=topic, subscription=name, offset=held)
        consumers.seen_now_and_then(conn, topic, name, consumer)
        n, _ = acks.acknowledge_through(conn, sub.id, through)
    if n and dialect_of(engine).acks_move_the_cursor:
        _advance_unless_busy(engine, sub.id)
    return n


def _advance_unless_busy(engine: Engine, sub_id: int) -> None:
    """Move the cursor over the acknowledged head, unless the subscription row is locked
    (or, on SQLite, the database: another writer held it past the busy timeout). Derived
    state: lost in a crash or skipped, the next move recomputes it, so it does not wait
    for its flush, and the ack, committed before it, answers all the same."""
    try:
        with write_transaction(engine) as conn:
            sub = store.lock_unless_busy(conn, sub_id)
            if sub is not None and store.advance(conn, sub.id, sub.ack_cursor,
                                                 sub.read_offset) != sub.ack_cursor:
                commit_without_flush(conn)
    except DatabaseUnavailable as exc:
        log.info("the ack cursor of subscription %d moves later: %s", sub_id, exc)


@dataclass(frozen=True)
class Nacked:
    count: int
    soonest: timedelta | None  # from now until the first of them is deliverable again


def nack(engine: Engine, topic: str, name: str, offsets: Sequence[int],
         delay_ms: int | None, consumer: str | None = None) -> Nacked:
    """Give leased messages back, deliverable after ``delay_ms`` or the backoff."""
    now = clock.utcnow()
    with write_transaction(engine) as conn:
        sub = found(conn, topic, name)
        consumers.seen_now_and_then(conn, topic, name, consumer)
        changes = []
        waits = []
        for r in acks.rows_at(conn, sub.id, offsets):
            if r.held_by is not None or r.leased_until is None or r.leased_until <= now:
                continue
            wait = (timedelta(milliseconds=delay_ms) if delay_ms is not None
                    else leasing.backoff(sub, leasing.redelivery_count(r.deliveries)))
            changes.append((r.queue_offset, None, now + wait))
            waits.append(wait)
        acks.reschedule(conn, sub.id, changes)
        return Nacked(len(changes), min(waits, default=None))


def renew(engine: Engine, topic: str, name: str, offsets: Sequence[int],
          consumer: str | None = None) -> int:
    """Leases still held on these offsets run for another ack timeout; how many."""
    now = clock.utcnow()
    with write_transaction(engine) as conn:
        sub = found(conn, topic, name)
        consumers.seen_now_and_then(conn, topic, name, consumer)
        until = leasing.lease_until(sub, now)
        changes = [(r.queue_offset, until,
                    leasing.redeliverable_at(sub, until, leasing.redelivery_count(r.deliveries)))
                   for r in acks.rows_at(conn, sub.id, offsets)
                   if r.leased_until is not None and r.leased_until > now]
        acks.reschedule(conn, sub.id, changes)
        return len(changes)


def seek(engine: Engine, topic: str, name: str, offset: int) -> dict[str, Any]:
    """Every offset below ``offset`` acknowledged, every one from it on not, leases
    dropped; the subscription's description. Offsets an unresolved transaction holds
    stay held, on either side of ``offset``: its commit acknowledges them, its rollback
    or discard releases them for delivery."""
    with write_transaction(engine) as conn:
        sub = _locked(conn, topic, name)
        _, nxt = topics.topic_ends(conn, topic)
        if offset > nxt:
            raise InvalidRequest(f"offset {offset} is past the topic's next offset {nxt}",
                                 code=ProblemCode.OFFSET_OUT_OF_RANGE, next_offset=nxt)
        store.reset(conn, sub.id, topic, offset, clock.utcnow())
        if sub.type == KEY_SHARED:
            ordering.order_by_keys(conn, sub.id, topic, clock.utcnow())
        return describe(conn, found(conn, topic, name), clock.utcnow())
