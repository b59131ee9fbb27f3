"""SQL of reading transactions and their half messages (txn, half_message, op_log): by key,
by group and state, newest first (the dashboard's, bounded by an index), with their
messages and offsets. Storing them: ``sends``; finishing them: ``finishes``."""

from __future__ import annotations

import functools
from collections.abc import Collection, Iterable, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import and_, bindparam, func, select, text, tuple_, update
from sqlalchemy.engine import Connection

from app.storage.bulk import KEYS, Key, by_txn_ids, key_params
from app.storage.dialects import dialect_of
from app.storage.schema import (
    PREPARED_PREDICATE,
    AnyRow,
    AnySelect,
    half_message,
    message_log,
    op_log,
    own_place,
    txn,
)
from app.vocabulary import State

TXN_COLUMNS = (
    txn.c.id, txn.c.producer_group, txn.c.transaction_id, txn.c.state, txn.c.fingerprint,
    txn.c.message_count, txn.c.check_url, txn.c.check_immunity_seconds, txn.c.check_times,
    txn.c.next_check_at, txn.c.created_at, txn.c.resolved_at, txn.c.held_acks,
)
MESSAGE_COLUMNS = (
    half_message.c.id, half_message.c.txn_id, half_message.c.seq, half_message.c.message_id,
    half_message.c.topic, half_message.c.tag, half_message.c.ordering_key, half_message.c["keys"],
    half_message.c.properties, half_message.c.body, half_message.c.body_is_text, half_message.c.created_at,
)
ID_COLUMNS = (half_message.c.txn_id, half_message.c.message_id, half_message.c.topic)

_FIND_TXNS_PG = (select(*TXN_COLUMNS)
                 .select_from(txn.join(KEYS, and_(txn.c.producer_group == KEYS.c.g,
                                                  txn.c.transaction_id == KEYS.c.x)))
                 .order_by(txn.c.id))


def find_txns(conn: Connection, keys: Iterable[Key]) -> dict[Key, AnyRow]:
    """Transactions by (group, transaction id), without locking (``finishes.lock_txns``
    locks)."""
    keys = sorted(set(keys))
    if not keys:
        return {}
    if dialect_of(conn).arrays:
        rows = conn.execute(_FIND_TXNS_PG, key_params(keys))
    else:
        rows = conn.execute(select(*TXN_COLUMNS)
                            .where(tuple_(txn.c.producer_group, txn.c.transaction_id).in_(keys))
                            .order_by(txn.c.id))
    return {(r.producer_group, r.transaction_id): r for r in rows}


def get_txn(conn: Connection, group: str, transaction_id: str) -> AnyRow | None:
    return find_txns(conn, [(group, transaction_id)]).get((group, transaction_id))


_TXN_AS_READ = (
    select(*TXN_COLUMNS, half_message.c.message_id, half_message.c.topic, half_message.c["keys"],
           half_message.c.tag, half_message.c.ordering_key, half_message.c.properties,
           message_log.c.queue_offset)
    .select_from(txn.outerjoin(half_message, half_message.c.txn_id == txn.c.id)
                 .outerjoin(message_log, own_place()))
    .where(txn.c.producer_group == bindparam("group"),
           txn.c.transaction_id == bindparam("transaction_id"))
    .order_by(half_message.c.seq))


def transaction_as_read(conn: Connection, group: str, transaction_id: str
                        ) -> tuple[AnyRow | None, list[AnyRow]]:
    """A transaction and its messages in send order, each with its offset in its topic
    (NULL until committed), in one statement: a row per message, repeating the
    transaction's columns (no column name is in both)."""
    rows = conn.execute(_TXN_AS_READ, {"group": group, "transaction_id": transaction_id}).all()
    return rows[0] if rows else None, [r for r in rows if r.message_id is not None]


def list_txns(conn: Connection, group: str | None, state: State | None, after_id: int,
              limit: int) -> list[AnyRow]:
    """Transactions after ``after_id`` in id order, of ``group`` (every group if None)."""
    stmt = select(*TXN_COLUMNS).where(txn.c.id > after_id)
    if group is not None:
        stmt = stmt.where(txn.c.producer_group == group)
    if state is not None:
        stmt = stmt.where(txn.c.state == state.value)
    return list(conn.execute(stmt.order_by(txn.c.id).limit(limit)))


@functools.lru_cache(maxsize=32)
def _select(columns: tuple[Any, ...]) -> AnySelect:
    return select(*columns)


def messages_of(conn: Connection, txn_ids: Iterable[int],
                columns: Sequence[Any] = MESSAGE_COLUMNS) -> dict[int, list[AnyRow]]:
    """The half messages of these transactions, by transaction id, in send order."""
    ids = sorted(set(txn_ids))
    out: dict[int, list[AnyRow]] = {i: [] for i in ids}
    if not ids:
        return out
    for row in by_txn_ids(conn, _select(tuple(columns)), ids):
        out[row.txn_id].append(row)
    return out


_COMMITTED_OFFSETS = (
    select(half_message.c.txn_id, half_message.c.message_id, half_message.c.topic,
           message_log.c.queue_offset)
    .join(message_log, own_place())
)


def committed_offsets(conn: Connection, txn_ids: Iterable[int]) -> dict[int, list[AnyRow]]:
    """(message_id, topic, offset) of committed transactions, in send order."""
    ids = sorted(set(txn_ids))
    out: dict[int, list[AnyRow]] = {i: [] for i in ids}
    if not ids:
        return out
    for row in by_txn_ids(conn, _COMMITTED_OFFSETS, ids):
        out[row.txn_id].append(row)
    return out


# over the partial index ix_txn_due (its predicate spelt literally, for both planners): the
# cost follows the unresolved backlog, not the resolved history
_PREPARED_BACKLOG = select(func.coalesce(func.sum(txn.c.message_count), 0),
                           func.min(txn.c.created_at)).where(text(PREPARED_PREDICATE))


def prepared_backlog(conn: Connection) -> tuple[int, datetime | None]:
    """The half messages of PREPARED transactions, and the oldest one's creation time."""
    messages, oldest = conn.execute(_PREPARED_BACKLOG).one()
    return int(messages), oldest


# a half message without its body: its size, and the first bytes when asked
BODILESS_COLUMNS = (
    half_message.c.id, half_message.c.txn_id, half_message.c.seq, half_message.c.message_id,
    half_message.c.topic, half_message.c.tag, half_message.c.ordering_key, half_message.c["keys"],
    half_message.c.properties, half_message.c.body_is_text, half_message.c.created_at,
    func.length(half_message.c.body).label("size"),
)


def mark_held(conn: Connection, txn_id: int, count: int) -> None:
    """Note that the transaction holds ``count`` subscription offsets (its acks)."""
    conn.execute(update(txn).where(txn.c.id == txn_id).values(held_acks=count))


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


def newest_transactions(conn: Connection, groups: Sequence[str] | None,
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


def messages_without_bodies(conn: Connection, txn_id: int) -> list[AnyRow]:
    """A transaction's messages without their bodies (sizes instead), in send order."""
    return messages_of(conn, [txn_id], columns=BODILESS_COLUMNS)[txn_id]


def ops_of(conn: Connection, txn_id: int) -> list[AnyRow]:
    """The op log of one transaction, oldest first."""
    stmt = (select(op_log.c.op, op_log.c.source, op_log.c.check_times, op_log.c.created_at)
            .where(op_log.c.txn_id == txn_id).order_by(op_log.c.id))
    return list(conn.execute(stmt))
