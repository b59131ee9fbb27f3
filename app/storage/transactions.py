"""SQL of transactions and their half messages (txn, half_message, op_log): sends (new
transactions with their messages), and every read of them: by key, by group and state,
newest first (the dashboard's, bounded by an index), with their messages and offsets.

The rows of a send are built here from what the domain decided (``NewTransaction``), so
that the domain never spells a column name. Finishing them: ``finishes``.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Iterable, Sequence
from datetime import datetime
from typing import Any, NamedTuple, Protocol

import orjson
from sqlalchemy import Column, Text, and_, exists, func, insert, select, text, tuple_, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection

from app.storage.bulk import KEYS, JsonRows, Key, by_txn_ids, insert_rows, is_pg, key_params
from app.storage.groups import registered
from app.storage.schema import (
    PREPARED_PREDICATE,
    AnyRow,
    AnySelect,
    half_message,
    message_log,
    op_log,
    producer_group,
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


# a half message without its body: its size, and the first bytes when asked
BODILESS_COLUMNS = (
    half_message.c.id, half_message.c.txn_id, half_message.c.seq, half_message.c.message_id,
    half_message.c.topic, half_message.c.tag, half_message.c["keys"], half_message.c.properties,
    half_message.c.body_is_text, half_message.c.created_at,
    func.length(half_message.c.body).label("size"),
)


class OutgoingMessage(Protocol):
    """What is stored of a message to send (``app.domain.messages.MessageIn``)."""

    @property
    def topic(self) -> str: ...
    @property
    def tag(self) -> str | None: ...
    @property
    def keys(self) -> list[str]: ...
    @property
    def properties(self) -> dict[str, str]: ...
    @property
    def body(self) -> str | None: ...
    @property
    def raw_body(self) -> bytes: ...
    @property
    def body_is_text(self) -> bool: ...
    @property
    def deliver_after_ms(self) -> int | None: ...
    @property
    def deliver_at(self) -> datetime | None: ...


class NewTransaction(NamedTuple):
    """A transaction to store, PREPARED, unchecked; ``message_ids[i]`` names ``messages[i]``."""

    group: str
    transaction_id: str
    fingerprint: str
    check_url: str | None
    check_immunity_seconds: int
    next_check_at: datetime
    created_at: datetime
    messages: Sequence[OutgoingMessage]
    message_ids: Sequence[str]
    # its half_message rows as ``encoded_messages`` gave them (None: built when stored)
    encoded: bytes | None = None


def sends_are_one_statement(dialect_name: str) -> bool:
    """Whether ``store_sends`` writes with one statement (then atomic without BEGIN)."""
    return dialect_name == "postgresql"


def store_sends(conn: Connection, sends: Sequence[NewTransaction]) -> dict[Key, int]:
    """Insert new transactions with their messages, each only if its producer group is
    registered and its (group, transaction id) is free; the new transactions' ids by key.

    A key left out is either unregistered or taken (a retried send, or an insert racing
    in from another process, which is waited for by ON CONFLICT DO NOTHING): the caller
    tells the two apart. On PostgreSQL the whole batch is one statement.
    """
    if not sends:
        return {}
    if is_pg(conn):
        return _store_sends_pg(conn, sends)

    names = registered(conn, {s.group for s in sends})
    kept = [s for s in sends if s.group in names]
    if not kept:
        return {}
    result = conn.execute(_insert_new_txns_stmt(), [_txn_row(s) for s in kept])
    inserted = {(r.producer_group, r.transaction_id): r.id for r in result}
    message_rows: list[dict[str, Any]] = []
    for s in kept:
        txn_id = inserted.get((s.group, s.transaction_id))
        if txn_id is not None:
            message_rows.extend(_message_rows(s.messages, s.message_ids,
                                              {"txn_id": txn_id, "created_at": s.created_at}))
    insert_rows(conn, half_message, message_rows)
    return inserted


def encoded_messages(dialect_name: str, group: str, transaction_id: str,
                     messages: Sequence[OutgoingMessage], message_ids: Sequence[str]
                     ) -> bytes | None:
    """A send's half_message rows as ``store_sends`` hands them to PostgreSQL (None on
    SQLite, which inserts rows), built ahead: while its request is handled, not in the
    writer that every send of a batch waits for. The batch's time is added there."""
    if dialect_name != "postgresql":
        return None
    return _encode_messages(group, transaction_id, messages, message_ids)


def _encode_messages(group: str, transaction_id: str, messages: Sequence[OutgoingMessage],
                     message_ids: Sequence[str]) -> bytes:
    return _SEND_MESSAGES.encode(_message_rows(
        messages, message_ids, {"producer_group": group, "transaction_id": transaction_id},
        for_json=True))


