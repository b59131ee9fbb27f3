"""SQL of retention: expiring each topic's committed log from its head, then the resolved
transactions whose log rows are gone, with their half messages, op and check records.

Every function runs in the caller's short transaction and touches at most one batch.
Work is shared between processes through rows locked for one batch
(``FOR UPDATE SKIP LOCKED`` on PostgreSQL; SQLite's writers take turns under
``BEGIN IMMEDIATE``): a topic's ``topic_retention`` row, and the ``retention_cursor`` row
of the walk over transactions. Neither is a row the commit path locks (it locks
``topic_offset`` counters and ``txn`` rows of live transactions), so sends and commits
never wait for retention, nor retention for them.

Offsets within a topic are committed in order, so what expires is a prefix of the topic:
the rows from ``first_offset`` up to the first one still retained, found by reading the
primary key (topic, queue_offset) in order, never by scanning the topic.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import NamedTuple

from sqlalchemy import (
    BigInteger,
    Connection,
    and_,
    case,
    delete,
    func,
    insert,
    literal,
    select,
    true,
    tuple_,
    update,
)

from app.storage.bulk import among, dialect_insert
from app.storage.dialects import dialect_of
from app.storage.schema import (
    AnyRow,
    AnySelect,
    UTCDateTime,
    check_log,
    forgotten_txn,
    half_message,
    message_log,
    op_log,
    retention_cursor,
    retention_pending,
    topic_offset,
    topic_retention,
    txn,
)
from app.vocabulary import State

_RESOLVED = (State.COMMITTED.value, State.ROLLED_BACK.value)


def lock_topic(conn: Connection, topic: str) -> AnyRow | None:
    """The topic's retention row, locked for this batch; None if another process holds it."""
    stmt = (select(topic_retention.c.first_offset, topic_retention.c.retention_seconds)
            .where(topic_retention.c.topic == topic)
            .with_for_update(skip_locked=True))
    return conn.execute(stmt).first()


class Head(NamedTuple):
    end: int     # the first offset to keep: every offset in [first, end) has expired
    more: bool   # the whole batch had expired: the next one may too
    oldest: datetime | None = None  # no later than the commit of any row in [first, end)


def expired_head(conn: Connection, topic: str, first: int, cutoff: datetime,
                 limit: int) -> Head:
    """How far the head of ``topic`` from ``first`` has expired (committed before
    ``cutoff``), looking at offsets [first, first + limit) only.

    The range is bounded by offsets, not by a LIMIT over the rows in offset order: the
    planner cannot then choose to read every row from ``first`` on and sort them (as it
    did on tables without statistics, with 70k rows read for a batch of 2,000)."""
    in_batch = and_(message_log.c.topic == topic, message_log.c.queue_offset >= first,
                    message_log.c.queue_offset < first + limit)
    oldest = conn.execute(select(message_log.c.committed_at).where(in_batch)
                          .order_by(message_log.c.queue_offset).limit(1)).first()
    if oldest is None:
        # txmsg writes a topic's offsets without gaps, but rows deleted by hand leave
        # them: past one as long as a batch, the head moves on to the next row
        after = conn.execute(select(func.min(message_log.c.queue_offset)).where(
            message_log.c.topic == topic, message_log.c.queue_offset >= first + limit)).scalar()
        return Head(after, True) if after is not None else Head(first, False)
    if oldest.committed_at >= cutoff:  # the usual case: one row read
        return Head(first, False)
    kept = func.min(case((message_log.c.committed_at >= cutoff, message_log.c.queue_offset)))
    first_kept, last, oldest_commit = conn.execute(
        select(kept, func.max(message_log.c.queue_offset), func.min(message_log.c.committed_at))
        .where(in_batch)).one()
    if first_kept is not None:
        return Head(first_kept, False, oldest_commit)
    return Head(last + 1, last + 1 == first + limit, oldest_commit)


def expire_head(conn: Connection, topic: str, first: int, end: int,
                oldest: datetime | None) -> int:
    """Delete ``topic``'s log rows in [first, end) and raise its first offset to ``end``.
    The rows deleted. ``oldest`` is no later than the commit of any of them.

    A transaction the walk over resolved transactions has already passed (see
    ``expire_transactions``) is queued for another look. The walk's position is read
    after the DELETE, which waits for a walk that holds these rows: so either the walk
    saw the rows gone, or this transaction sees the position it moved to. A row
    committed after that position cannot belong to a transaction resolved before it
    (a transaction resolves when or after its messages enter the log), so in the usual
    case (the position before ``oldest``) nothing is queued and nothing joined.
    Otherwise the owners of every row deleted are queued: one looked at again too early
    is dropped from the queue and met by the walk later.
    """
    in_range = and_(message_log.c.topic == topic, message_log.c.queue_offset >= first,
                    message_log.c.queue_offset < end)
    gone = list(conn.execute(delete(message_log).where(in_range)
                             .returning(message_log.c.half_message_id)).scalars())
    walked_to = conn.execute(select(retention_cursor.c.resolved_at)
                             .where(retention_cursor.c.kind == TRANSACTIONS)).scalar()
    if gone and walked_to is not None and (oldest is None or oldest <= walked_to):
        owners = (select(half_message.c.txn_id).distinct()
                  .where(among(conn, half_message.c.id, gone)))
        conn.execute(insert(retention_pending).from_select(["txn_id"], owners))
    conn.execute(update(topic_retention).where(topic_retention.c.topic == topic)
                 .values(first_offset=end))
    return len(gone)


