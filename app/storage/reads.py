"""SQL that reads transactions and their half messages (txn, half_message, message_log)."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, and_, func, select, text, tuple_

from app.storage.bulk import KEYS, Key, by_txn_ids, is_pg, key_params
from app.storage.schema import (
    PREPARED_PREDICATE,
    AnyRow,
    AnySelect,
    half_message,
    message_log,
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
    half_message.c.topic, half_message.c.tag, half_message.c["keys"], half_message.c.properties,
    half_message.c.body, half_message.c.body_is_text, half_message.c.created_at,
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
    if is_pg(conn):
        rows = conn.execute(_FIND_TXNS_PG, key_params(keys))
    else:
        rows = conn.execute(select(*TXN_COLUMNS)
                            .where(tuple_(txn.c.producer_group, txn.c.transaction_id).in_(keys))
                            .order_by(txn.c.id))
    return {(r.producer_group, r.transaction_id): r for r in rows}


def get_txn(conn: Connection, group: str, transaction_id: str) -> AnyRow | None:
    return find_txns(conn, [(group, transaction_id)]).get((group, transaction_id))


def list_txns(conn: Connection, group: str, state: State | None, after_id: int,
              limit: int) -> list[AnyRow]:
    stmt = select(*TXN_COLUMNS).where(txn.c.producer_group == group, txn.c.id > after_id)
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
    .join(message_log, and_(message_log.c.half_message_id == half_message.c.id,
                            message_log.c.topic == half_message.c.topic))
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
