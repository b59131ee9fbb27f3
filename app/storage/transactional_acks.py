"""SQL of transactional acks: the offsets a send acknowledges (txn_ack) held by its
transaction until it resolves (``subscription_offset.held_by``), then settled."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

from sqlalchemy import Connection, and_, delete, select, update

from app.storage.bulk import among, insert_rows
from app.storage.dialects import dialect_of
from app.storage.schema import AnyRow, subscription, txn_ack
from app.storage.subscriptions import locking_offsets, so


def states_at(conn: Connection, sub_id: int, offsets: Sequence[int]) -> dict[int, AnyRow]:
    """The offset rows at these offsets, whatever their state, by offset: those no
    transaction holds locked (see ``rows_at``), then the others as they are."""
    at = and_(so.c.subscription_id == sub_id, among(conn, so.c.queue_offset, offsets))
    free = {r.queue_offset: r for r in conn.execute(locking_offsets(dialect_of(conn), (
        select(so).where(at, so.c.held_by.is_(None)).order_by(so.c.queue_offset))))}
    held = conn.execute(select(so).where(at, so.c.queue_offset.not_in(list(free))))
    return {**free, **{r.queue_offset: r for r in held}}


def hold(conn: Connection, sub_id: int, offsets: Sequence[int], txn_id: int) -> None:
    conn.execute(update(so).where(so.c.subscription_id == sub_id,
                                 among(conn, so.c.queue_offset, offsets))
                 .values(held_by=txn_id))


def record_acks(conn: Connection, txn_id: int, sub_id: int, offsets: Sequence[int]) -> None:
    """Keep what a send acknowledges, for as long as its transaction is unresolved."""
    insert_rows(conn, txn_ack, [{"txn_id": txn_id, "subscription_id": sub_id,
                                 "queue_offset": o} for o in offsets])


def recorded_acks(conn: Connection, txn_id: int) -> list[AnyRow]:
    """What the transaction's send acknowledges: (subscription_id, topic, name,
    queue_offset), by subscription and offset; subscriptions deleted since left out."""
    return list(conn.execute(
        select(txn_ack.c.subscription_id, subscription.c.topic, subscription.c.name,
               txn_ack.c.queue_offset)
        .join(subscription, subscription.c.id == txn_ack.c.subscription_id)
        .where(txn_ack.c.txn_id == txn_id)
        .order_by(txn_ack.c.subscription_id, txn_ack.c.queue_offset)))


def forget_acks(conn: Connection, txn_ids: Sequence[int]) -> None:
    """The recorded acks of resolved transactions: not needed any more."""
    if txn_ids:
        conn.execute(delete(txn_ack).where(among(conn, txn_ack.c.txn_id, txn_ids)))


def drop_at(conn: Connection, sub_id: int, offsets: Sequence[int]) -> list[AnyRow]:
    """Acknowledge these offsets, whoever holds them (the caller checked and locked them);
    the (subscription_id, ordering_key) of those that had a key."""
    return _keyed(conn.execute(delete(so).where(so.c.subscription_id == sub_id,
                                                among(conn, so.c.queue_offset, offsets))
                               .returning(so.c.subscription_id, so.c.ordering_key)))


def _keyed(rows: Iterable[AnyRow]) -> list[AnyRow]:
    return [r for r in rows if r.ordering_key is not None]


def holders(conn: Connection, txn_ids: Sequence[int]) -> list[str]:
    """The topics of the subscriptions where these transactions hold offsets."""
    ids = select(so.c.subscription_id).where(among(conn, so.c.held_by, txn_ids)).distinct()
    return list(conn.execute(select(subscription.c.topic).distinct()
                             .where(subscription.c.id.in_(ids))).scalars())


def settle(conn: Connection, txn_ids: Sequence[int], now: datetime, *, commit: bool
           ) -> list[AnyRow]:
    """What these transactions hold: acknowledged (their commit: the rows go) or released,
    deliverable from ``now`` (their rollback or discard). For a commit, the
    (subscription_id, ordering_key) of the rows acknowledged that had a key."""
    held = among(conn, so.c.held_by, txn_ids)
    if commit:
        return _keyed(conn.execute(delete(so).where(held)
                                   .returning(so.c.subscription_id, so.c.ordering_key)))
    conn.execute(update(so).where(held).values(held_by=None, leased_until=None, next_at=now))
    return []


def topics_of(conn: Connection, sub_ids: Iterable[int]) -> dict[int, str]:
    ids = sorted(set(sub_ids))
    return {r.id: r.topic for r in conn.execute(
        select(subscription.c.id, subscription.c.topic).where(among(conn, subscription.c.id, ids)))}
