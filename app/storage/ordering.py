"""SQL of ordering keys on key_shared subscriptions: which keys have a message open, a
key's next message made deliverable once the one before it is acknowledged, and what a
change of type does to the rows.

Of a key's offset rows only the lowest is ever deliverable: the others wait with
``next_at`` NULL, outside the due index, so a receive never reads them. A key's rows are
found through ``ix_subscription_offset_key`` (subscription, key, offset), one probe per
key, whatever the backlog.

A receive that decides a new message's key has nothing open and an ack that frees the
key take turns on the key (``Dialect.take_turns_on``, one name per key, each taking its
names in one sorted call): either the ack's promotion, a statement after the turn, sees
the message the receive added waiting, or the receive's look, after the turn, sees the
ack's delete."""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from sqlalchemy import (
    Connection,
    String,
    exists,
    func,
    literal,
    or_,
    select,
    update,
)
from sqlalchemy.dialects import postgresql

from app.storage.dialects import dialect_of
from app.storage.subscriptions import (
    deliverable_from,
    has_lower_of_its_key,
    promote_key_heads,
    so,
)


def _names(keys: Iterable[str]) -> list[int]:
    """The keys as 32-bit names to take turns on, sorted (collisions only make two keys
    take turns needlessly)."""
    return sorted({zlib.crc32(k.encode()) - 2**31 for k in keys})


def take_turns(conn: Connection, sub_id: int, keys: Iterable[str]) -> None:
    """Take turns on these keys of the subscription until the transaction ends: one call
    per transaction, so that two writers never wait on each other's keys in a cycle."""
    dialect_of(conn).take_turns_on(conn, sub_id, _names(keys))


def _keys_table(keys: list[str]) -> Any:
    """The keys as a table of one column ``k``: one array parameter (``unnest``)."""
    return func.unnest(literal(keys, postgresql.ARRAY(String))).table_valued("k").render_derived()


def open_keys(conn: Connection, sub_id: int, keys: Iterable[str]) -> set[str]:
    """The keys among these that have an offset row (a message not acknowledged): one
    probe of the key index per key where the keys are one array; elsewhere (a database in
    this process) the keys' rows read through the same index."""
    wanted = sorted(set(keys))
    if not wanted:
        return set()
    if not dialect_of(conn).arrays:
        return set(conn.execute(select(so.c.ordering_key).distinct().where(
            so.c.subscription_id == sub_id, so.c.ordering_key.in_(wanted))).scalars())
    table = _keys_table(wanted)
    stmt = select(table.c.k).where(exists(select(so.c.queue_offset).where(
        so.c.subscription_id == sub_id, so.c.ordering_key == table.c.k)))
    return set(conn.execute(stmt).scalars())


def promote(conn: Connection, sub_id: int, topic: str, keys: Iterable[str],
            now: datetime) -> int:
    """Each key's lowest row, when it waits, made deliverable (at its delivery time if
    later): the message after one acknowledged or dead-lettered. How many."""
    wanted = sorted(set(keys))
    if not wanted:
        return 0
    if dialect_of(conn).arrays:
        table = _keys_table(wanted)
        lowest = (select(so.c.queue_offset).where(so.c.subscription_id == sub_id,
                                                   so.c.ordering_key == table.c.k)
                  .order_by(so.c.queue_offset).limit(1).scalar_subquery())
        heads: Any = select(lowest).select_from(table)
    else:
        heads = (select(func.min(so.c.queue_offset))
                 .where(so.c.subscription_id == sub_id, so.c.ordering_key.in_(wanted))
                 .group_by(so.c.ordering_key))
    return int(conn.execute(
        update(so).where(so.c.subscription_id == sub_id, so.c.queue_offset.in_(heads),
                         so.c.next_at.is_(None), so.c.held_by.is_(None))
        .values(next_at=deliverable_from(topic, now))).rowcount)


def waiting(conn: Connection, sub_id: int) -> int:
    """Messages waiting behind an earlier one of their key."""
    return int(conn.execute(select(func.count()).where(
        so.c.subscription_id == sub_id, so.c.next_at.is_(None),
        so.c.held_by.is_(None))).scalar_one())


def order_by_keys(conn: Connection, sub_id: int, topic: str, now: datetime) -> None:
    """The rows of a subscription that becomes key_shared, or was reset (nothing leased):
    each key's lowest row deliverable, the others waiting."""
    conn.execute(update(so).where(so.c.subscription_id == sub_id, so.c.held_by.is_(None),
                                  so.c.ordering_key.is_not(None), has_lower_of_its_key(),
                                  or_(so.c.leased_until.is_(None), so.c.leased_until <= now))
                 .values(next_at=None))
    promote_key_heads(conn, sub_id, topic, now)


def release_waiting(conn: Connection, sub_id: int, topic: str, now: datetime) -> None:
    """The rows of a subscription that stops being key_shared: none waits any more."""
    conn.execute(update(so).where(so.c.subscription_id == sub_id, so.c.next_at.is_(None),
                                  so.c.held_by.is_(None))
                 .values(next_at=deliverable_from(topic, now)))
