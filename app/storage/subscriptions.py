"""SQL of subscriptions (subscription, subscription_offset) and of what a receive reads of
the committed log.

A subscription's state is its row (the ack cursor, the read offset) and one
``subscription_offset`` row per offset in ``[ack_cursor, read_offset)`` that is not
acknowledged (leased, given back, delayed, held by a transaction): an acknowledgement
deletes its row, and an offset below the read offset without a row is acknowledged. The
stored cursor may lag behind the acks (it moves when the subscription row is free); the
lowest row, or the read offset when there is none, is where it is. Two kinds of
lock keep it consistent with several receivers, in one process or several:

- a receive, a seek, retention and moving the cursor lock the subscription row (``lock``;
  on PostgreSQL ``FOR UPDATE``, on SQLite the write transaction's ``BEGIN IMMEDIATE``):
  they read or move ``read_offset`` and the cursor, so they take turns. ``SKIP LOCKED``
  on the offset rows alone would not be enough for a receive, since the offsets it takes
  first have no row yet (it creates them). On PostgreSQL a receive's common case is one
  statement (``first_deliveries``), so the row is locked only while the server runs it;
- an ack, a nack, a renew and a transactional hold lock only the offset rows they change
  (``FOR UPDATE``, in offset order), and so does a receive for the rows it delivers again
  or dead-letters. They never wait for the subscription row, so acks do not queue behind
  receives, and every statement that changes an offset row re-reads its state under the
  row lock (PostgreSQL re-checks the ``WHERE`` of a locked row that changed meanwhile).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import (
    BigInteger,
    Connection,
    Select,
    and_,
    delete,
    exists,
    func,
    insert,
    literal,
    null,
    select,
    update,
)

from app.storage.bulk import dialect_insert
from app.storage.dialects import Dialect, dialect_of
from app.storage.schema import (
    AnyRow,
    UTCDateTime,
    half_message,
    message_log,
    subscription,
    subscription_offset,
    topic_offset,
    topic_retention,
)

so = subscription_offset


def locking_offsets(dialect: Dialect, stmt: Select[Any]) -> Select[Any]:
    """``stmt`` locking the offset rows it reads (where rows lock one by one; elsewhere
    the writers take turns)."""
    return dialect.lock_rows(stmt, of=so)


def get(conn: Connection, topic: str, name: str, *, lock: bool = False) -> AnyRow | None:
    stmt = select(subscription).where(subscription.c.topic == topic, subscription.c.name == name)
    if lock:
        stmt = dialect_of(conn).lock_rows(stmt)
    return conn.execute(stmt).first()


def create(conn: Connection, values: Mapping[str, Any]) -> bool:
    """Insert a subscription unless (topic, name) is taken; whether it was inserted."""
    stmt = (dialect_insert(conn, subscription).values(**values)
            .on_conflict_do_nothing(index_elements=["topic", "name"])
            .returning(subscription.c.id))
    return conn.execute(stmt).first() is not None


def change(conn: Connection, sub_id: int, values: Mapping[str, Any]) -> None:
    conn.execute(update(subscription).where(subscription.c.id == sub_id).values(**values))


def remove(conn: Connection, sub_id: int) -> None:
    conn.execute(delete(so).where(so.c.subscription_id == sub_id))
    conn.execute(delete(subscription).where(subscription.c.id == sub_id))


def list_of(conn: Connection, topic: str, after: str, limit: int) -> list[AnyRow]:
    return list(conn.execute(
        select(subscription).where(subscription.c.topic == topic, subscription.c.name > after)
        .order_by(subscription.c.name).limit(limit)))


class Counts(NamedTuple):
    open: int                # offset rows from ``first`` on: read, not acknowledged
    leased: int              # offset rows leased now
    lowest_open: int | None  # the lowest offset row


def counts(conn: Connection, sub_id: int, now: datetime, first: int) -> Counts:
    """What a subscription's offset rows hold (``first``: the topic's first retained
    offset; rows below it are acknowledged by expiry, whether or not deleted yet)."""
    n, leased, lowest = conn.execute(
        select(func.count().filter(so.c.queue_offset >= first),
               func.count().filter(so.c.leased_until > now),
               func.min(so.c.queue_offset))
        .where(so.c.subscription_id == sub_id)).one()
    return Counts(int(n), int(leased), None if lowest is None else int(lowest))


def lowest_open(conn: Connection, sub_id: int, cursor: int) -> int | None:
    """The lowest offset row (not acknowledged), at or above the stored ``cursor`` (there
    is none below: the bound keeps the index scan off the acknowledged rows a vacuum has
    not removed yet)."""
    return conn.execute(select(func.min(so.c.queue_offset))
                        .where(so.c.subscription_id == sub_id, so.c.queue_offset >= cursor)
                        ).scalar_one_or_none()


def advance(conn: Connection, sub_id: int, cursor: int, read: int) -> int:
    """Move the stored ack cursor up to the lowest offset row (the read offset if none);
    the new cursor. Needs the subscription row locked.

    An ack running meanwhile can only make the head look less acknowledged than it is
    (its rows are there until it commits), so the cursor never passes an offset that is
    not acknowledged."""
    lowest = lowest_open(conn, sub_id, cursor)
    new = read if lowest is None else min(int(lowest), read)
    if new > cursor:
        conn.execute(update(subscription).where(subscription.c.id == sub_id)
                     .values(ack_cursor=new))
    return max(new, cursor)


def reset(conn: Connection, sub_id: int, topic: str, offset: int, now: datetime) -> None:
    """Every offset below ``offset`` acknowledged, every one from it on not, except the
    offsets unresolved transactions hold: those keep their rows, on either side of
    ``offset``. Needs the subscription row locked.

    Offsets from ``offset`` up to the highest held one get rows, deliverable now (or at
    their delivery time), and the read offset moves past it: below the read offset every
    offset is either acknowledged or has its row, and none has a row above it. The
    cursor stays at or below the lowest held offset."""
    held = and_(so.c.subscription_id == sub_id, so.c.held_by.is_not(None))
    conn.execute(delete(so).where(so.c.subscription_id == sub_id, so.c.held_by.is_(None)))
    lowest, highest = conn.execute(select(func.min(so.c.queue_offset),
                                          func.max(so.c.queue_offset)).where(held)).one()
    cursor = read = offset
    if highest is not None and highest >= offset:
        taken = select(so.c.queue_offset).where(held, so.c.queue_offset == message_log.c.queue_offset)
        key = (select(half_message.c.ordering_key)
               .where(half_message.c.id == message_log.c.half_message_id).scalar_subquery())
        conn.execute(insert(so).from_select(
            ["subscription_id", "queue_offset", "deliveries", "leased_until", "next_at",
             "held_by", "ordering_key"],
            select(literal(sub_id, BigInteger), message_log.c.queue_offset, literal(0),
                   null(), func.coalesce(message_log.c.deliver_at,
                                         literal(now, UTCDateTime())), null(), key)
            .where(message_log.c.topic == topic,
                   message_log.c.queue_offset.between(offset, highest), ~taken.exists())))
        read = int(highest) + 1
    if lowest is not None:
        cursor = min(cursor, int(lowest))
    conn.execute(update(subscription).where(subscription.c.id == sub_id)
                 .values(ack_cursor=cursor, read_offset=read))


def tagged_between(conn: Connection, topic: str, start: int, end: int,
                   tags: frozenset[str]) -> tuple[int, int | None]:
    """How many committed messages of ``topic`` in ``[start, end)`` carry one of ``tags``,
    and the lowest of their offsets (a tag-filtered subscription's unread backlog)."""
    n, lowest = conn.execute(
        select(func.count(), func.min(message_log.c.queue_offset))
        .join(half_message, half_message.c.id == message_log.c.half_message_id)
        .where(message_log.c.topic == topic, message_log.c.queue_offset >= start,
               message_log.c.queue_offset < end, half_message.c.tag.in_(sorted(tags)))).one()
    return int(n), None if lowest is None else int(lowest)


def drop_below(conn: Connection, sub_id: int, topic: str, offset: int, now: datetime) -> None:
    """Acknowledge every offset below ``offset`` (retention deleted them); a key whose
    earlier messages went has its next one deliverable."""
    conn.execute(delete(so).where(so.c.subscription_id == sub_id, so.c.queue_offset < offset))
    promote_key_heads(conn, sub_id, topic, now)


def deliverable_from(topic: str, now: datetime) -> Any:
    """When an offset row's message may go: now, or its delivery time if later (SQL)."""
    later = (select(message_log.c.deliver_at)
             .where(message_log.c.topic == topic, message_log.c.queue_offset == so.c.queue_offset,
                    message_log.c.deliver_at > now).scalar_subquery())
    return func.coalesce(later, literal(now, UTCDateTime()))


def has_lower_of_its_key() -> Any:
    """An offset row of the same subscription and ordering key below this one (SQL)."""
    lower = so.alias("lower")
    return exists(select(lower.c.queue_offset).where(
        lower.c.subscription_id == so.c.subscription_id,
        lower.c.ordering_key == so.c.ordering_key,
        lower.c.queue_offset < so.c.queue_offset))


def promote_key_heads(conn: Connection, sub_id: int, topic: str, now: datetime) -> None:
    """Every waiting row (``next_at`` NULL, only on key_shared) that is now its key's
    lowest made deliverable: after rows were deleted in bulk. It reads the subscription's
    waiting rows: for retention and administration, not for each ack."""
    conn.execute(update(so).where(so.c.subscription_id == sub_id, so.c.next_at.is_(None),
                                  so.c.held_by.is_(None), ~has_lower_of_its_key())
                 .values(next_at=deliverable_from(topic, now)))


def expire_below(conn: Connection, topic: str, end: int, now: datetime
                 ) -> list[tuple[str, int]]:
    """Move the ack cursors of ``topic``'s subscriptions that are below ``end`` (the new
    first retained offset) up to it, deleting their rows below it; for each moved one,
    (name, how many offsets it had not acknowledged: skipped by retention)."""
    stmt = (select(subscription.c.id, subscription.c.name, subscription.c.ack_cursor,
                   subscription.c.read_offset)
            .where(subscription.c.topic == topic, subscription.c.ack_cursor < end)
            .order_by(subscription.c.id))
    stmt = dialect_of(conn).lock_rows(stmt)
    moved = []
    for sub in conn.execute(stmt).all():
        read_open = conn.execute(select(func.count()).where(
            so.c.subscription_id == sub.id, so.c.queue_offset < end)).scalar_one()
        drop_below(conn, sub.id, topic, end, now)
        read = max(sub.read_offset, end)
        change(conn, sub.id, {"ack_cursor": end, "read_offset": read})
        advance(conn, sub.id, end, read)
        never_read = end - max(sub.read_offset, sub.ack_cursor)
        moved.append((sub.name, int(read_open) + max(0, never_read)))
    return moved


def backlogs(conn: Connection) -> list[AnyRow]:
    """Every subscription's (topic, name, backlog), for the metrics: the offsets never read
    plus the rows (read, not acknowledged), from the first retained offset on."""
    first = func.coalesce(topic_retention.c.first_offset, 0)
    rows = (select(func.count()).where(so.c.subscription_id == subscription.c.id,
                                       so.c.queue_offset >= first)
            .correlate(subscription, topic_retention).scalar_subquery())
    nxt = func.coalesce(topic_offset.c.next_offset, 0)
    greatest = dialect_of(conn).greatest
    return list(conn.execute(
        select(subscription.c.topic, subscription.c.name,
               (nxt - greatest(subscription.c.read_offset, first) + rows).label("backlog"))
        .select_from(subscription
                     .outerjoin(topic_offset, topic_offset.c.topic == subscription.c.topic)
                     .outerjoin(topic_retention, topic_retention.c.topic == subscription.c.topic))
        .order_by(subscription.c.topic, subscription.c.name)))


def lock_unless_busy(conn: Connection, sub_id: int) -> AnyRow | None:
    """The subscription row, locked; None when another transaction holds it (on
    PostgreSQL; SQLite's write transaction already excludes every other writer)."""
    stmt = select(subscription).where(subscription.c.id == sub_id)
    return conn.execute(dialect_of(conn).lock_rows_unless_busy(stmt)).first()
