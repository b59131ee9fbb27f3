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
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, StrictInt, field_validator, model_validator
from pydantic_core import PydanticCustomError
from sqlalchemy import Connection, Engine

from app import metrics
from app.domain.limits import MAX_DELAY_MS, MAX_INT64, offset_plus
from app.domain.names import (
    DISCARD_TOPIC,
    NAME_PATTERN,
    SYSTEM_TOPIC_PREFIX,
    TopicName,
    is_valid_name,
    new_message_id,
)
from app.domain.wakeups import TopicSignal
from app.errors import Conflict, InvalidRequest, NotFound
from app.storage import sends
from app.storage import subscriptions as store
from app.storage.db import (
    commit_with_flush,
    commit_without_flush,
    write_transaction,
)
from app.storage.schema import AnyRow
from app.vocabulary import Op

MAX_BACKOFF_MS = 3_600_000
MAX_RECEIVE = 1000
MAX_WAIT_MS = 30_000
MAX_OFFSETS = 1000
# rows a receive looks at past the read offset at most (delayed messages it steps over)
_SCAN_ROWS = 10_000
_DEAD_LETTERS_PER_RECEIVE = 1000

_STRICT = ConfigDict(strict=True, extra="forbid", frozen=True)
Offset = StrictInt


def _custom(code: str, message: str) -> PydanticCustomError:
    return PydanticCustomError(code, message)


class BackoffIn(BaseModel):
    """Redelivery after a nack without delay or a lease that ran out: ``min_ms × 2^r`` for
    a message delivered with ``redelivery_count`` r, at most ``max_ms``."""

    model_config = _STRICT

    min_ms: StrictInt = Field(1000, ge=0, le=MAX_BACKOFF_MS)
    max_ms: StrictInt = Field(60000, ge=0, le=MAX_BACKOFF_MS, description=(
        "At least `min_ms` (else `invalid_backoff`)."))

    @model_validator(mode="after")
    def _ordered(self) -> BackoffIn:
        if self.min_ms > self.max_ms:
            raise _custom("invalid_backoff", f"redelivery_backoff.min_ms ({self.min_ms}) is "
                          f"more than max_ms ({self.max_ms})")
        return self


class SubscriptionIn(BaseModel):
    """``PUT /v1/topics/{topic}/subscriptions/{subscription}``; every field optional."""

    model_config = _STRICT

    initial_position: Literal["latest", "earliest"] = Field("latest", description=(
        "Where a new subscription starts: at the topic's next offset, or at its first "
        "retained one. Counts only at creation."))
    ack_timeout_ms: StrictInt = Field(30000, ge=1000, le=43_200_000, description=(
        "How long a received message stays leased to its receive."))
    max_redeliveries: StrictInt = Field(16, ge=0, le=1000, description=(
        "A message delivered 1 + this many times without an acknowledgement goes to the "
        "dead-letter topic."))
    redelivery_backoff: BackoffIn = Field(default_factory=BackoffIn)
    dead_letter_topic: TopicName | None = Field(None, description=(
        "Default: `<topic>-<subscription>-DLQ` (when that name is valid). Not the "
        "subscription's own topic (`invalid_dead_letter_topic`); another one than the "
        "default needs consume on it (403 `forbidden`)."))

    @field_validator("dead_letter_topic")
    @classmethod
    def _dead_letter_topic(cls, topic: str | None) -> str | None:
        if topic is None:
            return None
        if not is_valid_name(topic):
            raise _custom("invalid_topic", f"dead_letter_topic {topic!r} must match "
                          f"{NAME_PATTERN}")
        if topic.startswith(SYSTEM_TOPIC_PREFIX) or topic == DISCARD_TOPIC:
            raise _custom("reserved_topic", f"topic {topic!r} is reserved and cannot be a "
                          "dead-letter topic")
        return topic


class ReceiveIn(BaseModel):
    model_config = _STRICT

    max_messages: StrictInt = Field(10, ge=1, le=MAX_RECEIVE)
    wait_ms: StrictInt = Field(0, ge=0, le=MAX_WAIT_MS, description=(
        "Wait up to this long for a deliverable message (then answer an empty list)."))