def oldest_retained(conn: Connection) -> list[AnyRow]:
    """Each topic with a retained message and the commit time of its first retained one
    (one primary-key lookup per topic)."""
    first = func.coalesce(topic_retention.c.first_offset, 0)
    stmt = (select(topic_offset.c.topic, message_log.c.committed_at)
            .select_from(topic_offset
                         .outerjoin(topic_retention,
                                    topic_retention.c.topic == topic_offset.c.topic)
                         .join(message_log, and_(message_log.c.topic == topic_offset.c.topic,
                                                 message_log.c.queue_offset == first))))
    return list(conn.execute(stmt))


# -- transactions ------------------------------------------------------------------------

TRANSACTIONS = "transactions"
WALK_START: tuple[datetime, int] = (datetime(1970, 1, 1, tzinfo=UTC), 0)


def lock_cursor(conn: Connection) -> tuple[datetime, int] | None:
    """The walk's position (resolved_at, txn id), locked for this batch; None if another
    process holds it."""
    conn.execute(dialect_insert(conn, retention_cursor).on_conflict_do_nothing(index_elements=["kind"])
                 .values(kind=TRANSACTIONS, resolved_at=WALK_START[0], txn_id=WALK_START[1]))
    stmt = (select(retention_cursor.c.resolved_at, retention_cursor.c.txn_id)
            .where(retention_cursor.c.kind == TRANSACTIONS).with_for_update(skip_locked=True))
    row = conn.execute(stmt).first()
    return (row.resolved_at or WALK_START[0], row.txn_id) if row is not None else None


def move_cursor(conn: Connection, resolved_at: datetime, txn_id: int) -> None:
    conn.execute(update(retention_cursor).where(retention_cursor.c.kind == TRANSACTIONS)
                 .values(resolved_at=resolved_at, txn_id=txn_id))


def walk_resolved(conn: Connection, after: tuple[datetime, int], cutoff: datetime,
                  limit: int) -> list[AnyRow]:
    """Resolved transactions past ``after`` in (resolved_at, id) order, resolved before
    ``cutoff`` (on the partial index ``ix_txn_resolved``): at most ``limit``, and none
    once those before it hold ``limit`` messages. Transactions of 100 messages make a
    batch of 20, and the other 1,980 rows are not sent to be dropped."""
    upto = func.sum(txn.c.message_count).over(order_by=(txn.c.resolved_at, txn.c.id))
    walk = (select(txn.c.id, txn.c.resolved_at, txn.c.message_count, upto.label("upto"))
            .where(txn.c.resolved_at.is_not(None), txn.c.resolved_at < cutoff,
                   tuple_(txn.c.resolved_at, txn.c.id)
                   > tuple_(literal(after[0], UTCDateTime()), literal(after[1], BigInteger())))
            .order_by(txn.c.resolved_at, txn.c.id).limit(limit).subquery())
    stmt = (select(walk.c.id, walk.c.resolved_at, walk.c.message_count)
            .where(walk.c.upto - walk.c.message_count < limit)
            .order_by(walk.c.resolved_at, walk.c.id))
    return list(conn.execute(stmt))


def read_pending(conn: Connection, limit: int) -> list[AnyRow]:
    """Queued transactions, oldest first: (id of the queue row, txn_id, message_count),
    the count 0 when the transaction is gone already."""
    stmt = (select(retention_pending.c.id, retention_pending.c.txn_id,
                   func.coalesce(txn.c.message_count, 0).label("message_count"))
            .select_from(retention_pending.outerjoin(txn,
                                                     txn.c.id == retention_pending.c.txn_id))
            .order_by(retention_pending.c.id).limit(limit))
    return list(conn.execute(stmt))


def forget_pending(conn: Connection, ids: Sequence[int]) -> None:
    if ids:
        conn.execute(delete(retention_pending).where(among(conn, retention_pending.c.id, ids)))


class Deleted(NamedTuple):
    transactions: int
    half_messages: int
    op_records: int
    check_records: int


