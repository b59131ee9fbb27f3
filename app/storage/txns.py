"""SQL of the half table, op log, check log and committed log (txn, half_message, op_log,
message_log, topic_offset). Every statement on these tables lives here."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import psycopg
from psycopg import sql
from sqlalchemy import (
    BigInteger,
    Connection,
    Row,
    Select,
    String,
    Table,
    and_,
    any_,
    bindparam,
    func,
    insert,
    select,
    tuple_,
    update,
)
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects import postgresql, sqlite

from app.storage.schema import half_message, message_log, op_log, topic_offset, txn

Key = tuple[str, str]  # (producer_group, transaction_id)

TXN_COLUMNS = (
    txn.c.id, txn.c.producer_group, txn.c.transaction_id, txn.c.state, txn.c.fingerprint,
    txn.c.message_count, txn.c.check_url, txn.c.check_immunity_seconds, txn.c.check_times,
    txn.c.next_check_at, txn.c.created_at, txn.c.resolved_at,
)
MESSAGE_COLUMNS = (
    half_message.c.id, half_message.c.txn_id, half_message.c.seq, half_message.c.message_id,
    half_message.c.topic, half_message.c.tag, half_message.c["keys"], half_message.c.properties,
    half_message.c.body, half_message.c.body_is_text, half_message.c.created_at,
)

ID_COLUMNS = (half_message.c.txn_id, half_message.c.message_id, half_message.c.topic)


# On PostgreSQL, lookups of many rows take arrays (``= ANY(:ids)``, a join on
# ``unnest(:groups, :ids)``) rather than IN lists: one statement text whatever the batch
# size, so it is parsed and planned once (psycopg prepares it), and a join on the unique
# index instead of an OR of index scans. SQLite has no arrays and keeps IN lists.
_KEYS = func.unnest(bindparam("k_groups", type_=postgresql.ARRAY(String)),
                    bindparam("k_ids", type_=postgresql.ARRAY(String))
                    ).table_valued("g", "x").render_derived()
_TXN_IDS = bindparam("txn_ids", type_=postgresql.ARRAY(BigInteger))


def _pg(conn: Connection) -> bool:
    return conn.dialect.name == "postgresql"


_FIND_TXNS_PG = (select(*TXN_COLUMNS)
                 .select_from(txn.join(_KEYS, and_(txn.c.producer_group == _KEYS.c.g,
                                                   txn.c.transaction_id == _KEYS.c.x)))
                 .order_by(txn.c.id))


def find_txns(conn: Connection, keys: Iterable[Key]) -> dict[Key, Row]:
    """Transactions by (group, transaction id), without locking (``lock_txns`` locks)."""
    keys = sorted(set(keys))
    if not keys:
        return {}
    if _pg(conn):
        rows = conn.execute(_FIND_TXNS_PG, {"k_groups": [g for g, _ in keys],
                                            "k_ids": [t for _, t in keys]})
    else:
        rows = conn.execute(select(*TXN_COLUMNS)
                            .where(tuple_(txn.c.producer_group, txn.c.transaction_id).in_(keys))
                            .order_by(txn.c.id))
    return {(r.producer_group, r.transaction_id): r for r in rows}


class Published(NamedTuple):
    """What publishing needs of a half message."""

    txn_id: int
    id: int
    message_id: str
    topic: str
    properties: str


_PUBLISHED = (half_message.c.id.label("m_id"), half_message.c.message_id.label("m_message_id"),
              half_message.c.topic.label("m_topic"),
              half_message.c.properties.label("m_properties"))


@functools.cache
def _lock_txns_stmt(pg: bool) -> Select:
    stmt = select(*TXN_COLUMNS, *_PUBLISHED)
    joined = txn.join(_KEYS, and_(txn.c.producer_group == _KEYS.c.g,
                                  txn.c.transaction_id == _KEYS.c.x)) if pg else txn
    stmt = (stmt.select_from(joined.outerjoin(half_message, half_message.c.txn_id == txn.c.id))
            .order_by(txn.c.id, half_message.c.seq))
    return stmt.with_for_update(of=txn) if pg else stmt


def lock_txns(conn: Connection, keys: Iterable[Key]
              ) -> tuple[dict[Key, Row], dict[int, list[Published]]]:
    """Lock transactions (in id order) and read their messages, in one statement.

    The transactions by (group, transaction id), and their messages in send order.
    """
    keys = sorted(set(keys))
    if not keys:
        return {}, {}
    if _pg(conn):
        result = conn.execute(_lock_txns_stmt(True), {"k_groups": [g for g, _ in keys],
                                                      "k_ids": [t for _, t in keys]})
    else:
        result = conn.execute(_lock_txns_stmt(False).where(
            tuple_(txn.c.producer_group, txn.c.transaction_id).in_(keys)))
    rows: dict[Key, Row] = {}
    messages: dict[int, list[Published]] = {}
    for r in result:
        key = (r.producer_group, r.transaction_id)
        if key not in rows:
            rows[key] = r
            messages[r.id] = []
        if r.m_id is not None:
            messages[r.id].append(Published(r.id, r.m_id, r.m_message_id, r.m_topic,
                                            r.m_properties))
    return rows, messages


def get_txn(conn: Connection, group: str, transaction_id: str) -> Row | None:
    return find_txns(conn, [(group, transaction_id)]).get((group, transaction_id))


def list_txns(conn: Connection, group: str, state: str | None, after_id: int,
              limit: int) -> list[Row]:
    stmt = select(*TXN_COLUMNS).where(txn.c.producer_group == group, txn.c.id > after_id)
    if state is not None:
        stmt = stmt.where(txn.c.state == state)
    return list(conn.execute(stmt.order_by(txn.c.id).limit(limit)))


def insert_new_txns(conn: Connection, rows: Sequence[Mapping[str, Any]]) -> dict[Key, int]:
    """Insert the transactions whose (group, transaction id) is free; their new ids.

    An id already taken is skipped, not an error (ON CONFLICT DO NOTHING; a concurrent
    insert of the same id is waited for): the caller looks those up.
    """
    if not rows:
        return {}
    stmt = _insert_new_txns_stmt(_pg(conn))
    return {(r.producer_group, r.transaction_id): r.id for r in conn.execute(stmt, list(rows))}


# The hot path's statements are built once (per dialect): building one costs about as
# much as executing it.
@functools.cache
def _insert_new_txns_stmt(pg: bool) -> Any:
    dialect = postgresql if pg else sqlite
    return (dialect.insert(txn)
            .on_conflict_do_nothing(index_elements=[txn.c.producer_group, txn.c.transaction_id])
            .returning(txn.c.id, txn.c.producer_group, txn.c.transaction_id))


def insert_messages(conn: Connection, rows: Sequence[Mapping[str, Any]]) -> None:
    _insert_rows(conn, half_message, rows)


def _by_txn_ids(conn: Connection, stmt: Select, ids: list[int]) -> Any:
    """Run ``stmt`` (selecting rows of half_message) for these transaction ids, in send order."""
    order = (half_message.c.txn_id, half_message.c.seq)
    if _pg(conn):
        return conn.execute(_pg_by_txn_ids(stmt, order), {"txn_ids": ids})
    return conn.execute(stmt.where(half_message.c.txn_id.in_(ids)).order_by(*order))


@functools.lru_cache(maxsize=32)
def _pg_by_txn_ids(stmt: Select, order: tuple[Any, ...]) -> Select:
    return stmt.where(half_message.c.txn_id == any_(_TXN_IDS)).order_by(*order)


@functools.lru_cache(maxsize=32)
def _select(columns: tuple[Any, ...]) -> Select:
    return select(*columns)


def messages_of(conn: Connection, txn_ids: Iterable[int],
                columns: Sequence[Any] = MESSAGE_COLUMNS) -> dict[int, list[Row]]:
    """The half messages of these transactions, by transaction id, in send order."""
    ids = sorted(set(txn_ids))
    out: dict[int, list[Row]] = {i: [] for i in ids}
    if not ids:
        return out
    for row in _by_txn_ids(conn, _select(tuple(columns)), ids):
        out[row.txn_id].append(row)
    return out


_COMMITTED_OFFSETS = (
    select(half_message.c.txn_id, half_message.c.message_id, half_message.c.topic,
           message_log.c.queue_offset)
    .join(message_log, and_(message_log.c.half_message_id == half_message.c.id,
                            message_log.c.topic == half_message.c.topic))
)


def committed_offsets(conn: Connection, txn_ids: Iterable[int]) -> dict[int, list[Row]]:
    """(message_id, topic, offset) of committed transactions, in send order."""
    ids = sorted(set(txn_ids))
    out: dict[int, list[Row]] = {i: [] for i in ids}
    if not ids:
        return out
    for row in _by_txn_ids(conn, _COMMITTED_OFFSETS, ids):
        out[row.txn_id].append(row)
    return out


def reserve_offsets(conn: Connection, counts: Mapping[str, int]) -> dict[str, int]:
    """Take ``counts[topic]`` consecutive offsets per topic; the first offset of each range.

    The counter row stays locked until the caller's transaction ends, so a later range
    of a topic can only commit after every earlier one: readers never see a gap.
    Topics are locked in sorted order so concurrent writers cannot deadlock.
    """
    firsts: dict[str, int] = {}
    stmt = _reserve_offsets_stmt(_pg(conn))
    for topic in sorted(counts):
        n = counts[topic]
        firsts[topic] = conn.execute(stmt, {"r_topic": topic, "r_n": n}).scalar_one() - n
    return firsts


@functools.cache
def _reserve_offsets_stmt(pg: bool) -> Any:
    dialect = postgresql if pg else sqlite
    stmt = dialect.insert(topic_offset).values(topic=bindparam("r_topic"),
                                               next_offset=bindparam("r_n"))
    return stmt.on_conflict_do_update(
        index_elements=[topic_offset.c.topic],
        set_={"next_offset": topic_offset.c.next_offset + stmt.excluded.next_offset},
    ).returning(topic_offset.c.next_offset)


def insert_message_log(conn: Connection, rows: Sequence[Mapping[str, Any]]) -> None:
    _insert_rows(conn, message_log, rows)


def insert_ops(conn: Connection, rows: Sequence[Mapping[str, Any]]) -> None:
    _insert_rows(conn, op_log, rows)


# Below this many rows an INSERT costs less than starting a COPY.
_COPY_FROM_ROWS = 8


@functools.cache
def _insert_stmt(table: Table) -> Any:
    return insert(table)


def _insert_rows(conn: Connection, table: Table, rows: Sequence[Mapping[str, Any]]) -> None:
    """Insert plain rows (no RETURNING), in the caller's transaction.

    On PostgreSQL, many rows go in by COPY on the transaction's own connection: per
    row it costs the client about half of an executemany (which runs one INSERT per row
    in a pipeline). The values are the ones SQLAlchemy would bind (aware datetimes, bytes,
    str, int, bool, None), which psycopg adapts the same way.
    """
    if not rows:
        return
    if not _pg(conn) or len(rows) < _COPY_FROM_ROWS:
        conn.execute(_insert_stmt(table), list(rows))
        return
    columns = list(rows[0])
    statement = sql.SQL("COPY {} ({}) FROM STDIN").format(
        sql.Identifier(table.name), sql.SQL(", ").join(map(sql.Identifier, columns)))
    cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    try:
        with cursor.copy(statement) as copy:
            for row in rows:
                copy.write_row([row[c] for c in columns])
    except psycopg.Error as exc:
        raise sa_exc.DBAPIError.instance(str(statement), None, exc, psycopg.Error,
                                         dialect=conn.dialect) from exc
    finally:
        cursor.close()


_UPDATE_STATE = (
    update(txn)
    .where(txn.c.id == bindparam("b_id"))
    .values(
        state=bindparam("b_state"),
        resolved_at=bindparam("b_resolved_at"),
        check_times=bindparam("b_check_times"),
        next_check_at=bindparam("b_next_check_at"),
        lease_owner=None,
        lease_until=None,
    )
)


def update_states(conn: Connection, rows: Sequence[Mapping[str, Any]]) -> None:
    """Rows of b_id, b_state, b_resolved_at, b_check_times, b_next_check_at."""
    if rows:
        conn.execute(_UPDATE_STATE, list(rows))


def read_topic(conn: Connection, topic: str, from_offset: int, limit: int) -> list[Row]:
    stmt = (
        select(message_log.c.queue_offset, message_log.c.committed_at,
               func.coalesce(message_log.c.properties, half_message.c.properties)
               .label("properties"),
               half_message.c.message_id, half_message.c["keys"], half_message.c.tag,
               half_message.c.body, half_message.c.body_is_text, half_message.c.created_at,
               txn.c.transaction_id, txn.c.producer_group)
        .join(half_message, half_message.c.id == message_log.c.half_message_id)
        .join(txn, txn.c.id == half_message.c.txn_id)
        .where(message_log.c.topic == topic, message_log.c.queue_offset >= from_offset)
        .order_by(message_log.c.queue_offset)
        .limit(limit)
    )
    return list(conn.execute(stmt))


def list_topics(conn: Connection, after: str, limit: int) -> list[Row]:
    stmt = (select(topic_offset).where(topic_offset.c.topic > after)
            .order_by(topic_offset.c.topic).limit(limit))
    return list(conn.execute(stmt))


def get_message(conn: Connection, message_id: str) -> Row | None:
    stmt = (
        select(*MESSAGE_COLUMNS, txn.c.transaction_id, txn.c.producer_group,
               txn.c.state, message_log.c.queue_offset, message_log.c.committed_at)
        .join(txn, txn.c.id == half_message.c.txn_id)
        .outerjoin(message_log, and_(message_log.c.half_message_id == half_message.c.id,
                                     message_log.c.topic == half_message.c.topic))
        .where(half_message.c.message_id == message_id)
    )
    return conn.execute(stmt).first()


def count_unresolved_messages(conn: Connection) -> int:
    stmt = select(func.coalesce(func.sum(txn.c.message_count), 0)).where(txn.c.state == "PREPARED")
    return int(conn.execute(stmt).scalar_one())

