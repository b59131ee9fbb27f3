"""SQL of the half table, op log, check log and committed log (txn, half_message, op_log,
message_log, topic_offset). Every statement on these tables lives here."""

from __future__ import annotations

import binascii
import functools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import orjson
from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    Connection,
    LargeBinary,
    Row,
    Select,
    String,
    Table,
    Text,
    and_,
    any_,
    bindparam,
    cast,
    column,
    exists,
    func,
    insert,
    select,
    tuple_,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite

from app.storage.groups import registered
from app.storage.schema import (
    half_message,
    message_log,
    op_log,
    producer_group,
    topic_offset,
    txn,
)

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


def sends_are_one_statement(dialect_name: str) -> bool:
    """Whether ``store_sends`` writes with one statement (then atomic without BEGIN)."""
    return dialect_name == "postgresql"


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
    for r in result.all():  # one fetch, not one per row
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


def store_sends(conn: Connection, rows: Sequence[Mapping[str, Any]],
                messages: Sequence[Sequence[dict[str, Any]]]) -> dict[Key, int]:
    """Insert new transactions (``rows``) with their messages (``messages[i]`` for
    ``rows[i]``), each only if its producer group is registered and its (group,
    transaction id) is free; the new transactions' ids by key.

    A key left out is either unregistered or taken (a retried send, or an insert racing
    in from another process, which is waited for by ON CONFLICT DO NOTHING): the caller
    tells the two apart. On PostgreSQL the whole batch is one statement.
    """
    if not rows:
        return {}
    if _pg(conn):
        return _store_sends_pg(conn, rows, messages)

    names = registered(conn, {r["producer_group"] for r in rows})
    kept = [i for i, r in enumerate(rows) if r["producer_group"] in names]
    if not kept:
        return {}
    result = conn.execute(_insert_new_txns_stmt(), [rows[i] for i in kept])
    inserted = {(r.producer_group, r.transaction_id): r.id for r in result}
    message_rows: list[dict[str, Any]] = []
    for i in kept:
        key = (rows[i]["producer_group"], rows[i]["transaction_id"])
        if key in inserted:
            message_rows.extend({**m, "txn_id": inserted[key]} for m in messages[i])
    _insert_rows(conn, half_message, message_rows)
    return inserted


@functools.cache
def _insert_new_txns_stmt() -> Any:
    return (sqlite.insert(txn)
            .on_conflict_do_nothing(index_elements=[txn.c.producer_group, txn.c.transaction_id])
            .returning(txn.c.id, txn.c.producer_group, txn.c.transaction_id))


class _JsonRows:
    """A batch of rows passed to PostgreSQL as one JSON parameter, read back with
    ``json_to_recordset``: one statement text (parsed and planned once) serves every batch
    size, and the batch is encoded by orjson in one call instead of one parameter per
    value. Binary columns travel as base64.

    The rows go to orjson as they are: ``json_to_recordset`` takes the columns it names
    and ignores other keys, so no row is copied to fit."""

    def __init__(self, alias: str, columns: Sequence[Column[Any]]) -> None:
        self.alias = alias
        self._binary = {c.name for c in columns if isinstance(c.type, LargeBinary)}
        record = [column(c.name, Text if c.name in self._binary else c.type) for c in columns]
        self.table = func.json_to_recordset(cast(bindparam(alias, type_=Text), JSON)) \
            .table_valued(*record).render_derived(name=alias, with_types=True)

    def col(self, name: str) -> Any:
        c = self.table.c[name]
        return func.decode(c, "base64") if name in self._binary else c

    def param(self, rows: Iterable[Mapping[str, Any]]) -> dict[str, str]:
        rows = rows if isinstance(rows, list) else list(rows)
        return {self.alias: orjson.dumps(rows, default=_base64).decode()}


def _base64(value: Any) -> str:
    """orjson's fallback: bytes (a binary column's value) as base64."""
    if isinstance(value, bytes):
        return binascii.b2a_base64(value, newline=False).decode()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


_SEND_TXN_COLUMNS = ("producer_group", "transaction_id", "state", "fingerprint",
                     "message_count", "check_url", "check_immunity_seconds", "check_times",
                     "next_check_at", "created_at")
_SEND_MESSAGE_COLUMNS = ("message_id", "seq", "topic", "tag", "keys", "properties", "body",
                         "body_is_text", "created_at")


_SEND_TXNS = _JsonRows("t", [txn.c[n] for n in _SEND_TXN_COLUMNS])
# each message row names its transaction by key; the INSERT of the transactions gives it
# its id
_SEND_MESSAGES = _JsonRows("m", [txn.c.producer_group, txn.c.transaction_id,
                                 *(half_message.c[n] for n in _SEND_MESSAGE_COLUMNS)])


@functools.cache
def _store_sends_stmt() -> Select:
    t, m = _SEND_TXNS, _SEND_MESSAGES
    new = (postgresql.insert(txn)
           .from_select(list(_SEND_TXN_COLUMNS), select(*(t.col(n) for n in _SEND_TXN_COLUMNS))
                        .where(exists().where(producer_group.c.name == t.col("producer_group"))))
           .on_conflict_do_nothing(index_elements=[txn.c.producer_group, txn.c.transaction_id])
           .returning(txn.c.id, txn.c.producer_group, txn.c.transaction_id)
           .cte("new"))
    placed = (select(new.c.id, *(m.col(n) for n in _SEND_MESSAGE_COLUMNS))
              .join_from(m.table, new,
                         and_(new.c.producer_group == m.col("producer_group"),
                              new.c.transaction_id == m.col("transaction_id"))))
    stored = insert(half_message).from_select(["txn_id", *_SEND_MESSAGE_COLUMNS],
                                              placed).cte("stored")
    return select(new.c.id, new.c.producer_group, new.c.transaction_id).add_cte(stored)