def remember_forgotten(conn: Connection, txn_ids: Sequence[int], cutoff: datetime,
                       now: datetime) -> None:
    """Keep the keys of those of ``txn_ids`` resolved before ``cutoff`` in
    ``forgotten_txn`` (forgotten at ``now``), so that a send never uses one again.

    In a transaction committed before the one that deletes them (``expire_transactions``):
    a send sees either the transaction's row (a retry, answered as one) or, once its row
    is gone, the key kept here. Kept in the same transaction as the delete, a send whose
    statement began before that commit would see neither, and store a new transaction
    under the old id. A key kept for a transaction that is not deleted after all (a log
    row still refers to it) changes nothing: its row answers first."""
    if not txn_ids:
        return
    keys = conn.execute(
        select(txn.c.producer_group, txn.c.transaction_id)
        .where(among(conn, txn.c.id, sorted(set(txn_ids))), txn.c.state.in_(_RESOLVED),
               txn.c.resolved_at < cutoff)).all()
    if keys:
        forgotten_at = now
        conn.execute(dialect_insert(conn, forgotten_txn).on_conflict_do_nothing(), [
            {"producer_group": g, "transaction_id": x, "forgotten_at": forgotten_at}
            for g, x in keys])


def expire_transactions(conn: Connection, txn_ids: Sequence[int], cutoff: datetime
                        ) -> Deleted:
    """Delete those of ``txn_ids`` that were resolved before ``cutoff`` and no committed
    log row (of any topic, the discard topic included) still refers to, with their half
    messages, op and check records. Their keys were kept before (``remember_forgotten``).

    A resolved transaction never changes state again, so it never gains a committed log
    row: once none refers to it, none will."""
    if not txn_ids:
        return Deleted(0, 0, 0, 0)
    due = list(conn.execute(
        select(txn.c.id).where(among(conn, txn.c.id, sorted(set(txn_ids))),
                               txn.c.state.in_(_RESOLVED), txn.c.resolved_at < cutoff)
    ).scalars())
    if not due:
        return Deleted(0, 0, 0, 0)
    referenced = set(conn.execute(_referenced(conn, due)).scalars())
    gone = [i for i in due if i not in referenced]
    if not gone:
        return Deleted(0, 0, 0, 0)
    # the transactions first: no foreign key orders the deletes (see app.storage.schema),
    # and this one waits for a check being recorded under one of these rows (which
    # updates the row, then inserts its check record), whose record the DELETE below
    # then sees; a check recorded after it finds the row gone and writes nothing
    txns = conn.execute(delete(txn).where(among(conn, txn.c.id, gone))).rowcount
    checks = conn.execute(delete(check_log).where(among(conn, check_log.c.txn_id, gone))).rowcount
    ops = conn.execute(delete(op_log).where(among(conn, op_log.c.txn_id, gone))).rowcount
    messages = conn.execute(delete(half_message)
                            .where(among(conn, half_message.c.txn_id, gone))).rowcount
    return Deleted(txns, messages, ops, checks)


def _referenced(conn: Connection, txn_ids: Sequence[int]) -> AnySelect:
    """Those of ``txn_ids`` that a committed log row still refers to, as a locking read:
    it waits for a topic's batch that is deleting these rows, and makes one that starts
    now wait for this transaction (see ``expire_head``).

    On PostgreSQL each half message looks up its log row by index (a LATERAL subquery):
    as a join, the planner may hash the whole committed log instead (it did on tables
    without statistics, 14 ms a batch)."""
    owners = among(conn, half_message.c.txn_id, txn_ids)
    if not dialect_of(conn).row_locks:
        return (select(half_message.c.txn_id)
                .join_from(message_log, half_message,
                           half_message.c.id == message_log.c.half_message_id)
                .where(owners))
    log_row = (select(message_log.c.half_message_id)
               .where(message_log.c.half_message_id == half_message.c.id)
               .limit(1).with_for_update(key_share=True).lateral())
    return select(half_message.c.txn_id).select_from(half_message.join(log_row, true())).where(owners)


def row_counts(conn: Connection) -> dict[str, int]:
    """Rows of each table retention empties (for the soak run and the flatness test)."""
    tables = (txn, half_message, op_log, check_log, message_log, retention_pending)
    return {t.name: conn.execute(select(func.count()).select_from(t)).scalar_one()
            for t in tables}


# the table each kind of deleted row is in (the kinds of ``Deleted`` and "messages")
TABLE_OF_KIND = {"messages": message_log.name, "transactions": txn.name,
                 "half_messages": half_message.name, "op_records": op_log.name,
                 "check_records": check_log.name}


def autovacuum_on(conn: Connection) -> bool:
    """Whether the PostgreSQL server runs autovacuum."""
    return bool(conn.exec_driver_sql("SHOW autovacuum").scalar_one() == "on")


def vacuum(conn: Connection, tables: Sequence[str]) -> None:
    """``VACUUM`` these tables (PostgreSQL; on a connection in autocommit), skipping one
    another process is vacuuming now: their dead rows' space becomes reusable.

    Without truncating the table's empty tail, which takes a lock that every insert
    waits for (the space is reused by the next inserts anyway), and without parallel
    workers: the tables' indexes are small, and the writers need the cores."""
    for table in tables:
        assert table in TABLE_OF_KIND.values(), table  # names, not input
        conn.exec_driver_sql(f"VACUUM (SKIP_LOCKED, TRUNCATE false, PARALLEL 0) {table}")
