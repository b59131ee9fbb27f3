"""SQL of a receive: the offset rows due again, the committed messages past the read
offset, the leases taken on both, and the dead letters appended to their topic. How the
rows are locked: ``app.storage.subscriptions``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import (
    Connection,
    Engine,
    Select,
    and_,
    bindparam,
    func,
    or_,
    select,
    text,
    update,
)

from app.storage.bulk import insert_rows, plain_rows
from app.storage.dialects import dialect_of
from app.storage.log import AS_READ_NAMES, AS_READ_SQL, body_size
from app.storage.schema import (
    AnyRow,
    UTCDateTime,
    half_message,
    message_log,
    topic_retention,
)
from app.storage.subscriptions import locking_offsets, so


def due(conn: Connection, sub_id: int, topic: str, now: datetime, limit: int, *,
        dead_from: int | None = None, live_below: int | None = None,
        offsets_below: int | None = None) -> list[AnyRow]:
    """Offset rows deliverable now (not acknowledged, not held, their time come), lowest
    first, with their message's body size, tag and ordering key: those delivered at least
    ``dead_from`` times, or those delivered fewer than ``live_below`` times; only offsets
    below ``offsets_below`` if given. Locked: an ack that came first leaves them out, one
    that comes later waits for this transaction."""
    stmt = (select(so.c.queue_offset, so.c.deliveries, so.c.ordering_key, half_message.c.tag,
                   body_size())
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
    if offsets_below is not None:
        stmt = stmt.where(so.c.queue_offset < offsets_below)
    return list(conn.execute(locking_offsets(dialect_of(conn), stmt)))


def blocked_from(conn: Connection, sub_id: int, now: datetime) -> int | None:
    """The lowest offset given back and not deliverable yet (a nack's delay, a timed-out
    lease's backoff), which on failover and exclusive comes again before any higher one.
    It reads the rows due later: the leases and the given back ones, not the backlog."""
    return conn.execute(select(func.min(so.c.queue_offset)).where(
        so.c.subscription_id == sub_id, so.c.held_by.is_(None), so.c.next_at > now,
        so.c.deliveries > 0,
        or_(so.c.leased_until.is_(None), so.c.leased_until <= now))).scalar_one_or_none()


def scan(conn: Connection, topic: str, from_offset: int, end: int) -> list[AnyRow]:
    """Committed messages of ``topic`` in ``[from_offset, end)``: offset, deliverable time,
    size.

    Offsets are dense, so the range holds at most ``end - from_offset`` rows: bounded on
    both sides, it is an index range scan whatever the statistics say. With only
    ``>= from_offset ... LIMIT``, PostgreSQL without statistics of a fresh backlog joined
    and sorted all of it."""
    return list(conn.execute(scan_statement(topic, from_offset, end)))


def scan_statement(topic: str, from_offset: int, end: int) -> Select[Any]:
    return (select(message_log.c.queue_offset, message_log.c.deliver_at, body_size(),
                   half_message.c.tag, half_message.c.ordering_key)
            .join(half_message, half_message.c.id == message_log.c.half_message_id)
            .where(message_log.c.topic == topic, message_log.c.queue_offset >= from_offset,
                   message_log.c.queue_offset < end)
            .order_by(message_log.c.queue_offset))


_UNLEASED_ARRAYS = text(
    "INSERT INTO subscription_offset (subscription_id, queue_offset, deliveries,"
    " leased_until, next_at, held_by, consumer, ordering_key)"
    " SELECT :sub, o, 0, NULL, n, NULL, NULL, k"
    " FROM unnest(CAST(:offsets AS BIGINT[]), CAST(:nexts AS TIMESTAMPTZ[]),"
    " CAST(:keys AS VARCHAR[])) AS f (o, n, k)")


def add_offsets(conn: Connection, sub_id: int, rows: Sequence[Mapping[str, Any]]) -> None:
    """New offset rows not leased, never delivered (queue_offset, next_at, ordering_key):
    delayed ones, or ones waiting behind their key (``next_at`` None). On PostgreSQL one
    statement with the rows as arrays (on key_shared a receive adds hundreds)."""
    if rows and dialect_of(conn).arrays:
        conn.execute(_UNLEASED_ARRAYS, {"sub": sub_id,
                                        "offsets": [r["queue_offset"] for r in rows],
                                        "nexts": [r["next_at"] for r in rows],
                                        "keys": [r["ordering_key"] for r in rows]})
        return
    insert_rows(conn, so, [{"subscription_id": sub_id, "deliveries": 0, "leased_until": None,
                            "held_by": None, "consumer": None, **r} for r in rows])


_LEASED_RANGE = text(
    "INSERT INTO subscription_offset (subscription_id, queue_offset, deliveries,"
    " leased_until, next_at, held_by, consumer, ordering_key)"
    " SELECT :sub, o, CAST(:deliveries AS INTEGER), :until, :next, NULL,"
    " CAST(:consumer AS VARCHAR), k"
    " FROM unnest(CAST(:offsets AS BIGINT[]), CAST(:keys AS VARCHAR[])) AS f (o, k)")


def add_leased(conn: Connection, sub_id: int, offsets: Sequence[tuple[int, str | None]],
               until: datetime, next_at: datetime, deliveries: int,
               consumer: str | None) -> None:
    """Offset rows for first deliveries (each an offset and its ordering key; their
    ``deliveries``), leased to ``consumer`` until ``until``, deliverable again from
    ``next_at``: on PostgreSQL one statement with the offsets as one array, since a
    receive inserts them with the subscription row locked."""
    if not offsets:
        return
    if dialect_of(conn).arrays:
        conn.execute(_LEASED_RANGE.bindparams(bindparam("until", type_=UTCDateTime()),
                                              bindparam("next", type_=UTCDateTime())),
                     {"sub": sub_id, "offsets": [o for o, _ in offsets],
                      "keys": [k for _, k in offsets], "until": until, "next": next_at,
                      "deliveries": deliveries, "consumer": consumer})
        return
    insert_rows(conn, so, [{"subscription_id": sub_id, "queue_offset": o,
                            "deliveries": deliveries, "leased_until": until,
                            "next_at": next_at, "held_by": None, "consumer": consumer,
                            "ordering_key": k} for o, k in offsets])


# the subscription row locked (the commit not waiting for its flush); the cursor over the
# acknowledged head where the statement's snapshot can tell; the common case (nothing to
# deliver again or dead-letter, nothing expired), whose first deliveries are leased until
# now + the ack timeout (``leasing.lease_until``), deliverable again after the backoff of
# redelivery count 0 (``leasing.redeliverable_at``), which is LEAST(min_ms, max_ms)
# (``leasing.backoff_ms``); its picks take at most max_bytes, but at least one
# (``limits.within_budget``). tests/integration/domain/test_budgets.py runs it on PostgreSQL and
# holds its leases and picks to those functions.
# its columns are ``as_read``'s (``app.storage.log.as_read_columns``) and the body
_PICKED = ", ".join(f"p.{name}" for name in AS_READ_NAMES)
_FIRST_DELIVERIES = text(f"""
WITH sub AS (
    SELECT id, read_offset, ack_cursor, ack_timeout_ms, backoff_min_ms, backoff_max_ms,
           type, tag_filter, xmin::text AS version,
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
    WHERE type = 'shared' AND tag_filter = '*'
      AND ack_cursor >= COALESCE(
              (SELECT first_offset FROM topic_retention WHERE topic = :topic), 0)
      AND NOT EXISTS (SELECT FROM subscription_offset o
                      WHERE o.subscription_id = sub.id AND o.held_by IS NULL
                        AND o.next_at <= :now)
), window_ AS (
    SELECT w.*, sum(length(w.body)) OVER (ORDER BY w.queue_offset) AS used,
           row_number() OVER (ORDER BY w.queue_offset) AS n
    FROM plain, LATERAL (
        SELECT {AS_READ_SQL}, h.body, h.ordering_key AS lease_key,
               m.deliver_at > :now AS delayed
        FROM message_log m JOIN half_message h ON h.id = m.half_message_id
        JOIN txn t ON t.id = h.txn_id
        WHERE m.topic = :topic AND m.queue_offset >= plain.read_offset
          AND m.queue_offset < LEAST(plain.read_offset, :max_offset - :max_messages)
                               + :max_messages
        ORDER BY m.queue_offset LIMIT :max_messages) AS w
), picked AS (  -- at most max_bytes, but at least one (limits.within_budget)
    SELECT * FROM window_
    WHERE (used <= :max_bytes OR n = 1)
      AND queue_offset < ALL (SELECT queue_offset FROM window_ WHERE delayed)
), leased AS (
    INSERT INTO subscription_offset
        (subscription_id, queue_offset, deliveries, leased_until, next_at, held_by,
         consumer, ordering_key)
    SELECT plain.id, picked.queue_offset, CAST(:deliveries AS INTEGER), plain.until,
           plain.next_at, NULL, CAST(:consumer AS VARCHAR), picked.lease_key
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
       {_PICKED}, p.body
FROM (VALUES (1)) AS one (x) LEFT JOIN picked p ON true
ORDER BY p.queue_offset
""").bindparams(bindparam("now", type_=UTCDateTime())).columns(
    committed_at=UTCDateTime(), created_at=UTCDateTime())


def one_statement_leases(engine: Engine) -> bool:
    """Whether ``first_deliveries`` serves this database (PostgreSQL)."""
    return dialect_of(engine).one_statement_first_deliveries


def first_deliveries(conn: Connection, topic: str, name: str, now: datetime,
                     max_messages: int, max_bytes: int, *, max_offset: int,
                     deliveries: int, consumer: str | None) -> list[AnyRow] | None:
    """PostgreSQL, on an ``each_statement_alone`` connection: a receive's common case as one
    statement: when nothing is due to be delivered again or dead-lettered and retention
    moved nothing, lease the committed messages past the read offset (lowest first, up to
    ``max_messages``, ``max_bytes`` of bodies but at least one, stopping at the first
    delayed one) as ``add_leased`` does, move the read offset over them, and return them
    with the columns of ``app.storage.log.as_read``. The subscription is found by its name
    in the same statement.
    Only a shared subscription without a tag filter takes it (the others decide per
    message). ``consumer``: the name its leases go to.
    None when the case is not the common one or there is no such subscription (the caller
    takes the general way); an empty list when there is nothing to deliver.
    ``max_offset``: the highest offset there can be, which bounds the window's end;
    ``deliveries``: what a first delivery's offset row counts (the domain's rules:
    ``app.domain.leasing``).

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
    rows = plain_rows(conn.execute(_FIRST_DELIVERIES, {
        "topic": topic, "name": name, "now": now, "max_messages": max_messages,
        "max_bytes": max_bytes, "max_offset": max_offset, "deliveries": deliveries,
        "consumer": consumer}))
    head = rows[0]
    if not head.plain or (head.queue_offset is None and head.delayed):
        return None
    return [r for r in rows if r.queue_offset is not None]


_LEASE = (update(so)
          .where(so.c.subscription_id == bindparam("b_sub"),
                 so.c.queue_offset == bindparam("b_offset"))
          .values(deliveries=so.c.deliveries + 1, leased_until=bindparam("b_until"),
                  next_at=bindparam("b_next"), consumer=bindparam("b_consumer")))


_LEASE_ARRAYS = text(
    "UPDATE subscription_offset AS s SET deliveries = s.deliveries + 1,"
    " leased_until = v.u, next_at = v.n, consumer = CAST(:consumer AS VARCHAR)"
    " FROM unnest(CAST(:offsets AS BIGINT[]), CAST(:untils AS TIMESTAMPTZ[]),"
    " CAST(:nexts AS TIMESTAMPTZ[])) AS v (o, u, n)"
    " WHERE s.subscription_id = :sub AND s.queue_offset = v.o")


def lease(conn: Connection, sub_id: int, leases: Iterable[tuple[int, datetime, datetime]],
          consumer: str | None) -> None:
    """Count one more delivery of each (offset, leased until, next deliverable time), now
    leased to ``consumer``: on PostgreSQL one statement with the rows as arrays (on
    key_shared most deliveries are of rows made due by acks, a hundred a receive)."""
    leases = list(leases)
    if leases and dialect_of(conn).arrays:
        conn.execute(_LEASE_ARRAYS, {"sub": sub_id, "offsets": [o for o, _, _ in leases],
                                     "untils": [u for _, u, _ in leases],
                                     "nexts": [n for _, _, n in leases],
                                     "consumer": consumer})
        return
    params = [{"b_sub": sub_id, "b_offset": o, "b_until": u, "b_next": n,
               "b_consumer": consumer} for o, u, n in leases]
    if params:
        conn.execute(_LEASE, params)


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
    row = conn.execute(_LOOK_PG if dialect_of(conn).relaxed_commits else _LOOK,
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