class OffsetsIn(BaseModel):
    model_config = _STRICT

    offsets: list[Offset] = Field(max_length=MAX_OFFSETS)

    @field_validator("offsets")
    @classmethod
    def _offsets(cls, offsets: list[int]) -> list[int]:
        if any(o < 0 or o > MAX_INT64 for o in offsets):
            raise _custom("invalid_offset", f"offsets are integers 0..{MAX_INT64}")
        return offsets


class NackIn(OffsetsIn):
    delay_ms: StrictInt | None = Field(None, ge=0, le=MAX_DELAY_MS, description=(
        "Redeliver after this long; default: the subscription's backoff."))


class SeekIn(BaseModel):
    model_config = _STRICT

    offset: StrictInt = Field(ge=0, le=MAX_INT64, description=(
        "Every offset below it is acknowledged, every one from it on is not. At most the "
        "topic's `next_offset` (else `offset_out_of_range`)."))


# -- names --------------------------------------------------------------------------------


def check_subscription_name(name: str) -> str:
    if not is_valid_name(name):
        raise InvalidRequest(f"subscription name {name!r} must match {NAME_PATTERN}",
                             code="invalid_subscription")
    return name


def default_dead_letter_topic(topic: str, name: str) -> str:
    return f"{topic}-{name}-DLQ"


def dead_letter_topic(topic: str, name: str, request: SubscriptionIn) -> str:
    """The dead-letter topic the request names, or the default; never the subscription's
    own topic (its dead letters would come back to it)."""
    dead_letter = request.dead_letter_topic or default_dead_letter_topic(topic, name)
    if dead_letter == topic:
        raise InvalidRequest(f"dead_letter_topic {topic!r} is the subscription's own topic",
                             code="invalid_dead_letter_topic")
    return dead_letter


def names_other_dead_letter_topic(topic: str, name: str, request: SubscriptionIn) -> bool:
    """Whether the request names a dead-letter topic other than the default: one the
    subscription writes into, which the caller must be allowed to consume."""
    given = request.dead_letter_topic
    return given is not None and given != default_dead_letter_topic(topic, name)


def backoff_ms(min_ms: int, max_ms: int, redelivery_count: int) -> int:
    """``min_ms × 2^redelivery_count``, at most ``max_ms``."""
    if min_ms == 0:
        return 0
    if redelivery_count >= 62 or min_ms << redelivery_count > max_ms:
        return max_ms
    return min_ms << redelivery_count


def utcnow() -> datetime:
    return datetime.now(UTC)


# -- answers ------------------------------------------------------------------------------


def _settings(row: AnyRow) -> dict[str, Any]:
    return {"topic": row.topic, "subscription": row.name,
            "ack_timeout_ms": row.ack_timeout_ms, "max_redeliveries": row.max_redeliveries,
            "redelivery_backoff": {"min_ms": row.backoff_min_ms, "max_ms": row.backoff_max_ms},
            "dead_letter_topic": row.dead_letter_topic}


def _describe(conn: Connection, row: AnyRow, now: datetime) -> dict[str, Any]:
    first, nxt = store.topic_ends(conn, row.topic)
    rows = store.counts(conn, row.id, now, first)
    backlog = max(0, nxt - max(row.read_offset, first)) + rows.open
    # the stored cursor may lag behind acks (it moves when the subscription row is free):
    # the cursor shown is where it is now
    cursor = row.read_offset if rows.lowest_open is None else rows.lowest_open
    return {**_settings(row), "backlog": backlog, "in_flight": rows.leased,
            "ack_cursor": max(cursor, row.ack_cursor, first), "created_at": row.created_at}


def _found(conn: Connection, topic: str, name: str, *, lock: bool = False) -> AnyRow:
    row = store.get(conn, topic, name, lock=lock)
    if row is None:
        raise _not_found(topic, name)
    return row


def _not_found(topic: str, name: str) -> NotFound:
    return NotFound(f"no subscription {name!r} on topic {topic!r}",
                    code="subscription_not_found")


# -- administration -----------------------------------------------------------------------


