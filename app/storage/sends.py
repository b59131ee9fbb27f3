"""SQL of sends: new transactions with their half messages (txn, half_message), inserted
only while their producer group is registered and their key is free; on PostgreSQL a
whole batch of sends is one statement, its message rows one JSON array (their bodies
one binary array beside).

The rows are built here from what the domain decided (``NewTransaction``), so that the
domain never spells a column name. Reading them: ``transactions``; finishing them:
``finishes``."""

from __future__ import annotations

import functools
from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any, NamedTuple, Protocol

import orjson
from sqlalchemy import Connection, Engine, and_, exists, insert, select, tuple_
from sqlalchemy.dialects import postgresql, sqlite

from app.storage.bulk import Encoded, JsonRows, Key, insert_rows
from app.storage.dialects import dialect_of
from app.storage.groups import registered
from app.storage.schema import AnySelect, forgotten_txn, half_message, producer_group, txn
from app.vocabulary import State


class OutgoingMessage(Protocol):
    """What is stored of a message to send (``app.domain.messages.MessageIn``)."""

    @property
    def topic(self) -> str: ...
    @property
    def tag(self) -> str | None: ...
    @property
    def ordering_key(self) -> str | None: ...
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
    encoded: Encoded | None = None


def sends_are_one_statement(engine: Engine) -> bool:
    """Whether ``store_sends`` writes with one statement (then atomic without BEGIN)."""
    return dialect_of(engine).one_statement_sends


def store_sends(conn: Connection, sends: Sequence[NewTransaction]) -> dict[Key, int]:
    """Insert new transactions with their messages, each only if its producer group is
    registered and its (group, transaction id) is free: neither taken nor forgotten by
    retention (``forgotten_txn``); the new transactions' ids by key.

    A key left out is unregistered, taken (a retried send, or an insert racing in from
    another process, which is waited for by ON CONFLICT DO NOTHING) or forgotten: the
    caller tells them apart. On PostgreSQL the whole batch is one statement, which looks
    a key up among the forgotten ones by the primary key, for new keys only.
    """
    if not sends:
        return {}
    if dialect_of(conn).one_statement_sends:
        return _store_sends_pg(conn, sends)

    names = registered(conn, {s.group for s in sends})
    kept = [s for s in sends if s.group in names]
    if kept:  # SQLite's writers take turns: nobody forgets a transaction meanwhile
        gone = forgotten(conn, [(s.group, s.transaction_id) for s in kept])
        kept = [s for s in kept if (s.group, s.transaction_id) not in gone]
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


def encoded_messages(engine: Engine, group: str, transaction_id: str,
                     messages: Sequence[OutgoingMessage], message_ids: Sequence[str]
                     ) -> Encoded | None:
    """A send's half_message rows as ``store_sends`` hands them to PostgreSQL (None on
    SQLite, which inserts rows), built ahead: while its request is handled, not in the
    writer that every send of a batch waits for. The batch's time is added there."""
    if not dialect_of(engine).one_statement_sends:
        return None
    return _encode_messages(group, transaction_id, messages, message_ids)


def _encode_messages(group: str, transaction_id: str, messages: Sequence[OutgoingMessage],
                     message_ids: Sequence[str]) -> Encoded:
    """The rows as JSON, their bodies beside (``JsonRows``)."""
    return _SEND_MESSAGES.encode(_message_rows(
        messages, message_ids, {"producer_group": group, "transaction_id": transaction_id},
        for_json=True), [[m.raw_body for m in messages]])


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
    without a delay or an ordering key has no such keys, so that those cost nothing, and
    no row has its body, which travels beside the rows (``JsonRows``)."""
    rows: list[dict[str, Any]] = [
        {"message_id": ids[seq], "seq": seq, "topic": m.topic, "tag": m.tag,
         "keys": orjson.dumps(m.keys).decode(), "properties": orjson.dumps(m.properties).decode(),
         "body_is_text": m.body_is_text}
        for seq, m in enumerate(messages)]
    for row, m in zip(rows, messages, strict=True):
        row.update(owner)
        if not for_json:
            row["body"] = m.raw_body
        if not for_json or m.deliver_after_ms is not None or m.deliver_at is not None:
            row["deliver_after_ms"] = m.deliver_after_ms
            row["deliver_at"] = m.deliver_at
        if not for_json or m.ordering_key is not None:
            row["ordering_key"] = m.ordering_key
    return rows


@functools.cache
def _insert_new_txns_stmt() -> Any:
    return (sqlite.insert(txn)
            .on_conflict_do_nothing(index_elements=[txn.c.producer_group, txn.c.transaction_id])
            .returning(txn.c.id, txn.c.producer_group, txn.c.transaction_id))


_SEND_TXN_COLUMNS = ("producer_group", "transaction_id", "state", "fingerprint",
                     "message_count", "check_url", "check_immunity_seconds", "check_times",
                     "next_check_at", "created_at")
_SEND_MESSAGE_COLUMNS = ("message_id", "seq", "topic", "tag", "ordering_key", "keys",
                         "properties", "body", "body_is_text", "created_at", "deliver_after_ms", "deliver_at")

_SEND_TXNS = JsonRows("t", [txn.c[n] for n in _SEND_TXN_COLUMNS])
# each message row names its transaction by key; the INSERT of the transactions gives it
# its id; the bodies travel beside the rows, in their order (``_encode_messages``)
_SEND_MESSAGES = JsonRows("m", [txn.c.producer_group, txn.c.transaction_id,
                                *(half_message.c[n] for n in _SEND_MESSAGE_COLUMNS
                                  if n != "created_at")])


@functools.cache
def _store_sends_stmt() -> AnySelect:
    t, m = _SEND_TXNS, _SEND_MESSAGES
    new = (postgresql.insert(txn)
           .from_select(list(_SEND_TXN_COLUMNS), select(*(t.col(n) for n in _SEND_TXN_COLUMNS))
                        .where(exists().where(producer_group.c.name == t.col("producer_group")),
                               ~exists().where(
                                   forgotten_txn.c.producer_group == t.col("producer_group"),
                                   forgotten_txn.c.transaction_id == t.col("transaction_id"))))
           .on_conflict_do_nothing(index_elements=[txn.c.producer_group, txn.c.transaction_id])
           .returning(txn.c.id, txn.c.producer_group, txn.c.transaction_id,
                      txn.c.created_at)
           .cte("new"))
    # a message's time is its transaction's, not a key of every row
    placed = (select(new.c.id, *(new.c.created_at if n == "created_at" else m.col(n)
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


def forgotten(conn: Connection, keys: Collection[Key]) -> set[Key]:
    """Those of ``keys`` whose transactions retention deleted (``forgotten_txn``)."""
    if not keys:
        return set()
    stmt = select(forgotten_txn.c.producer_group, forgotten_txn.c.transaction_id).where(
        tuple_(forgotten_txn.c.producer_group, forgotten_txn.c.transaction_id).in_(
            sorted(set(keys))))
    return {(g, x) for g, x in conn.execute(stmt)}
