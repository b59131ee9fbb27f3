"""Receives: leasing deliverable messages, lowest offsets first, and dead-lettering
those whose deliveries are spent (``app.domain.subscriptions``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from sqlalchemy import Connection, Engine

from app.domain import clock, consumers, leasing, tag_filters
from app.domain import subscription_types as types
from app.domain.limits import MAX_INT64, offset_plus, within_budget
from app.domain.message_shapes import ReceivedMessage, as_received
from app.domain.names import new_message_ids
from app.domain.subscription_settings import found
from app.storage import log, ordering
from app.storage import subscription_acks as acks
from app.storage import subscription_leases as leases
from app.storage import subscriptions as store
from app.storage.db import commit_with_flush, each_statement_alone, write_transaction
from app.storage.schema import AnyRow

# rows a receive looks at past the read offset at most (delayed messages it steps over)
_SCAN_ROWS = 10_000
_DEAD_LETTERS_PER_RECEIVE = 1000
# key_shared: a receive scans at most this many times its max_messages, and never past
# this many offsets above the ack cursor (messages waiting behind their keys are rows)
_KEYED_SCAN_FACTOR = 4
_KEYED_LOOKAHEAD = 10_000


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
            max_bytes: int, consumer: str | None = None) -> Received:
    """Lease up to ``max_messages`` deliverable messages (at most ``max_bytes`` of bodies,
    but at least one), lowest offsets first, to ``consumer``; dead-letter those whose
    deliveries are spent. What is deliverable depends on the subscription's type
    (``app.domain.subscription_types``) and tag filter.

    The leases are taken with the subscription row locked; the messages are read after
    that transaction, so that the next receive need not wait while these are read and
    shaped. A message that retention deletes in between is left out (it expired).
    On PostgreSQL the common case of a shared subscription is one statement
    (``app.storage.subscription_leases.first_deliveries``)."""
    if leases.one_statement_leases(engine) and types.maybe_shared_unfiltered(engine, topic, name):
        fresh = _first_deliveries(engine, topic, name, max_messages, max_bytes, consumer)
        if fresh is not None:
            return fresh
    with write_transaction(engine) as conn:
        sub = found(conn, topic, name, lock=True)
        types.remember(engine, sub)
        leased = _lease(conn, sub, max_messages, max_bytes, consumer)
    if not leased.picked:
        return leased.received
    with engine.connect() as conn:
        rows = log.read_at(conn, topic, list(leased.picked))
    leased.received.messages = [
        as_received(r, leased.picked[r.queue_offset]) for r in rows]
    return leased.received


def _first_deliveries(engine: Engine, topic: str, name: str, max_messages: int,
                      max_bytes: int, consumer: str | None) -> Received | None:
    with each_statement_alone(engine) as conn:
        rows = leases.first_deliveries(conn, topic, name, clock.utcnow(), max_messages,
                                       max_bytes, max_offset=MAX_INT64,
                                       deliveries=leasing.FIRST_DELIVERY, consumer=consumer)
        if rows is not None:
            consumers.seen_now_and_then(conn, topic, name, consumer)
    if rows is None:
        return None
    return Received([as_received(r, 0) for r in rows])


@dataclass
class _Leased:
    received: Received
    picked: dict[int, int]  # offset: redelivery count


def _lease(conn: Connection, sub: AnyRow, max_messages: int, max_bytes: int,
           consumer: str | None) -> _Leased:
    now = clock.utcnow()
    topic = sub.topic
    kind = types.of(sub)
    if kind.one_consumer:
        if consumer is None:
            raise types.consumer_required(sub)
        active = consumers.take_turn(conn, sub, consumer, now)
        consumers.refuse_unless_holder(sub, consumer, active)
        if active != consumer:  # a failover standby: served once it is active
            return _Leased(Received([]), {})
    else:
        consumers.seen_now_and_then(conn, topic, sub.name, consumer)
        consumers.release_the_gone(conn, sub, now)
    stored = (sub.ack_cursor, sub.read_offset)
    cursor, read = stored
    seen = leases.look(conn, sub.id, topic, now, cursor)
    if cursor < seen.first_offset:  # retention deleted what was below: acknowledged by expiry
        store.drop_below(conn, sub.id, topic, seen.first_offset, now)
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
        dead_keys = [r.ordering_key for r in dead if r.ordering_key is not None]
        if dead_keys:  # their next messages go in this receive already
            ordering.take_turns(conn, sub.id, dead_keys)
            ordering.promote(conn, sub.id, topic, dead_keys, now)

    until = leasing.lease_until(sub, now)
    picked: list[tuple[int, int]] = []  # (offset, redelivery count)
    used = 0
    full = False
    blocked = leases.blocked_from(conn, sub.id, now) if kind.in_offset_order else None
    filtered: list[int] = []  # never delivered, and the filter leaves them out
    freed: list[str] = []  # their keys: the next message of each is due
    for r in (leases.due(conn, sub.id, topic, now, max_messages, live_below=spent,
                         offsets_below=blocked) if any_due or dead else []):
        if r.deliveries == 0 and not tag_filters.matches(sub.tag_filter, r.tag):
            filtered.append(r.queue_offset)
            if r.ordering_key is not None:
                freed.append(r.ordering_key)
            continue
        if not within_budget(len(picked), used, r.size, max_bytes):
            full = True
            break
        picked.append((r.queue_offset, r.deliveries))
        used += r.size
    if filtered:
        acks.acknowledge(conn, sub.id, filtered)
    redelivered = len(picked)
    fresh = _Fresh(sub, now, kind, picked, used, read)
    if not full and blocked is None and len(picked) < max_messages:
        fresh.pull(conn, max_messages, max_bytes, cursor, freed)
    elif freed:
        ordering.take_turns(conn, sub.id, freed)
    if freed:
        ordering.promote(conn, sub.id, topic, freed, now)
    read = fresh.read
    leases.add_offsets(conn, sub.id, fresh.unleased)
    leases.add_leased(conn, sub.id, fresh.first, until,
                      leasing.redeliverable_at(sub, until, 0), leasing.FIRST_DELIVERY, consumer)
    leases.lease(conn, sub.id, [(o, until, leasing.redeliverable_at(sub, until, n))
                                for o, n in picked[:redelivered]], consumer)
    changed = {k: v for k, v, was in (("ack_cursor", cursor, stored[0]),
                                      ("read_offset", read, stored[1])) if v != was}
    if changed:
        store.change(conn, sub.id, changed)
    # the due rows never delivered (delayed, or made due behind their key) are first ones
    again = sum(1 for _, n in picked[:redelivered] if n > 0)
    return _Leased(Received([], len(dead), sub.dead_letter_topic, again), dict(picked))


class _Fresh:
    """A receive's pull of committed messages past the read offset: those the tag filter
    passes are leased (``first``), or recorded unleased (``unleased``): delayed ones, and on
    key_shared those whose key has an earlier message open (they wait). The picks are
    appended to the receive's ``picked``."""

    def __init__(self, sub: AnyRow, now: datetime, kind: types.Kind,
                 picked: list[tuple[int, int]], used: int, read: int) -> None:
        self.sub, self.now, self.kind = sub, now, kind
        self.picked, self.used, self.read = picked, used, read
        self.first: list[tuple[int, str | None]] = []
        self.unleased: list[dict[str, Any]] = []

    def pull(self, conn: Connection, max_messages: int, max_bytes: int, cursor: int,
             freed: list[str]) -> None:
        if self.kind.by_key:
            self._pull_by_key(conn, max_messages, max_bytes, cursor, freed)
            return
        scanned = 0
        while len(self.picked) < max_messages and scanned < _SCAN_ROWS:
            window = max_messages - len(self.picked)
            batch = leases.scan(conn, self.sub.topic, self.read, offset_plus(self.read, window))
            if not batch:
                return
            scanned += len(batch)
            if not self._take(batch, max_messages, max_bytes, set()):
                return
            if len(batch) < window:  # offsets are dense: nothing committed past it yet
                return

    def _pull_by_key(self, conn: Connection, max_messages: int, max_bytes: int,
                     cursor: int, freed: list[str]) -> None:
        """One scan (its keys taken turns on in one call, with the keys freed): at most a
        few batches' worth, and never further than ``_KEYED_LOOKAHEAD`` past the cursor,
        so that keys whose every message waits do not pull the whole backlog in."""
        room = min(_KEYED_SCAN_FACTOR * max_messages,
                   _KEYED_LOOKAHEAD - (self.read - cursor))
        batch = leases.scan(conn, self.sub.topic, self.read, offset_plus(self.read, room)) \
            if room > 0 else []
        keys = [m.ordering_key for m in batch if m.ordering_key is not None]
        ordering.take_turns(conn, self.sub.id, [*keys, *freed])
        self._take(batch, max_messages, max_bytes, ordering.open_keys(conn, self.sub.id, keys))

    def _take(self, batch: list[AnyRow], max_messages: int, max_bytes: int,
              open_keys: set[str]) -> bool:
        """Take the batch in offset order; whether to go on (not full)."""
        for m in batch:
            key = m.ordering_key if self.kind.by_key else None
            if not tag_filters.matches(self.sub.tag_filter, m.tag):
                self.read = m.queue_offset + 1  # counts as acknowledged
                continue
            delayed = m.deliver_at is not None and m.deliver_at > self.now
            if key is not None and key in open_keys:  # behind an earlier one of its key
                self.unleased.append({"queue_offset": m.queue_offset, "next_at": None,
                                      "ordering_key": key})
                self.read = m.queue_offset + 1
                continue
            if delayed:
                self.unleased.append({"queue_offset": m.queue_offset, "next_at": m.deliver_at,
                                      "ordering_key": m.ordering_key})
                self.read = m.queue_offset + 1
                if key is not None:
                    open_keys.add(key)
                continue
            if len(self.picked) == max_messages or not within_budget(
                    len(self.picked), self.used, m.size, max_bytes):
                if not self.kind.by_key:
                    return False
                # on key_shared the rest of the scan waits behind its keys or comes later
                if key is None:
                    return False
                self.unleased.append({"queue_offset": m.queue_offset, "next_at": self.now,
                                      "ordering_key": key})
                open_keys.add(key)
                self.read = m.queue_offset + 1
                continue
            self.picked.append((m.queue_offset, 0))
            self.first.append((m.queue_offset, m.ordering_key))
            self.used += m.size
            self.read = m.queue_offset + 1
            if key is not None:
                open_keys.add(key)
        return len(self.picked) < max_messages


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