def put(engine: Engine, topic: str, name: str, request: SubscriptionIn
        ) -> tuple[dict[str, Any], bool]:
    """Create a subscription (True) or change its settings (False); its description."""
    dead_letter = dead_letter_topic(topic, name, request)
    if request.dead_letter_topic is None and not is_valid_name(dead_letter):
        raise InvalidRequest(
            f"the default dead-letter topic {dead_letter[:200]!r} would break the name rule "
            f"{NAME_PATTERN}; give dead_letter_topic", code="invalid_dead_letter_topic")
    settings = {"ack_timeout_ms": request.ack_timeout_ms,
                "max_redeliveries": request.max_redeliveries,
                "backoff_min_ms": request.redelivery_backoff.min_ms,
                "backoff_max_ms": request.redelivery_backoff.max_ms,
                "dead_letter_topic": dead_letter}
    now = utcnow()
    with write_transaction(engine) as conn:
        first, nxt = store.topic_ends(conn, topic)
        start = first if request.initial_position == "earliest" else nxt
        created = store.create(conn, {"topic": topic, "name": name, **settings,
                                      "ack_cursor": start, "read_offset": start,
                                      "created_at": now, "updated_at": now})
        row = _found(conn, topic, name, lock=True)
        if not created:
            store.change(conn, row.id, {**settings, "updated_at": now})
            row = _found(conn, topic, name)
        return _describe(conn, row, now), created


def get(engine: Engine, topic: str, name: str) -> dict[str, Any]:
    with engine.connect() as conn:
        return _describe(conn, _found(conn, topic, name), utcnow())


def list_subscriptions(engine: Engine, topic: str, after: str, limit: int) -> dict[str, Any]:
    now = utcnow()
    with engine.connect() as conn:
        rows = store.list_of(conn, topic, after, limit)
        items = [_describe(conn, r, now) for r in rows]
    return {"topic": topic, "subscriptions": items,
            "next_after": rows[-1].name if len(rows) == limit else None}


