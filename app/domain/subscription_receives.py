"""Receives: leasing deliverable messages, lowest offsets first, and dead-lettering
those whose deliveries are spent (``app.domain.subscriptions``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from sqlalchemy import Connection, Engine

from app.domain import clock, leasing
from app.domain.limits import MAX_INT64, offset_plus, within_budget
from app.domain.message_shapes import ReceivedMessage, as_received
from app.domain.names import new_message_ids
from app.domain.subscription_settings import found
from app.storage import log
from app.storage import subscription_acks as acks
from app.storage import subscription_leases as leases
from app.storage import subscriptions as store
from app.storage.db import commit_with_flush, each_statement_alone, write_transaction
from app.storage.schema import AnyRow

# rows a receive looks at past the read offset at most (delayed messages it steps over)
_SCAN_ROWS = 10_000
_DEAD_LETTERS_PER_RECEIVE = 1000


def anything_due(engine: Engine, topic: str, name: str) -> bool:
    """Whether a receive on the subscription would find something to do now (True for an
    unknown subscription: the receive answers 404). Read-only, for waiting receives."""
    with engine.connect() as conn:
        sub = store.get(conn, topic, name)
        return sub is None or leases.anything_due(conn, sub, clock.utcnow())


@dataclass
class Received:
    messages: list[ReceivedMessage]
    dead_lettered: int = 0
    dead_letter_topic: str = ""
    redelivered: int = 0


def receive(engine: Engine, topic: str, name: str, max_messages: int,
            max_bytes: int) -> Received:
    """Lease up to ``max_messages`` deliverable messages (at most ``max_bytes`` of bodies,
    but at least one), lowest offsets first; dead-letter those whose deliveries are spent.

    The leases are taken with the subscription row locked; the messages are read after
    that transaction, so that the next receive need not wait while these are read and
    shaped. A message that retention deletes in between is left out (it expired).
    On PostgreSQL the common case is one statement (``app.storage.subscription_leases.first_deliveries``)."""
    if leases.one_statement_leases(engine):
        fresh = _first_deliveries(engine, topic, name, max_messages, max_bytes)
        if fresh is not None:
            return fresh
    with write_transaction(engine) as conn:
        leased = _lease(conn, found(conn, topic, name, lock=True), max_messages, max_bytes)
    if not leased.picked:
        return leased.received
    with engine.connect() as conn:
        rows = log.read_at(conn, topic, list(leased.picked))
    leased.received.messages = [
        as_received(r, leased.picked[r.queue_offset]) for r in rows]
    return leased.received


def _first_deliveries(engine: Engine, topic: str, name: str, max_messages: int,
                      max_bytes: int) -> Received | None:
    with each_statement_alone(engine) as conn:
        rows = leases.first_deliveries(conn, topic, name, clock.utcnow(), max_messages,
                                       max_bytes, max_offset=MAX_INT64,
                                       deliveries=leasing.FIRST_DELIVERY)
    if rows is None:
        return None
    return Received([as_received(r, 0) for r in rows])


@dataclass
class _Leased:
    received: Received
    picked: dict[int, int]  # offset: redelivery count


def _lease(conn: Connection, sub: AnyRow, max_messages: int, max_bytes: int) -> _Leased:
    now = clock.utcnow()
    topic = sub.topic
    stored = (sub.ack_cursor, sub.read_offset)
    cursor, read = stored
    seen = leases.look(conn, sub.id, topic, now, cursor)
    if cursor < seen.first_offset:  # retention deleted what was below: acknowledged by expiry
        store.drop_below(conn, sub.id, seen.first_offset)
        cursor, read = seen.first_offset, max(read, seen.first_offset)
        store.change(conn, sub.id, {"ack_cursor": cursor, "read_offset": read})
        cursor = store.advance(conn, sub.id, cursor, read)
        stored = (cursor, read)
    else:  # over what acks left behind (stored with the read offset, below)
        cursor = max(cursor, read if seen.lowest_open is None else min(seen.lowest_open, read))
    spent = leasing.dead_letter_from(sub)
    any_due = seen.any_due  # usually nothing is due: one look instead of two
    dead = (leases.due(conn, sub.id, topic, now, _DEAD_LETTERS_PER_RECEIVE, dead_from=spent)
            if any_due else [])
    if dead:
        # it appends to a topic: its commit waits for the flush, as a commit's does
        commit_with_flush(conn)
        cursor = _dead_letter(conn, sub, {r.queue_offset: r.deliveries for r in dead},
                              stored[0], read, now)
        stored = (cursor, stored[1])

    until = leasing.lease_until(sub, now)
    picked: list[tuple[int, int]] = []  # (offset, redelivery count)
    used = 0
    full = False
    for r in (leases.due(conn, sub.id, topic, now, max_messages, live_below=spent)
              if any_due else []):
        if not within_budget(len(picked), used, r.size, max_bytes):
            full = True
            break
        picked.append((r.queue_offset, r.deliveries))
        used += r.size
    redelivered = len(picked)
    delayed: list[dict[str, Any]] = []
    scanned = 0
    while not full and len(picked) < max_messages and scanned < _SCAN_ROWS:
        window = max_messages - len(picked)
        batch = leases.scan(conn, topic, read, offset_plus(read, window))
        if not batch:
            break
        scanned += len(batch)
        for m in batch:
            if m.deliver_at is not None and m.deliver_at > now:
                delayed.append({"subscription_id": sub.id, "queue_offset": m.queue_offset,
                                "deliveries": 0, "leased_until": None,
                                "next_at": m.deliver_at, "held_by": None})
                read = m.queue_offset + 1
                continue
            if not within_budget(len(picked), used, m.size, max_bytes):
                full = True
                break
            picked.append((m.queue_offset, 0))
            used += m.size
            read = m.queue_offset + 1
            if len(picked) == max_messages:
                break
        if len(batch) < window:  # offsets are dense: nothing committed past it yet
            break
    leases.add_offsets(conn, delayed)
    leases.add_leased(conn, sub.id, [o for o, _ in picked[redelivered:]], until,
                      leasing.redeliverable_at(sub, until, 0), leasing.FIRST_DELIVERY)
    leases.lease(conn, sub.id, [(o, until, leasing.redeliverable_at(sub, until, n))
                                for o, n in picked[:redelivered]])
    changed = {k: v for k, v, was in (("ack_cursor", cursor, stored[0]),
                                      ("read_offset", read, stored[1])) if v != was}
    if changed:
        store.change(conn, sub.id, changed)
    return _Leased(Received([], len(dead), sub.dead_letter_topic, redelivered), dict(picked))


def _dead_letter(conn: Connection, sub: AnyRow, deliveries: dict[int, int], cursor: int,
                 read: int, now: datetime) -> int:
    """Append the messages at these offsets (with their deliveries) to the dead-letter
    topic, each a new message with its own id, and acknowledge them; the cursor moved
    over them."""
    offsets = sorted(deliveries)
    rows = log.read_at(conn, sub.topic, offsets)
    appended = []
    for r, copy_id in zip(rows, new_message_ids(len(rows)), strict=True):
        props = orjson.loads(r.properties)
        props.update(REAL_TOPIC=sub.topic, ORIGIN_SUBSCRIPTION=sub.name,
                     ORIGIN_OFFSET=str(r.queue_offset), ORIGIN_MESSAGE_ID=r.message_id,
                     REDELIVERY_COUNT=str(leasing.redelivery_count(deliveries[r.queue_offset])))
        appended.append({"half_message_id": r.half_message_id, "message_id": copy_id,
                         "properties": orjson.dumps(props).decode(), "committed_at": now})
    if appended:
        log.append(conn, sub.dead_letter_topic, appended)
    acks.acknowledge(conn, sub.id, offsets)
    return store.advance(conn, sub.id, cursor, read)