def _store_sends_pg(conn: Connection, rows: Sequence[Mapping[str, Any]],
                    messages: Sequence[Sequence[dict[str, Any]]]) -> dict[Key, int]:
    keyed = ({**m, "producer_group": r["producer_group"], "transaction_id": r["transaction_id"]}
             for r, ms in zip(rows, messages, strict=True) for m in ms)
    params = {**_SEND_TXNS.param(rows), **_SEND_MESSAGES.param(keyed)}
    return {(r.producer_group, r.transaction_id): r.id
            for r in conn.execute(_store_sends_stmt(), params)}


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


@functools.cache
def _insert_stmt(table: Table) -> Any:
    return insert(table)


def _insert_rows(conn: Connection, table: Table, rows: Sequence[Mapping[str, Any]]) -> None:
    if rows:
        conn.execute(_insert_stmt(table), list(rows))


_STATE_COLUMNS = ("id", "state", "resolved_at", "check_times", "next_check_at")
_UPDATE_STATE = (
    update(txn)
    .where(txn.c.id == bindparam("b_id"))
    .values({**{n: bindparam(f"b_{n}") for n in _STATE_COLUMNS[1:]},
             "lease_owner": None, "lease_until": None})
)


def record_finishes(conn: Connection, counts: Mapping[str, int],
                    log_rows: Sequence[Mapping[str, Any]], op_rows: Sequence[Mapping[str, Any]],
                    state_rows: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Write what a batch of finishes decided, in the caller's transaction; the first
    offset of each topic's range.

    ``counts[topic]`` consecutive offsets are taken from each topic's counter, and each
    committed log row (topic, rel, half_message_id, properties, committed_at) is stored at
    offset first + rel. Then the op log rows, and each transaction's new state (rows of
    id, state, resolved_at, check_times, next_check_at; the lease is cleared). On
    PostgreSQL all of it is one statement.

    A counter row stays locked until the transaction ends, so a later range of a topic
    can only commit after every earlier one: readers never see a gap. Topics are locked
    in sorted order, so concurrent writers cannot deadlock.
    """
    if not state_rows:
        return {}
    if _pg(conn):
        reserved = conn.execute(_record_finishes_stmt(), {
            **_FINISH_RANGES.param({"topic": t, "n": n} for t, n in counts.items()),
            **_FINISH_LOG.param({**r, "n": counts[r["topic"]]} for r in log_rows),
            **_FINISH_OPS.param(op_rows), **_FINISH_STATES.param(state_rows),
            "txn_ids": [r["id"] for r in state_rows]})
        return {r.topic: r.next_offset - counts[r.topic] for r in reserved}
    first: dict[str, int] = {}
    for topic in sorted(counts):
        n = counts[topic]
        first[topic] = conn.execute(_reserve_offsets_stmt(), {"r_topic": topic,
                                                              "r_n": n}).scalar_one() - n
    _insert_rows(conn, message_log, [
        {"topic": r["topic"], "queue_offset": first[r["topic"]] + r["rel"],
         "half_message_id": r["half_message_id"], "properties": r["properties"],
         "committed_at": r["committed_at"]} for r in log_rows])
    _insert_rows(conn, op_log, op_rows)
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
_FINISH_RANGES = _JsonRows("r", [topic_offset.c.topic, Column("n", BigInteger)])
_FINISH_LOG = _JsonRows("l", [message_log.c.topic, Column("n", BigInteger),
                              Column("rel", BigInteger), message_log.c.half_message_id,
                              message_log.c.properties, message_log.c.committed_at])
_FINISH_OPS = _JsonRows("o", [op_log.c[n] for n in _OP_COLUMNS])
_FINISH_STATES = _JsonRows("u", [txn.c[n] for n in _STATE_COLUMNS])


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
        ["topic", "queue_offset", "half_message_id", "properties", "committed_at"],
        select(lg.col("topic"), reserved.c.next_offset - lg.col("n") + lg.col("rel"),
               lg.col("half_message_id"), lg.col("properties"), lg.col("committed_at"))
        .join_from(lg.table, reserved, reserved.c.topic == lg.col("topic"))).cte("logged")
    opped = insert(op_log).from_select(
        list(_OP_COLUMNS), select(*(_FINISH_OPS.col(n) for n in _OP_COLUMNS))).cte("opped")
    u = _FINISH_STATES
    # the ids again as an array, to the planner: it then reaches the rows by the primary
    # key, where json_to_recordset's fixed estimate (100 rows) made it scan a small table
    changed = (update(txn).where(txn.c.id == u.col("id"), txn.c.id == any_(_TXN_IDS))
               .values({**{n: u.col(n) for n in _STATE_COLUMNS[1:]},
                        "lease_owner": None, "lease_until": None})
               .cte("changed"))
    return select(reserved.c.topic, reserved.c.next_offset).add_cte(logged, opped, changed)


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

