"""SQL of finishes: locking transactions, then writing what a batch of COMMIT, ROLLBACK,
DISCARD and RESUME decided (op_log, txn state, the committed log and its topic counters)."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, NamedTuple

import orjson
from sqlalchemy import (
    BigInteger,
    Column,
    Connection,
    Text,
    and_,
    any_,
    bindparam,
    cast,
    func,
    insert,
    select,
    tuple_,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.dialects.postgresql import aggregate_order_by

from app.storage.bulk import (
    KEYS,
    TXN_IDS,
    JsonRows,
    Key,
    insert_rows,
    key_params,
    plain_rows,
)
from app.storage.dialects import dialect_of
from app.storage.schema import (
    AnyRow,
    AnySelect,
    half_message,
    message_log,
    op_log,
    topic_offset,
    txn,
)
from app.storage.transactions import TXN_COLUMNS


class Published(NamedTuple):
    """What publishing needs of a half message."""

    txn_id: int
    id: int
    message_id: str
    topic: str
    properties: str
    deliver_after_ms: int | None
    deliver_at: datetime | None


_new_tuple = tuple.__new__
_PUBLISHED = (half_message.c.id, half_message.c.message_id, half_message.c.topic,
              half_message.c.properties, half_message.c.deliver_after_ms,
              half_message.c.deliver_at)


@functools.cache
def _lock_txns_stmt(pg: bool, one: bool = False) -> AnySelect:
    """``one``: the statement of a lone transaction, by key (half the planning time of
    the join to the keys' arrays, which PostgreSQL plans anew for each batch).

    On PostgreSQL each transaction is one row, its messages one JSON array (``m``):
    joined, each message's row repeated the transaction's columns, and a batch of large
    transactions cost more to decode than to lock. SQLite joins them.
    """
    if not pg:
        return (select(*TXN_COLUMNS, *(c.label(f"m_{c.name}") for c in _PUBLISHED))
                .select_from(txn.outerjoin(half_message, half_message.c.txn_id == txn.c.id))
                .order_by(txn.c.id, half_message.c.seq))
    messages = (select(cast(func.json_agg(aggregate_order_by(
                    func.json_build_array(*_PUBLISHED), half_message.c.seq)), Text))
                .where(half_message.c.txn_id == txn.c.id).scalar_subquery())
    stmt = select(*TXN_COLUMNS, messages.label("m")).order_by(txn.c.id)
    if one:
        stmt = stmt.where(txn.c.producer_group == bindparam("k_group"),
                          txn.c.transaction_id == bindparam("k_id"))
    else:
        stmt = stmt.select_from(txn.join(KEYS, and_(txn.c.producer_group == KEYS.c.g,
                                                    txn.c.transaction_id == KEYS.c.x)))
    return stmt.with_for_update(of=txn)


def lock_txns(conn: Connection, keys: Iterable[Key]
              ) -> tuple[dict[Key, AnyRow], dict[int, list[Published]]]:
    """Lock transactions (in id order) and read their messages, in one statement.

    The transactions by (group, transaction id), and their messages in send order.
    """
    keys = sorted(set(keys))
    if not keys:
        return {}, {}
    if not dialect_of(conn).one_statement_finishes:
        return _joined(conn.execute(_lock_txns_stmt(False).where(
            tuple_(txn.c.producer_group, txn.c.transaction_id).in_(keys))).all())
    if len(keys) == 1:
        result = conn.execute(_lock_txns_stmt(True, one=True),
                              {"k_group": keys[0][0], "k_id": keys[0][1]})
    else:
        result = conn.execute(_lock_txns_stmt(True), key_params(keys))
    rows: dict[Key, AnyRow] = {}
    messages: dict[int, list[Published]] = {}
    for r in plain_rows(result):
        rows[(r.producer_group, r.transaction_id)] = r
        # tuple.__new__: a NamedTuple's own __new__ is a Python function, a third of the cost
        messages[r.id] = [_new_tuple(Published, (r.id, m_id, message_id, topic, properties,
                                                 after_ms, None if at is None else _utc(at)))
                          for m_id, message_id, topic, properties, after_ms, at
                          in (orjson.loads(r.m) if r.m is not None else ())]
    return rows, messages


def _utc(iso: str) -> datetime:
    """A timestamp as PostgreSQL writes it in JSON (ISO 8601, the session's offset)."""
    return datetime.fromisoformat(iso).astimezone(UTC)


def _joined(result: Sequence[AnyRow]) -> tuple[dict[Key, AnyRow], dict[int, list[Published]]]:
    """The transactions and messages of SQLite's join: a row per message."""
    rows: dict[Key, AnyRow] = {}
    messages: dict[int, list[Published]] = {}
    for r in result:
        key = (r.producer_group, r.transaction_id)
        if key not in rows:
            rows[key] = r
            messages[r.id] = []
        if r.m_id is not None:
            messages[r.id].append(Published(r.id, r.m_id, r.m_message_id, r.m_topic,
                                            r.m_properties, r.m_deliver_after_ms,
                                            r.m_deliver_at))
    return rows, messages


_STATE_COLUMNS = ("id", "state", "resolved_at", "check_times", "next_check_at")
_UPDATE_STATE = (
    update(txn)
    .where(txn.c.id == bindparam("b_id"))
    .values({**{n: bindparam(f"b_{n}") for n in _STATE_COLUMNS[1:]},
             "lease_owner": None, "lease_until": None})
)


def record_finishes(conn: Connection, counts: Mapping[str, int],
                    log_rows: Sequence[Mapping[str, Any]], op_rows: Sequence[Mapping[str, Any]],
                    state_rows: Sequence[Mapping[str, Any]], committed_at: datetime
                    ) -> dict[str, int]:
    """Write what a batch of finishes decided, in the caller's transaction; the first
    offset of each topic's range.

    ``counts[topic]`` consecutive offsets are taken from each topic's counter, and each
    committed log row (topic, rel, half_message_id, and properties and deliver_at when
    not NULL) is stored at offset first + rel, committed at ``committed_at``. Then the op
    log rows, and each transaction's new state (rows of id, state, resolved_at,
    check_times, next_check_at; the lease is cleared). On PostgreSQL all of it is one
    statement.

    A counter row stays locked until the transaction ends, so a later range of a topic
    can only commit after every earlier one: readers never see a gap. Topics are locked
    in sorted order, so concurrent writers cannot deadlock.
    """
    if not state_rows:
        return {}
    if dialect_of(conn).one_statement_finishes:
        reserved = conn.execute(_record_finishes_stmt(), {
            **_FINISH_RANGES.param({"topic": t, "n": n} for t, n in counts.items()),
            **_FINISH_LOG.param(log_rows), "l_committed_at": committed_at,
            **_FINISH_OPS.param(op_rows), **_FINISH_STATES.param(state_rows),
            "txn_ids": [r["id"] for r in state_rows]})
        return {r.topic: r.next_offset - counts[r.topic] for r in reserved}
    first: dict[str, int] = {}
    for topic in sorted(counts):
        n = counts[topic]
        first[topic] = conn.execute(_reserve_offsets_stmt(), {"r_topic": topic,
                                                              "r_n": n}).scalar_one() - n
    insert_rows(conn, message_log, [
        {"topic": r["topic"], "queue_offset": first[r["topic"]] + r["rel"],
         "half_message_id": r["half_message_id"], "properties": r.get("properties"),
         "committed_at": committed_at, "deliver_at": r.get("deliver_at")}
        for r in log_rows])
    insert_rows(conn, op_log, op_rows)
    conn.execute(_UPDATE_STATE, [{f"b_{k}": v for k, v in r.items()} for r in state_rows])
    return first


@functools.cache
def _reserve_offsets_stmt() -> Any:
    stmt = sqlite.insert(topic_offset).values(topic=bindparam("r_topic"),
                                              next_offset=bindparam("r_n"))
    return stmt.on_conflict_do_update(
        index_elements=[topic_offset.c.topic],
        set_={"next_offset": topic_offset.c.next_offset + stmt.excluded.next_offset},
    ).returning(topic_offset.c.next_offset)


_OP_COLUMNS = ("txn_id", "op", "source", "check_times", "created_at")
_FINISH_RANGES = JsonRows("r", [topic_offset.c.topic, Column("n", BigInteger)])
_FINISH_LOG = JsonRows("l", [message_log.c.topic, Column("rel", BigInteger),
                              message_log.c.half_message_id, message_log.c.properties,
                              message_log.c.deliver_at])
_FINISH_OPS = JsonRows("o", [op_log.c[n] for n in _OP_COLUMNS])
_FINISH_STATES = JsonRows("u", [txn.c[n] for n in _STATE_COLUMNS])


@functools.cache
def _record_finishes_stmt() -> Any:
    r, lg = _FINISH_RANGES, _FINISH_LOG
    ranges = postgresql.insert(topic_offset).from_select(
        ["topic", "next_offset"], select(r.col("topic"), r.col("n")).order_by(r.col("topic")))
    reserved = ranges.on_conflict_do_update(
        index_elements=[topic_offset.c.topic],
        set_={"next_offset": topic_offset.c.next_offset + ranges.excluded.next_offset},
    ).returning(topic_offset.c.topic, topic_offset.c.next_offset).cte("reserved")
    logged = insert(message_log).from_select(
        ["topic", "queue_offset", "half_message_id", "properties", "committed_at",
         "deliver_at"],
        select(lg.col("topic"), reserved.c.next_offset - r.col("n") + lg.col("rel"),
               lg.col("half_message_id"), lg.col("properties"),
               bindparam("l_committed_at", type_=message_log.c.committed_at.type),
               lg.col("deliver_at"))
        .join_from(lg.table, reserved, reserved.c.topic == lg.col("topic"))
        .join(r.table, r.col("topic") == lg.col("topic"))).cte("logged")
    opped = insert(op_log).from_select(
        list(_OP_COLUMNS), select(*(_FINISH_OPS.col(n) for n in _OP_COLUMNS))).cte("opped")
    u = _FINISH_STATES
    # the ids again as an array, to the planner: it then reaches the rows by the primary
    # key, where json_to_recordset's fixed estimate (100 rows) made it scan a small table
    changed = (update(txn).where(txn.c.id == u.col("id"), txn.c.id == any_(TXN_IDS))
               .values({**{n: u.col(n) for n in _STATE_COLUMNS[1:]},
                        "lease_owner": None, "lease_until": None})
               .cte("changed"))
    return select(reserved.c.topic, reserved.c.next_offset).add_cte(logged, opped, changed)