def describe_each(engine: Engine, pairs: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
    """Each (topic, name) described as ``get`` does, on one connection; the ones that no
    longer exist are left out."""
    now = utcnow()
    with engine.connect() as conn:
        rows = [store.get(conn, topic, name) for topic, name in pairs]
        return [_describe(conn, row, now) for row in rows if row is not None]


def delete(engine: Engine, topic: str, name: str) -> None:
    with write_transaction(engine) as conn:
        store.remove(conn, _found(conn, topic, name, lock=True).id)


def backlogs(engine: Engine) -> list[tuple[str, str, int]]:
    """(topic, subscription, backlog) of every subscription, for the metrics."""
    with engine.connect() as conn:
        return [(r.topic, r.name, max(0, int(r.backlog)))
                for r in store.backlogs(conn)]


def anything_due(engine: Engine, topic: str, name: str) -> bool:
    """Whether a receive on the subscription would find something to do now (True for an
    unknown subscription: the receive answers 404). Read-only, for waiting receives."""
    with engine.connect() as conn:
        sub = store.get(conn, topic, name)
        return sub is None or store.anything_due(conn, sub, utcnow())


# -- receive ------------------------------------------------------------------------------


@dataclass
class Received:
    messages: list[dict[str, Any]]
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
    On PostgreSQL the common case is one statement (``store.first_deliveries``)."""
    if store.one_statement_leases(engine):
        fresh = _first_deliveries(engine, topic, name, max_messages, max_bytes)
        if fresh is not None:
            return fresh
    with write_transaction(engine) as conn:
        leased = _lease(conn, _found(conn, topic, name, lock=True), max_messages, max_bytes)
    if not leased.picked:
        return leased.received
    with engine.connect() as conn:
        rows = store.messages(conn, topic, list(leased.picked))
    leased.received.messages = [
        {**message_fields(r), "redelivery_count": leased.picked[r.queue_offset]} for r in rows]
    return leased.received


def _first_deliveries(engine: Engine, topic: str, name: str, max_messages: int,
                      max_bytes: int) -> Received | None:
    with store.each_statement_alone(engine) as conn:
        rows = store.first_deliveries(conn, topic, name, utcnow(), max_messages, max_bytes,
                                      max_offset=MAX_INT64)
    if rows is None:
        return None
    return Received([{**message_fields(r), "redelivery_count": 0} for r in rows])


@dataclass
class _Leased:
    received: Received
    picked: dict[int, int]  # offset: redelivery count


def _lease(conn: Connection, sub: AnyRow, max_messages: int, max_bytes: int) -> _Leased:
    now = utcnow()
    topic = sub.topic
    stored = (sub.ack_cursor, sub.read_offset)
    cursor, read = stored
    seen = store.look(conn, sub.id, topic, now, cursor)
    if cursor < seen.first_offset:  # retention deleted what was below: acknowledged by expiry
        store.drop_below(conn, sub.id, seen.first_offset)
        cursor, read = seen.first_offset, max(read, seen.first_offset)
        store.change(conn, sub.id, {"ack_cursor": cursor, "read_offset": read})
        cursor = store.advance(conn, sub.id, cursor, read)
        stored = (cursor, read)
    else:  # over what acks left behind (stored with the read offset, below)
        cursor = max(cursor, read if seen.lowest_open is None else min(seen.lowest_open, read))
    spent = 1 + sub.max_redeliveries
    any_due = seen.any_due  # usually nothing is due: one look instead of two
    dead = (store.due(conn, sub.id, topic, now, _DEAD_LETTERS_PER_RECEIVE, dead_from=spent)
            if any_due else [])
    if dead:
        # it appends to a topic: its commit waits for the flush, as a commit's does
        commit_with_flush(conn)
        cursor = _dead_letter(conn, sub, {r.queue_offset: r.deliveries for r in dead},
                              stored[0], read, now)
        stored = (cursor, stored[1])

    timeout = timedelta(milliseconds=sub.ack_timeout_ms)
    until = now + timeout
    picked: list[tuple[int, int]] = []  # (offset, redelivery count)
    used = 0
    full = False
    for r in (store.due(conn, sub.id, topic, now, max_messages, live_below=spent)
              if any_due else []):
        if picked and used + r.size > max_bytes:
            full = True
            break
        picked.append((r.queue_offset, r.deliveries))
        used += r.size
    redelivered = len(picked)
    delayed: list[dict[str, Any]] = []
    scanned = 0
    while not full and len(picked) < max_messages and scanned < _SCAN_ROWS:
        window = max_messages - len(picked)
        batch = store.scan(conn, topic, read, offset_plus(read, window))
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
            if picked and used + m.size > max_bytes:
                full = True
                break
            picked.append((m.queue_offset, 0))
            used += m.size
            read = m.queue_offset + 1
            if len(picked) == max_messages:
                break
        if len(batch) < window:  # offsets are dense: nothing committed past it yet
            break
    store.add_offsets(conn, delayed)
    store.add_leased(conn, sub.id, [o for o, _ in picked[redelivered:]], until,
                     until + _backoff(sub, 0))
    store.lease(conn, sub.id, [(o, until, until + _backoff(sub, n))
                               for o, n in picked[:redelivered]])
    changed = {k: v for k, v, was in (("ack_cursor", cursor, stored[0]),
                                      ("read_offset", read, stored[1])) if v != was}
    if changed:
        store.change(conn, sub.id, changed)
    return _Leased(Received([], len(dead), sub.dead_letter_topic, redelivered), dict(picked))


def _backoff(sub: AnyRow, redelivery_count: int) -> timedelta:
    return timedelta(milliseconds=backoff_ms(sub.backoff_min_ms, sub.backoff_max_ms,
                                             redelivery_count))


def message_fields(row: AnyRow) -> dict[str, Any]:
    """A committed message as a read shows it, to be written as JSON: its keys and
    properties are the JSON text they are stored as (not parsed to be written again)."""
    body = ({"body": bytes(row.body).decode()} if row.body_is_text
            else {"body_base64": base64.b64encode(row.body).decode()})
    return {"offset": row.queue_offset, "message_id": row.message_id,
            "transaction_id": row.transaction_id, "producer_group": row.producer_group,
            "keys": orjson.Fragment(row.keys),
            "tag": row.tag, "properties": orjson.Fragment(row.properties), **body,
            "created_at": row.created_at, "committed_at": row.committed_at}


def _dead_letter(conn: Connection, sub: AnyRow, deliveries: dict[int, int], cursor: int,
                 read: int, now: datetime) -> int:
    """Append the messages at these offsets (with their deliveries) to the dead-letter
    topic, each a new message with its own id, and acknowledge them; the cursor moved
    over them."""
    offsets = sorted(deliveries)
    rows = store.messages(conn, sub.topic, offsets)
    appended = []
    for r in rows:
        props = orjson.loads(r.properties)
        props.update(REAL_TOPIC=sub.topic, ORIGIN_SUBSCRIPTION=sub.name,
                     ORIGIN_OFFSET=str(r.queue_offset), ORIGIN_MESSAGE_ID=r.message_id,
                     REDELIVERY_COUNT=str(deliveries[r.queue_offset] - 1))
        appended.append({"half_message_id": r.half_message_id, "message_id": new_message_id(),
                         "properties": orjson.dumps(props).decode(), "committed_at": now})
    if appended:
        store.append(conn, sub.dead_letter_topic, appended)
    store.acknowledge(conn, sub.id, offsets)
    return store.advance(conn, sub.id, cursor, read)


# -- ack, nack, renew, seek ----------------------------------------------------------------


def _locked(conn: Connection, topic: str, name: str) -> AnyRow:
    return _found(conn, topic, name, lock=True)


def ack(engine: Engine, topic: str, name: str, offsets: Sequence[int]) -> int:
    """Acknowledge offsets (those delivered, not yet acknowledged, not held by a
    transaction); how many were newly acknowledged.

    The ack locks only its offset rows (one statement, on PostgreSQL with the
    subscription's lookup) and commits. The stored cursor moves at the next receive; on
    SQLite, if the ack acknowledged the offset at the cursor, right after it too, unless
    a receive holds the subscription row now. (On PostgreSQL receives move it in their
    one statement, and a second statement here for one ack in a few cost more than the
    lag it saves.)"""
    with store.each_statement_alone(engine) as conn:
        sub, n = store.acknowledge_named(conn, topic, name, offsets)
    if sub is None:
        raise _not_found(topic, name)
    if n and sub.ack_cursor in offsets and not store.one_statement_leases(engine):
        _advance_unless_busy(engine, sub.id)
    return n


def _advance_unless_busy(engine: Engine, sub_id: int) -> None:
    """Move the cursor over the acknowledged head, unless the subscription row is locked.
    Derived state: lost in a crash, the next move recomputes it, so it does not wait for
    its flush."""
    with write_transaction(engine) as conn:
        sub = store.lock_unless_busy(conn, sub_id)
        if sub is not None and store.advance(conn, sub.id, sub.ack_cursor,
                                             sub.read_offset) != sub.ack_cursor:
            commit_without_flush(conn)


@dataclass(frozen=True)
class Nacked:
    count: int
    soonest: timedelta | None  # from now until the first of them is deliverable again


def nack(engine: Engine, topic: str, name: str, offsets: Sequence[int],
         delay_ms: int | None) -> Nacked:
    """Give leased messages back, deliverable after ``delay_ms`` or the backoff."""
    now = utcnow()
    with write_transaction(engine) as conn:
        sub = _found(conn, topic, name)
        changes = []
        waits = []
        for r in store.rows_at(conn, sub.id, offsets):
            if r.held_by is not None or r.leased_until is None or r.leased_until <= now:
                continue
            wait = (timedelta(milliseconds=delay_ms) if delay_ms is not None
                    else _backoff(sub, r.deliveries - 1))
            changes.append((r.queue_offset, None, now + wait))
            waits.append(wait)
        store.reschedule(conn, sub.id, changes)
        return Nacked(len(changes), min(waits, default=None))


def renew(engine: Engine, topic: str, name: str, offsets: Sequence[int]) -> int:
    """Leases still held on these offsets run for another ack timeout; how many."""
    now = utcnow()
    with write_transaction(engine) as conn:
        sub = _found(conn, topic, name)
        until = now + timedelta(milliseconds=sub.ack_timeout_ms)
        changes = [(r.queue_offset, until, until + _backoff(sub, r.deliveries - 1))
                   for r in store.rows_at(conn, sub.id, offsets)
                   if r.leased_until is not None and r.leased_until > now]
        store.reschedule(conn, sub.id, changes)
        return len(changes)


def seek(engine: Engine, topic: str, name: str, offset: int) -> dict[str, Any]:
    """Every offset below ``offset`` acknowledged, every one from it on not, leases
    dropped; the subscription's description. Offsets an unresolved transaction holds
    stay held, on either side of ``offset``: its commit acknowledges them, its rollback
    or discard releases them for delivery."""
    with write_transaction(engine) as conn:
        sub = _locked(conn, topic, name)
        _, nxt = store.topic_ends(conn, topic)
        if offset > nxt:
            raise InvalidRequest(f"offset {offset} is past the topic's next offset {nxt}",
                                 code="offset_out_of_range", next_offset=nxt)
        store.reset(conn, sub.id, topic, offset, utcnow())
        return _describe(conn, _found(conn, topic, name), utcnow())


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

    def receive(self, topic: str, name: str, max_messages: int) -> Received:
        received = receive(self.engine, topic, name, max_messages, self.max_read_bytes)
        if received.redelivered:
            metrics.REDELIVERIES.labels(topic, name).inc(received.redelivered)
        if received.dead_lettered:
            metrics.DEAD_LETTERS.labels(topic, name).inc(received.dead_lettered)
            self.signal.notify((received.dead_letter_topic,))
        return received

    def ack(self, topic: str, name: str, offsets: Sequence[int]) -> int:
        return ack(self.engine, topic, name, offsets)

    def nack(self, topic: str, name: str, offsets: Sequence[int], delay_ms: int | None) -> int:
        """The receives waiting on the topic are woken when the first of these is
        deliverable again (at once for no delay), not at their next probe."""
        nacked = nack(self.engine, topic, name, offsets, delay_ms)
        if nacked.soonest is not None:
            self.signal.notify_later((topic,), nacked.soonest.total_seconds())
        return nacked.count

    def renew(self, topic: str, name: str, offsets: Sequence[int]) -> int:
        return renew(self.engine, topic, name, offsets)

    def seek(self, topic: str, name: str, offset: int) -> dict[str, Any]:
        body = seek(self.engine, topic, name, offset)
        self.signal.notify((topic,))
        return body


# -- transactional acks ------------------------------------------------------------------


def _refusal(row: AnyRow | None, txn_id: int, topic: str, name: str, offset: int
             ) -> Conflict | None:
    """Why transaction ``txn_id`` cannot hold this offset (its row, None when there is
    none: acknowledged, or never delivered), or None."""
    if row is None or row.deliveries == 0:
        return Conflict(f"offset {offset} of subscription {name!r} on {topic!r} is not "
                        "delivered and unacknowledged", code="ack_not_pending",
                        topic=topic, subscription=name, offset=offset)
    if row.held_by is not None and row.held_by != txn_id:
        return Conflict(f"offset {offset} of subscription {name!r} on {topic!r} is held "
                        "by another unresolved transaction", code="ack_conflict",
                        topic=topic, subscription=name, offset=offset)
    return None


def hold_acks(conn: Connection, txn_id: int, acks: dict[tuple[str, str], list[int]]) -> int:
    """Hold these offsets for a new transaction (in its send's database transaction), and
    keep them as its acks, or refuse: 404 for an unknown subscription, 409
    ``ack_not_pending`` for an offset not delivered or already acknowledged, 409
    ``ack_conflict`` for one another unresolved transaction holds. How many offsets are
    held."""
    held = 0
    for (topic, name), offsets in acks.items():  # sorted: locks in a fixed order
        sub = _found(conn, topic, name)
        rows = store.states_at(conn, sub.id, offsets)
        for offset in offsets:
            refusal = _refusal(rows.get(offset), txn_id, topic, name, offset)
            if refusal is not None:
                raise refusal
        store.hold(conn, sub.id, offsets, txn_id)
        store.record_acks(conn, txn_id, sub.id, offsets)
        held += len(offsets)
    return held


class FinishAcks:
    """What one finish batch does to the acks of its transactions, command by command, in
    the batch's database transaction.

    A transaction that holds its acks: its commit acknowledges them, its rollback or
    discard releases them (commits and rollbacks together after the batch's decisions,
    in two statements; a discard at once, since a later command of the batch may take
    them again). One that holds none (``held_acks`` 0: a discard released them) takes
    them again: its commit acknowledges them if each is still delivered and
    unacknowledged and held by no other transaction, else it is refused (409
    ``ack_not_pending`` / ``ack_conflict``) and nothing changes; its resume holds them
    again if it can (all or none), else leaves them free (its commit will try again)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.holding: dict[int, bool] = {}
        self.committed: list[int] = []
        self.rolled_back: list[int] = []
        self.released: list[int] = []  # transactions whose holds this batch released
        self.resolved: list[int] = []
        self.topics: set[str] = set()

    def apply(self, row: AnyRow, op: Op) -> Conflict | None:
        """Record what ``op`` (to be applied to transaction ``row``) does to its acks; the
        refusal of a commit that cannot take them again (then nothing was written)."""
        if row.held_acks is None:
            return None
        holding = self.holding.setdefault(row.id, row.held_acks > 0)
        if op is Op.COMMIT and not holding:
            taken = self._take(row.id)
            if isinstance(taken, Conflict):
                return taken
            for sub_id, offsets in taken.items():
                store.drop_at(self.conn, sub_id, offsets)
        elif op is Op.COMMIT:
            self.committed.append(row.id)
        elif op is Op.ROLLBACK and holding:
            self.rolled_back.append(row.id)
            self.released.append(row.id)
        elif op is Op.DISCARD and holding:
            self.topics.update(store.holders(self.conn, [row.id]))
            store.settle(self.conn, [row.id], utcnow(), commit=False)
            sends.mark_held(self.conn, row.id, 0)
            self.released.append(row.id)
            self.holding[row.id] = False
        elif op is Op.RESUME and not holding:
            taken = self._take(row.id)
            if not isinstance(taken, Conflict):
                for sub_id, offsets in taken.items():
                    store.hold(self.conn, sub_id, offsets, row.id)
                sends.mark_held(self.conn, row.id, sum(map(len, taken.values())))
                self.holding[row.id] = True
        if op in (Op.COMMIT, Op.ROLLBACK):
            self.resolved.append(row.id)
        return None

    def _take(self, txn_id: int) -> dict[int, list[int]] | Conflict:
        """The transaction's acks by subscription, their rows locked, if it can hold each
        of them now; else why not."""
        wanted: dict[int, list[int]] = {}
        names: dict[int, tuple[str, str]] = {}
        for r in store.recorded_acks(self.conn, txn_id):
            wanted.setdefault(r.subscription_id, []).append(r.queue_offset)
            names[r.subscription_id] = (r.topic, r.name)
        for sub_id, offsets in wanted.items():  # by subscription and offset: locks in order
            rows = store.states_at(self.conn, sub_id, offsets)
            for offset in offsets:
                refusal = _refusal(rows.get(offset), txn_id, *names[sub_id], offset)
                if refusal is not None:
                    return refusal
        return wanted

    def write(self) -> set[str]:
        """After the batch's decisions, before it publishes: the commits' and rollbacks'
        acks settled. Only the held offset rows are touched (no other writer locks a held
        row), not the subscription rows: the cursors move at the subscriptions' next
        receive or ack. The topics where offsets were released (their waiting receives
        may look again at once)."""
        if self.rolled_back:
            self.topics.update(store.holders(self.conn, self.rolled_back))
            store.settle(self.conn, self.rolled_back, utcnow(), commit=False)
        if self.committed:
            store.settle(self.conn, self.committed, utcnow(), commit=True)
        store.forget_acks(self.conn, self.resolved)
        return self.topics
