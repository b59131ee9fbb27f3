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

from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import (
    BigInteger,
    Connection,
    Engine,
    Select,
    and_,
    bindparam,
    delete,
    func,
    insert,
    literal,
    null,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite

from app.storage.bulk import among, insert_rows, is_pg
from app.storage.db import write_transaction
from app.storage.retention import first_offset
from app.storage.schema import (
    AnyRow,
    UTCDateTime,
    half_message,
    logged_message_id,
    message_log,
    subscription,
    subscription_offset,
    topic_offset,
    topic_retention,
    txn,
    txn_ack,
)

so = subscription_offset


def _insert(conn: Connection) -> Any:
    return (postgresql if is_pg(conn) else sqlite).insert


# -- subscriptions ----------------------------------------------------------------------


def get(conn: Connection, topic: str, name: str, *, lock: bool = False) -> AnyRow | None:
    stmt = select(subscription).where(subscription.c.topic == topic, subscription.c.name == name)
    if lock and is_pg(conn):
        stmt = stmt.with_for_update()
    return conn.execute(stmt).first()


def create(conn: Connection, values: Mapping[str, Any]) -> bool:
    """Insert a subscription unless (topic, name) is taken; whether it was inserted."""
    stmt = (_insert(conn)(subscription).values(**values)
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


def topic_ends(conn: Connection, topic: str) -> tuple[int, int]:
    """(first retained offset, next offset) of a topic; (0, 0) for an unknown one."""
    first = first_offset(conn, topic)
    nxt = conn.execute(select(topic_offset.c.next_offset)
                       .where(topic_offset.c.topic == topic)).scalar_one_or_none() or 0
    return first, max(first, nxt)


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


# -- offsets -----------------------------------------------------------------------------


def _size() -> Any:
    return func.length(half_message.c.body).label("size")


def due(conn: Connection, sub_id: int, topic: str, now: datetime, limit: int, *,
        dead_from: int | None = None, live_below: int | None = None) -> list[AnyRow]:
    """Offset rows deliverable now (not acknowledged, not held, their time come), lowest
    first, with their message's body size: those delivered at least ``dead_from`` times,
    or those delivered fewer than ``live_below`` times. Locked: an ack that came first
    leaves them out, one that comes later waits for this transaction."""
    stmt = (select(so.c.queue_offset, so.c.deliveries, _size())
            .select_from(so.join(message_log, and_(message_log.c.topic == topic,
                                                  message_log.c.queue_offset == so.c.queue_offset))
                         .join(half_message, half_message.c.id == message_log.c.half_message_id))
            .where(so.c.subscription_id == sub_id, so.c.held_by.is_(None),
                   so.c.next_at <= now)
            .order_by(so.c.queue_offset).limit(limit))
    if dead_from is not None:
        stmt = stmt.where(so.c.deliveries >= dead_from)
    if live_below is not None:
        stmt = stmt.where(so.c.deliveries < live_below)
    return list(conn.execute(_locking(conn, stmt)))


def _locking(conn: Connection, stmt: Select[Any]) -> Select[Any]:
    """``stmt`` locking the offset rows it reads (PostgreSQL; SQLite's writers take turns)."""
    return stmt.with_for_update(of=so) if is_pg(conn) else stmt


def scan(conn: Connection, topic: str, from_offset: int, end: int) -> list[AnyRow]:
    """Committed messages of ``topic`` in ``[from_offset, end)``: offset, deliverable time,
    size.

    Offsets are dense, so the range holds at most ``end - from_offset`` rows: bounded on
    both sides, it is an index range scan whatever the statistics say. With only
    ``>= from_offset ... LIMIT``, PostgreSQL without statistics of a fresh backlog joined
    and sorted all of it."""
    return list(conn.execute(scan_statement(topic, from_offset, end)))


def scan_statement(topic: str, from_offset: int, end: int) -> Select[Any]:
    return (select(message_log.c.queue_offset, message_log.c.deliver_at, _size())
            .join(half_message, half_message.c.id == message_log.c.half_message_id)
            .where(message_log.c.topic == topic, message_log.c.queue_offset >= from_offset,
                   message_log.c.queue_offset < end)
            .order_by(message_log.c.queue_offset))


def messages(conn: Connection, topic: str, offsets: Sequence[int]) -> list[AnyRow]:
    """The committed messages at these offsets, as a read shows them, in offset order."""
    if not offsets:
        return []
    return list(conn.execute(
        select(message_log.c.queue_offset, message_log.c.committed_at,
               message_log.c.half_message_id,
               func.coalesce(message_log.c.properties, half_message.c.properties)
               .label("properties"),
               logged_message_id(), half_message.c["keys"], half_message.c.tag,
               half_message.c.body, half_message.c.body_is_text, half_message.c.created_at,
               txn.c.transaction_id, txn.c.producer_group)
        .join(half_message, half_message.c.id == message_log.c.half_message_id)
        .join(txn, txn.c.id == half_message.c.txn_id)
        .where(message_log.c.topic == topic, among(conn, message_log.c.queue_offset, sorted(offsets)))
        .order_by(message_log.c.queue_offset)))


def add_offsets(conn: Connection, rows: Sequence[Mapping[str, Any]]) -> None:
    """New offset rows (subscription_id, queue_offset, deliveries, leased_until, next_at,
    held_by)."""
    insert_rows(conn, so, rows)


_LEASED_RANGE = text(
    "INSERT INTO subscription_offset (subscription_id, queue_offset, deliveries,"
    " leased_until, next_at, held_by)"
    " SELECT :sub, o, 1, :until, :next, NULL FROM unnest(CAST(:offsets AS BIGINT[])) AS o")


def add_leased(conn: Connection, sub_id: int, offsets: Sequence[int], until: datetime,
               next_at: datetime) -> None:
    """Offset rows for first deliveries, leased until ``until``, deliverable again from
    ``next_at``: on PostgreSQL one statement with the offsets as one array, since a
    receive inserts them with the subscription row locked."""
    if not offsets:
        return
    if is_pg(conn):
        conn.execute(_LEASED_RANGE.bindparams(bindparam("until", type_=UTCDateTime()),
                                              bindparam("next", type_=UTCDateTime())),
                     {"sub": sub_id, "offsets": list(offsets), "until": until, "next": next_at})
        return
    insert_rows(conn, so, [{"subscription_id": sub_id, "queue_offset": o, "deliveries": 1,
                            "leased_until": until, "next_at": next_at, "held_by": None}
                           for o in offsets])


# the subscription row locked (the commit not waiting for its flush); the cursor over the
# acknowledged head where the statement's snapshot can tell; the common case (nothing to
# deliver again or dead-letter, nothing expired), whose first deliveries are leased until
# now + the ack timeout, deliverable again after the backoff of redelivery count 0, which
# is LEAST(min_ms, max_ms) (``backoff_ms``)
_FIRST_DELIVERIES = text("""
WITH sub AS (
    SELECT id, read_offset, ack_cursor, ack_timeout_ms, backoff_min_ms, backoff_max_ms,
           xmin::text AS version,
           set_config('synchronous_commit', 'off', true) AS relaxed
    FROM subscription WHERE topic = :topic AND name = :name FOR UPDATE
), seen AS (  -- the row as the statement's snapshot has it: unchanged since, or not
    SELECT xmin::text AS version FROM subscription WHERE topic = :topic AND name = :name
), head AS (
    SELECT LEAST(sub.read_offset, COALESCE(
               (SELECT min(o.queue_offset) FROM subscription_offset o
                WHERE o.subscription_id = sub.id AND o.queue_offset >= sub.ack_cursor),
               sub.read_offset)) AS cursor
    FROM sub JOIN seen ON seen.version = sub.version
), plain AS (
    SELECT id, read_offset,
           :now + ack_timeout_ms * interval '1 millisecond' AS until,
           :now + (ack_timeout_ms + LEAST(backoff_min_ms, backoff_max_ms))
                  * interval '1 millisecond' AS next_at
    FROM sub
    WHERE ack_cursor >= COALESCE(
              (SELECT first_offset FROM topic_retention WHERE topic = :topic), 0)
      AND NOT EXISTS (SELECT FROM subscription_offset o
                      WHERE o.subscription_id = sub.id AND o.held_by IS NULL
                        AND o.next_at <= :now)
), window_ AS (
    SELECT w.*, sum(length(w.body)) OVER (ORDER BY w.queue_offset) AS used,
           row_number() OVER (ORDER BY w.queue_offset) AS n
    FROM plain, LATERAL (
        SELECT m.queue_offset, m.deliver_at > :now AS delayed, m.committed_at,
               m.half_message_id, COALESCE(m.properties, h.properties) AS properties,
               COALESCE(m.message_id, h.message_id) AS message_id, h.keys, h.tag, h.body,
               h.body_is_text, h.created_at,
               t.transaction_id, t.producer_group
        FROM message_log m JOIN half_message h ON h.id = m.half_message_id
        JOIN txn t ON t.id = h.txn_id
        WHERE m.topic = :topic AND m.queue_offset >= plain.read_offset
          AND m.queue_offset < LEAST(plain.read_offset, :max_offset - :max_messages)
                               + :max_messages
        ORDER BY m.queue_offset LIMIT :max_messages) AS w
), picked AS (
    SELECT * FROM window_
    WHERE (used <= :max_bytes OR n = 1)
      AND queue_offset < ALL (SELECT queue_offset FROM window_ WHERE delayed)
), leased AS (
    INSERT INTO subscription_offset
        (subscription_id, queue_offset, deliveries, leased_until, next_at, held_by)
    SELECT plain.id, picked.queue_offset, 1, plain.until, plain.next_at, NULL
    FROM picked, plain
), moved AS (
    UPDATE subscription
    SET read_offset = COALESCE((SELECT max(queue_offset) + 1 FROM picked), read_offset),
        ack_cursor = GREATEST(ack_cursor, COALESCE((SELECT cursor FROM head), ack_cursor))
    WHERE id = (SELECT id FROM sub)
      AND (EXISTS (SELECT FROM picked) OR (SELECT cursor FROM head) > (SELECT ack_cursor FROM sub))
)
SELECT (SELECT count(*) FROM plain) AS plain,
       (SELECT count(*) FROM window_ WHERE delayed) AS delayed,
       (SELECT bool_and(relaxed IS NOT NULL) FROM sub) AS relaxed,
       p.queue_offset, p.committed_at, p.half_message_id, p.properties, p.message_id,
       p.keys, p.tag, p.body, p.body_is_text, p.created_at, p.transaction_id,
       p.producer_group
FROM (VALUES (1)) AS one (x) LEFT JOIN picked p ON true
ORDER BY p.queue_offset
""").bindparams(bindparam("now", type_=UTCDateTime())).columns(
    committed_at=UTCDateTime(), created_at=UTCDateTime())


def one_statement_leases(engine: Engine) -> bool:
    """Whether ``first_deliveries`` serves this database (PostgreSQL)."""
    return is_pg(engine)


@contextmanager
def each_statement_alone(engine: Engine) -> Iterator[Connection]:
    """A connection on which each statement is a transaction of its own (PostgreSQL), for
    work whose statements need not be one transaction: no BEGIN nor COMMIT round trips.
    On SQLite, one write transaction (see ``write_transaction``)."""
    if not is_pg(engine):
        with write_transaction(engine) as conn:
            yield conn
        return
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        yield conn


def first_deliveries(conn: Connection, topic: str, name: str, now: datetime,
                     max_messages: int, max_bytes: int, *, max_offset: int
                     ) -> list[AnyRow] | None:
    """PostgreSQL, on an ``each_statement_alone`` connection: a receive's common case as one
    statement: when nothing is due to be delivered again or dead-lettered and retention
    moved nothing, lease the committed messages past the read offset (lowest first, up to
    ``max_messages``, ``max_bytes`` of bodies but at least one, stopping at the first
    delayed one) as ``add_leased`` does, move the read offset over them, and return them
    as ``messages`` does. The subscription is found by its name in the same statement.
    None when the case is not the common one or there is no such subscription (the caller
    takes the general way); an empty list when there is nothing to deliver.
    ``max_offset``: the highest offset there can be, which bounds the window's end.

    The subscription row stays locked only while the server runs the statement: the
    general way's half-dozen statements keep it locked for as many round trips to a busy
    service, and receives take turns on it. Its commit does not wait for its flush (as
    ``look``'s). Offsets past the read offset are visible in order (a topic's counter is
    locked until the commit that takes offsets from it ends), so the statement's snapshot,
    taken before it waits for the row, sees a prefix of what is committed past it.

    It also moves the stored ack cursor over the acknowledged head (as ``advance``), but
    only when the subscription row did not change since the snapshot: then every offset
    row below the read offset is in the snapshot (rows are added with the read offset
    moved, in one transaction), and an ack committed since only makes the head look less
    acknowledged than it is. A row that changed (a receive that came first, a seek)
    may have rows the snapshot lacks: the cursor then stays for a later statement."""
    rows = conn.execute(_FIRST_DELIVERIES, {
        "topic": topic, "name": name, "now": now, "max_messages": max_messages,
        "max_bytes": max_bytes, "max_offset": max_offset}).all()
    head = rows[0]
    if not head.plain or (head.queue_offset is None and head.delayed):
        return None
    return [r for r in rows if r.queue_offset is not None]


_LEASE = (update(so)
          .where(so.c.subscription_id == bindparam("b_sub"),
                 so.c.queue_offset == bindparam("b_offset"))
          .values(deliveries=so.c.deliveries + 1, leased_until=bindparam("b_until"),
                  next_at=bindparam("b_next")))


def lease(conn: Connection, sub_id: int, leases: Iterable[tuple[int, datetime, datetime]]
          ) -> None:
    """Count one more delivery of each (offset, leased until, next deliverable time)."""
    params = [{"b_sub": sub_id, "b_offset": o, "b_until": u, "b_next": n} for o, u, n in leases]
    if params:
        conn.execute(_LEASE, params)


_RESCHEDULE = (update(so)
               .where(so.c.subscription_id == bindparam("b_sub"),
                      so.c.queue_offset == bindparam("b_offset"))
               .values(leased_until=bindparam("b_until"), next_at=bindparam("b_next")))


def reschedule(conn: Connection, sub_id: int,
               changes: Iterable[tuple[int, datetime | None, datetime | None]]) -> None:
    """Set each (offset, leased until, next deliverable time)."""
    params = [{"b_sub": sub_id, "b_offset": o, "b_until": u, "b_next": n} for o, u, n in changes]
    if params:
        conn.execute(_RESCHEDULE, params)


def rows_at(conn: Connection, sub_id: int, offsets: Iterable[int]) -> list[AnyRow]:
    """The offset rows at these offsets (not acknowledged) that no transaction holds,
    lowest first, locked.

    Every writer of offset rows but the settling of held ones locks them this way, in
    offset order and never a held row, so two writers cannot deadlock, and a finish batch
    that settles held rows never waits for one."""
    wanted = sorted(set(offsets))
    if not wanted:
        return []
    return list(conn.execute(_locking(conn, (
        select(so).where(so.c.subscription_id == sub_id, so.c.held_by.is_(None),
                         _at(conn, wanted)).order_by(so.c.queue_offset)))))


def _at(conn: Connection, wanted: Sequence[int]) -> Any:
    """At these offsets (sorted), also bounded by the first and the last: a range the
    planner takes for the primary key's index without statistics, where the list alone
    let it read every row of the subscription."""
    return and_(so.c.queue_offset.between(wanted[0], wanted[-1]),
                among(conn, so.c.queue_offset, wanted))


def acknowledge(conn: Connection, sub_id: int, offsets: Iterable[int]) -> int:
    """Acknowledge these offsets (only those no transaction holds): delete their rows; how
    many were not acknowledged before. One statement, whose subquery locks the rows as
    ``rows_at`` does."""
    wanted = sorted(set(offsets))
    if not wanted:
        return 0
    return int(conn.execute(_acknowledging(conn, sub_id, wanted)).rowcount)


def _acknowledging(conn: Connection, sub_id: Any, wanted: Sequence[int]) -> Any:
    free = and_(so.c.subscription_id == sub_id, so.c.held_by.is_(None))
    locked = _locking(conn, select(so.c.queue_offset).where(free, _at(conn, wanted))
                      .order_by(so.c.queue_offset))
    return delete(so).where(free, so.c.queue_offset.in_(locked))


def acknowledge_named(conn: Connection, topic: str, name: str, offsets: Iterable[int]
                      ) -> tuple[AnyRow | None, int]:
    """``acknowledge`` on the subscription of this name: its row as it was (None if there
    is none) and how many offsets were newly acknowledged. On PostgreSQL one statement
    (the lookup and the delete together)."""
    wanted = sorted(set(offsets))
    if not is_pg(conn) or not wanted:
        sub = get(conn, topic, name)
        return sub, (acknowledge(conn, sub.id, wanted) if sub is not None else 0)
    named = and_(subscription.c.topic == topic, subscription.c.name == name)
    sub_id = select(subscription.c.id).where(named).scalar_subquery()
    gone = _acknowledging(conn, sub_id, wanted).returning(so.c.queue_offset).cte("gone")
    row = conn.execute(select(subscription, select(func.count()).select_from(gone)
                              .scalar_subquery().label("acked")).where(named)).first()
    return (None, 0) if row is None else (row, int(row.acked))


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
        conn.execute(insert(so).from_select(
            ["subscription_id", "queue_offset", "deliveries", "leased_until", "next_at",
             "held_by"],
            select(literal(sub_id, BigInteger), message_log.c.queue_offset, literal(0),
                   null(), func.coalesce(message_log.c.deliver_at,
                                         literal(now, UTCDateTime())), null())
            .where(message_log.c.topic == topic,
                   message_log.c.queue_offset.between(offset, highest), ~taken.exists())))
        read = int(highest) + 1
    if lowest is not None:
        cursor = min(cursor, int(lowest))
    conn.execute(update(subscription).where(subscription.c.id == sub_id)
                 .values(ack_cursor=cursor, read_offset=read))


def drop_below(conn: Connection, sub_id: int, offset: int) -> None:
    conn.execute(delete(so).where(so.c.subscription_id == sub_id, so.c.queue_offset < offset))


# -- appending to a topic (dead letters) ------------------------------------------------


def append(conn: Connection, topic: str, rows: Sequence[Mapping[str, Any]]) -> int:
    """Append committed log rows (half_message_id, message_id, properties, committed_at) to
    ``topic`` at the next offsets, taken from its counter (locked until this transaction
    ends, as a commit does); the first offset taken."""
    n = len(rows)
    stmt = _insert(conn)(topic_offset).values(topic=topic, next_offset=n)
    stmt = stmt.on_conflict_do_update(
        index_elements=[topic_offset.c.topic],
        set_={"next_offset": topic_offset.c.next_offset + stmt.excluded.next_offset},
    ).returning(topic_offset.c.next_offset)
    first = int(conn.execute(stmt).scalar_one()) - n
    insert_rows(conn, message_log, [{"topic": topic, "queue_offset": first + i,
                                     "deliver_at": None, **r} for i, r in enumerate(rows)])
    return first


def expire_below(conn: Connection, topic: str, end: int) -> list[tuple[str, int]]:
    """Move the ack cursors of ``topic``'s subscriptions that are below ``end`` (the new
    first retained offset) up to it, deleting their rows below it; for each moved one,
    (name, how many offsets it had not acknowledged: skipped by retention)."""
    stmt = (select(subscription.c.id, subscription.c.name, subscription.c.ack_cursor,
                   subscription.c.read_offset)
            .where(subscription.c.topic == topic, subscription.c.ack_cursor < end)
            .order_by(subscription.c.id))
    if is_pg(conn):
        stmt = stmt.with_for_update()
    moved = []
    for sub in conn.execute(stmt).all():
        read_open = conn.execute(select(func.count()).where(
            so.c.subscription_id == sub.id, so.c.queue_offset < end)).scalar_one()
        drop_below(conn, sub.id, end)
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
    greatest = func.greatest if is_pg(conn) else func.max
    return list(conn.execute(
        select(subscription.c.topic, subscription.c.name,
               (nxt - greatest(subscription.c.read_offset, first) + rows).label("backlog"))
        .select_from(subscription
                     .outerjoin(topic_offset, topic_offset.c.topic == subscription.c.topic)
                     .outerjoin(topic_retention, topic_retention.c.topic == subscription.c.topic))
        .order_by(subscription.c.topic, subscription.c.name)))


# -- transactional acks ------------------------------------------------------------------


def states_at(conn: Connection, sub_id: int, offsets: Sequence[int]) -> dict[int, AnyRow]:
    """The offset rows at these offsets, whatever their state, by offset: those no
    transaction holds locked (see ``rows_at``), then the others as they are."""
    at = and_(so.c.subscription_id == sub_id, among(conn, so.c.queue_offset, offsets))
    free = {r.queue_offset: r for r in conn.execute(_locking(conn, (
        select(so).where(at, so.c.held_by.is_(None)).order_by(so.c.queue_offset))))}
    held = conn.execute(select(so).where(at, so.c.queue_offset.not_in(list(free))))
    return {**free, **{r.queue_offset: r for r in held}}


def hold(conn: Connection, sub_id: int, offsets: Sequence[int], txn_id: int) -> None:
    conn.execute(update(so).where(so.c.subscription_id == sub_id,
                                 among(conn, so.c.queue_offset, offsets))
                 .values(held_by=txn_id))


def record_acks(conn: Connection, txn_id: int, sub_id: int, offsets: Sequence[int]) -> None:
    """Keep what a send acknowledges, for as long as its transaction is unresolved."""
    insert_rows(conn, txn_ack, [{"txn_id": txn_id, "subscription_id": sub_id,
                                 "queue_offset": o} for o in offsets])


def recorded_acks(conn: Connection, txn_id: int) -> list[AnyRow]:
    """What the transaction's send acknowledges: (subscription_id, topic, name,
    queue_offset), by subscription and offset; subscriptions deleted since left out."""
    return list(conn.execute(
        select(txn_ack.c.subscription_id, subscription.c.topic, subscription.c.name,
               txn_ack.c.queue_offset)
        .join(subscription, subscription.c.id == txn_ack.c.subscription_id)
        .where(txn_ack.c.txn_id == txn_id)
        .order_by(txn_ack.c.subscription_id, txn_ack.c.queue_offset)))


def forget_acks(conn: Connection, txn_ids: Sequence[int]) -> None:
    """The recorded acks of resolved transactions: not needed any more."""
    if txn_ids:
        conn.execute(delete(txn_ack).where(among(conn, txn_ack.c.txn_id, txn_ids)))


def drop_at(conn: Connection, sub_id: int, offsets: Sequence[int]) -> None:
    """Acknowledge these offsets, whoever holds them (the caller checked and locked them)."""
    conn.execute(delete(so).where(so.c.subscription_id == sub_id,
                                  among(conn, so.c.queue_offset, offsets)))


def holders(conn: Connection, txn_ids: Sequence[int]) -> list[str]:
    """The topics of the subscriptions where these transactions hold offsets."""
    ids = select(so.c.subscription_id).where(among(conn, so.c.held_by, txn_ids)).distinct()
    return list(conn.execute(select(subscription.c.topic).distinct()
                             .where(subscription.c.id.in_(ids))).scalars())


def settle(conn: Connection, txn_ids: Sequence[int], now: datetime, *, commit: bool) -> int:
    """What these transactions hold: acknowledged (their commit: the rows go) or released,
    deliverable from ``now`` (their rollback or discard); how many offsets."""
    held = among(conn, so.c.held_by, txn_ids)
    if commit:
        return int(conn.execute(delete(so).where(held)).rowcount)
    return int(conn.execute(update(so).where(held).values(
        held_by=None, leased_until=None, next_at=now)).rowcount)


def lock_unless_busy(conn: Connection, sub_id: int) -> AnyRow | None:
    """The subscription row, locked; None when another transaction holds it (on
    PostgreSQL; SQLite's write transaction already excludes every other writer)."""
    stmt = select(subscription).where(subscription.c.id == sub_id)
    if is_pg(conn):
        stmt = stmt.with_for_update(skip_locked=True)
    return conn.execute(stmt).first()


class Look(NamedTuple):
    first_offset: int        # the topic's first retained offset
    lowest_open: int | None  # the lowest offset row
    any_due: bool            # an offset row is due (to deliver again or to dead-letter)


def _any_due(sub_id: Any, now: Any) -> Any:
    """Whether an offset row of the subscription is due: one probe of
    ``ix_subscription_offset_due``."""
    return select(so.c.queue_offset).where(
        so.c.subscription_id == sub_id, so.c.held_by.is_(None), so.c.next_at <= now).exists()


_LOOK = select(
    func.coalesce(select(topic_retention.c.first_offset)
                  .where(topic_retention.c.topic == bindparam("topic")).scalar_subquery(), 0),
    select(func.min(so.c.queue_offset))
    .where(so.c.subscription_id == bindparam("sub"), so.c.queue_offset >= bindparam("cursor"))
    .scalar_subquery(),
    _any_due(bindparam("sub"), bindparam("now", type_=UTCDateTime())))
# and: its commit does not wait for its flush (see ``db.commit_without_flush``)
_LOOK_PG = _LOOK.add_columns(func.set_config("synchronous_commit", "off", True))


def look(conn: Connection, sub_id: int, topic: str, now: datetime, cursor: int) -> Look:
    """A receive's first look, with the subscription row locked, in one statement: the
    topic's first retained offset (read once the row is locked: retention moves it with
    the row locked), the lowest offset row (at or above the stored ``cursor``, as
    ``lowest_open``), whether an offset row is due. On PostgreSQL it
    also makes the transaction's commit not wait for its flush (a receive records
    leases); ``db.commit_with_flush`` undoes that."""
    row = conn.execute(_LOOK_PG if is_pg(conn) else _LOOK,
                       {"topic": topic, "sub": sub_id, "now": now, "cursor": cursor}).one()
    return Look(int(row[0]), None if row[1] is None else int(row[1]), bool(row[2]))


def any_row_due(conn: Connection, sub_id: int, now: datetime) -> bool:
    """Whether an offset row is due (to deliver again or to dead-letter)."""
    return bool(conn.execute(select(_any_due(sub_id, now))).scalar())


def anything_due(conn: Connection, sub: AnyRow, now: datetime) -> bool:
    """Whether a receive would find something to do now: an offset row due (to deliver
    again or to dead-letter), or a committed message past the read offset that is not
    delayed. A read of two index probes, without locks."""
    if any_row_due(conn, sub.id, now):
        return True
    fresh = select(message_log.c.queue_offset).where(
        message_log.c.topic == sub.topic, message_log.c.queue_offset >= sub.read_offset,
        or_(message_log.c.deliver_at.is_(None), message_log.c.deliver_at <= now)).limit(1)
    return conn.execute(fresh).first() is not None
