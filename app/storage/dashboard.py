"""SQL of the operator dashboard's reads: bounded, indexed, whatever the history holds.

Every query here is cut by a LIMIT or walks an index: counts go over an index (``state``
by ``ix_txn_group_state``, recent checks by ``ix_check_log_created_at``), lists page by
keyset (transactions newest first by id, a topic by offset, groups by name), and the
messages of a topic committed in the last hour are found by bisecting its offsets on the
primary key (commit times rise with offsets), not by reading the topic.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime

from sqlalchemy import Connection, and_, bindparam, func, select, text

from app.storage.log import dead_letter_copy
from app.storage.reads import TXN_COLUMNS, messages_of
from app.storage.schema import (
    PREPARED_PREDICATE,
    AnyRow,
    check_log,
    half_message,
    message_log,
    op_log,
    producer_group,
    txn,
)
from app.vocabulary import State

# a half message without its body: its size, and the first bytes when asked
MESSAGE_COLUMNS = (
    half_message.c.id, half_message.c.txn_id, half_message.c.seq, half_message.c.message_id,
    half_message.c.topic, half_message.c.tag, half_message.c["keys"], half_message.c.properties,
    half_message.c.body_is_text, half_message.c.created_at,
    func.length(half_message.c.body).label("size"),
)


_COMMITTED_AT = select(message_log.c.committed_at).where(
    message_log.c.topic == bindparam("topic"), message_log.c.queue_offset == bindparam("at"))


def first_offset_since(conn: Connection, topic: str, lo: int, hi: int, since: datetime) -> int:
    """The lowest offset in ``[lo, hi)`` committed at or after ``since`` (``hi`` if none):
    a bisection of primary-key lookups, about log2(hi - lo) of them. Offsets are handed out
    in commit order, so commit times rise with them (within the clock skew of writers in
    different processes, which is what the answer may be off by)."""
    while lo < hi:
        mid = (lo + hi) // 2
        at = conn.execute(_COMMITTED_AT, {"topic": topic, "at": mid}).scalar()
        if at is None or at < since:  # None: deleted by retention meanwhile
            lo = mid + 1
        else:
            hi = mid
    return lo


def count_by_state(conn: Connection, groups: Collection[str] | None) -> dict[str, int]:
    """Transactions by state (of these groups unless None), counted over the index
    ``ix_txn_group_state``."""
    stmt = select(txn.c.state, func.count()).group_by(txn.c.state)
    if groups is not None:
        if not groups:
            return {}
        stmt = stmt.where(txn.c.producer_group.in_(sorted(groups)))
    return {state: n for state, n in conn.execute(stmt)}


def oldest_prepared(conn: Connection, groups: Collection[str] | None) -> datetime | None:
    """When the oldest PREPARED transaction was sent (over the partial index ix_txn_due)."""
    stmt = select(func.min(txn.c.created_at)).where(text(PREPARED_PREDICATE))
    if groups is not None:
        if not groups:
            return None
        stmt = stmt.where(txn.c.producer_group.in_(sorted(groups)))
    oldest: datetime | None = conn.execute(stmt).scalar()
    return oldest


def checks_by_result(conn: Connection, since: datetime,
                     groups: Collection[str] | None) -> dict[str, int]:
    """Checks made since ``since`` by result (of these groups' transactions unless None)."""
    stmt = (select(check_log.c.result, func.count()).where(check_log.c.created_at >= since)
            .group_by(check_log.c.result))
    if groups is not None:
        if not groups:
            return {}
        stmt = stmt.join(txn, txn.c.id == check_log.c.txn_id).where(
            txn.c.producer_group.in_(sorted(groups)))
    return {result: n for result, n in conn.execute(stmt)}


def transaction_groups(conn: Connection, limit: int) -> list[str]:
    """The producer groups that have transactions, by name: a loose scan of
    ``ix_txn_group_state`` (one index probe per group, however many transactions)."""
    first = (select(txn.c.producer_group.label("name")).order_by(txn.c.producer_group)
             .limit(1).scalar_subquery())
    names = select(first.label("name")).cte("names", recursive=True)
    following = (select(txn.c.producer_group).where(txn.c.producer_group > names.c.name)
                 .order_by(txn.c.producer_group).limit(1).scalar_subquery())
    names = names.union_all(select(following).where(names.c.name.is_not(None)))
    stmt = select(names.c.name).where(names.c.name.is_not(None)).limit(limit)
    return [name for (name,) in conn.execute(stmt)]


def list_transactions(conn: Connection, groups: Sequence[str] | None,
                      states: Sequence[State], before: int | None,
                      limit: int) -> list[AnyRow]:
    """Transactions newest first (by id, below ``before``), of these groups (all unless
    None) in these states (all when empty).

    Unfiltered, it walks the primary key backwards; filtered, it reads each (group, state)
    range of ``ix_txn_group_state`` backwards up to ``limit`` rows and keeps the newest
    ``limit`` of them, so a rare state costs no more than a common one.
    """
    below = txn.c.id < before if before is not None else None
    if groups is None and not states:
        stmt = select(*TXN_COLUMNS).order_by(txn.c.id.desc()).limit(limit)
        if below is not None:
            stmt = stmt.where(below)
        return list(conn.execute(stmt))
    if groups is None:
        groups = transaction_groups(conn, 10_000)
    rows: list[AnyRow] = []
    for group in groups:
        for state in states or list(State):
            stmt = (select(*TXN_COLUMNS)
                    .where(txn.c.producer_group == group, txn.c.state == state.value)
                    .order_by(txn.c.id.desc()).limit(limit))
            if below is not None:
                stmt = stmt.where(below)
            rows.extend(conn.execute(stmt))
    rows.sort(key=lambda r: r.id, reverse=True)
    return rows[:limit]


def transactions_with_id(conn: Connection, groups: Sequence[str],
                         transaction_id: str) -> list[AnyRow]:
    """The transactions called ``transaction_id`` in these groups (unique per group)."""
    if not groups:
        return []
    stmt = (select(*TXN_COLUMNS)
            .where(txn.c.producer_group.in_(sorted(groups)),
                   txn.c.transaction_id == transaction_id)
            .order_by(txn.c.producer_group))
    return list(conn.execute(stmt))


def transaction_of_message(conn: Connection, message_id: str) -> AnyRow | None:
    stmt = (select(*TXN_COLUMNS).join(half_message, half_message.c.txn_id == txn.c.id)
            .where(half_message.c.message_id == message_id))
    return conn.execute(stmt).first()


def messages(conn: Connection, txn_id: int) -> list[AnyRow]:
    """A transaction's messages without their bodies (sizes instead), in send order."""
    return messages_of(conn, [txn_id], columns=MESSAGE_COLUMNS)[txn_id]


def ops_of(conn: Connection, txn_id: int) -> list[AnyRow]:
    """The op log of one transaction, oldest first."""
    stmt = (select(op_log.c.op, op_log.c.source, op_log.c.check_times, op_log.c.created_at)
            .where(op_log.c.txn_id == txn_id).order_by(op_log.c.id))
    return list(conn.execute(stmt))


def message(conn: Connection, message_id: str, preview_bytes: int) -> AnyRow | None:
    """One message with its transaction, its size and first ``preview_bytes`` bytes, and
    its place in the log once committed (``queue_offset``, NULL before)."""
    preview = func.substr(half_message.c.body, 1, preview_bytes).label("preview")
    stmt = (
        select(*MESSAGE_COLUMNS, txn.c.transaction_id, txn.c.producer_group, txn.c.state,
               preview, message_log.c.queue_offset, message_log.c.committed_at)
        .join(txn, txn.c.id == half_message.c.txn_id)
        .outerjoin(message_log, and_(message_log.c.half_message_id == half_message.c.id,
                                     message_log.c.topic == half_message.c.topic))
        .where(half_message.c.message_id == message_id)
    )
    return conn.execute(stmt).first() or dead_letter_copy(conn, message_id,
                                                           (*MESSAGE_COLUMNS, preview))


def discard_entries(conn: Connection, message_ids: Sequence[str]) -> list[AnyRow]:
    """Where these messages were appended to the discard topic (offsets, properties)."""
    if not message_ids:
        return []
    stmt = (select(message_log.c.topic, message_log.c.queue_offset, message_log.c.properties,
                   message_log.c.committed_at, half_message.c.message_id)
            .join(half_message, half_message.c.id == message_log.c.half_message_id)
            .where(half_message.c.message_id.in_(sorted(message_ids)),
                   message_log.c.topic != half_message.c.topic)
            .order_by(message_log.c.queue_offset))
    return list(conn.execute(stmt))


def groups(conn: Connection, after: str, limit: int,
           only: Collection[str] | None) -> list[AnyRow]:
    """Registered producer groups by name after ``after`` (only those in ``only`` unless
    None), without their signing secrets."""
    stmt = (select(producer_group).where(producer_group.c.name > after)
            .order_by(producer_group.c.name).limit(limit))
    if only is not None:
        if not only:
            return []
        stmt = stmt.where(producer_group.c.name.in_(sorted(only)))
    return list(conn.execute(stmt))