def _txn_row(s: NewTransaction) -> dict[str, Any]:
    return {"producer_group": s.group, "transaction_id": s.transaction_id,
            "state": State.PREPARED.value, "fingerprint": s.fingerprint,
            "message_count": len(s.messages), "check_url": s.check_url,
            "check_immunity_seconds": s.check_immunity_seconds, "check_times": 0,
            "next_check_at": s.next_check_at, "created_at": s.created_at}


def _message_rows(messages: Sequence[OutgoingMessage], ids: Sequence[str],
                  owner: dict[str, Any], for_json: bool = False) -> list[dict[str, Any]]:
    """The half_message rows of a send; ``owner`` names the transaction (by id and time,
    or by key on PostgreSQL, where the same statement inserts it and gives its time).

    ``for_json``: rows of a JSON batch, where an absent key reads as NULL: a message
    without a delay has no delay keys, so that those cost nothing, and a text body of
    ASCII without NUL travels as it is (``body_text``), not as base64 of its bytes:
    ASCII is the same bytes in every server encoding, and a JSON string of NUL is not a
    PostgreSQL text."""
    rows: list[dict[str, Any]] = [
        {"message_id": ids[seq], "seq": seq, "topic": m.topic, "tag": m.tag,
         "keys": orjson.dumps(m.keys).decode(), "properties": orjson.dumps(m.properties).decode(),
         "body_is_text": m.body_is_text}
        for seq, m in enumerate(messages)]
    for row, m in zip(rows, messages, strict=True):
        row.update(owner)
        body = m.body
        if not for_json or body is None or not body.isascii() or "\x00" in body:
            row["body"] = m.raw_body
        else:
            row["body_text"] = body
        if not for_json or m.deliver_after_ms is not None or m.deliver_at is not None:
            row["deliver_after_ms"] = m.deliver_after_ms
            row["deliver_at"] = m.deliver_at
    return rows


@functools.cache
def _insert_new_txns_stmt() -> Any:
    return (sqlite.insert(txn)
            .on_conflict_do_nothing(index_elements=[txn.c.producer_group, txn.c.transaction_id])
            .returning(txn.c.id, txn.c.producer_group, txn.c.transaction_id))


_SEND_TXN_COLUMNS = ("producer_group", "transaction_id", "state", "fingerprint",
                     "message_count", "check_url", "check_immunity_seconds", "check_times",
                     "next_check_at", "created_at")
_SEND_MESSAGE_COLUMNS = ("message_id", "seq", "topic", "tag", "keys", "properties", "body",
                         "body_is_text", "created_at", "deliver_after_ms", "deliver_at")

_SEND_TXNS = JsonRows("t", [txn.c[n] for n in _SEND_TXN_COLUMNS])
# each message row names its transaction by key; the INSERT of the transactions gives it
# its id
_SEND_MESSAGES = JsonRows("m", [txn.c.producer_group, txn.c.transaction_id,
                                *(half_message.c[n] for n in _SEND_MESSAGE_COLUMNS
                                  if n != "created_at"), Column("body_text", Text)])


@functools.cache
def _store_sends_stmt() -> AnySelect:
    t, m = _SEND_TXNS, _SEND_MESSAGES
    new = (postgresql.insert(txn)
           .from_select(list(_SEND_TXN_COLUMNS), select(*(t.col(n) for n in _SEND_TXN_COLUMNS))
                        .where(exists().where(producer_group.c.name == t.col("producer_group"))))
           .on_conflict_do_nothing(index_elements=[txn.c.producer_group, txn.c.transaction_id])
           .returning(txn.c.id, txn.c.producer_group, txn.c.transaction_id,
                      txn.c.created_at)
           .cte("new"))
    # a message's time is its transaction's, not a key of every row
    body = func.coalesce(m.col("body"), func.convert_to(m.col("body_text"), "UTF8"))
    placed = (select(new.c.id, *(new.c.created_at if n == "created_at" else
                                 body if n == "body" else m.col(n)
                                 for n in _SEND_MESSAGE_COLUMNS))
              .join_from(m.table, new,
                         and_(new.c.producer_group == m.col("producer_group"),
                              new.c.transaction_id == m.col("transaction_id"))))
    stored = insert(half_message).from_select(["txn_id", *_SEND_MESSAGE_COLUMNS],
                                              placed).cte("stored")
    return select(new.c.id, new.c.producer_group, new.c.transaction_id).add_cte(stored)


def _store_sends_pg(conn: Connection, sends: Sequence[NewTransaction]) -> dict[Key, int]:
    messages = _SEND_MESSAGES.joined(
        s.encoded if s.encoded is not None
        else _encode_messages(s.group, s.transaction_id, s.messages, s.message_ids)
        for s in sends)
    params = {**_SEND_TXNS.param([_txn_row(s) for s in sends]), **messages}
    return {(r.producer_group, r.transaction_id): r.id
            for r in conn.execute(_store_sends_stmt(), params)}


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
