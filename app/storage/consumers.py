"""SQL of a subscription's named consumers (``subscription_consumer``): when each was
last seen, and the leases each holds (``subscription_offset.consumer``)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Connection, delete, func, literal, select, update

from app.storage.bulk import dialect_insert
from app.storage.schema import NAME, AnyRow, UTCDateTime, subscription, subscription_consumer
from app.storage.subscriptions import so

sc = subscription_consumer


def seen(conn: Connection, sub_id: int, name: str, now: datetime) -> None:
    stmt = dialect_insert(conn, sc).values(subscription_id=sub_id, name=name, last_seen=now)
    conn.execute(stmt.on_conflict_do_update(index_elements=["subscription_id", "name"],
                                            set_={"last_seen": stmt.excluded.last_seen}))


def seen_by_name(conn: Connection, topic: str, sub_name: str, name: str,
                 now: datetime) -> None:
    """``seen`` on the subscription of this name (none: nothing)."""
    stmt = dialect_insert(conn, sc).from_select(
        ["subscription_id", "name", "last_seen"],
        select(subscription.c.id, literal(name, NAME), literal(now, UTCDateTime()))
        .where(subscription.c.topic == topic, subscription.c.name == sub_name))
    conn.execute(stmt.on_conflict_do_update(index_elements=["subscription_id", "name"],
                                            set_={"last_seen": stmt.excluded.last_seen}))


def last_seen(conn: Connection, sub_id: int, name: str) -> datetime | None:
    return conn.execute(select(sc.c.last_seen).where(sc.c.subscription_id == sub_id,
                                                     sc.c.name == name)).scalar_one_or_none()


def alive(conn: Connection, sub_id: int, since: datetime) -> list[AnyRow]:
    """The consumers seen since then, by name: (name, last_seen)."""
    return list(conn.execute(select(sc.c.name, sc.c.last_seen)
                             .where(sc.c.subscription_id == sub_id, sc.c.last_seen >= since)
                             .order_by(sc.c.name)))


def seen_since(conn: Connection, since: datetime) -> list[AnyRow]:
    """Every consumer seen since then, of any subscription: (topic, name (of the
    subscription), consumer_timeout_ms, last_seen); whether each is alive is its own
    subscription's timeout, compared by the caller (portable: no interval arithmetic)."""
    return list(conn.execute(
        select(subscription.c.topic, subscription.c.name, subscription.c.consumer_timeout_ms,
               sc.c.last_seen)
        .select_from(sc.join(subscription, subscription.c.id == sc.c.subscription_id))
        .where(sc.c.last_seen >= since)))


def remove(conn: Connection, sub_id: int, name: str) -> None:
    conn.execute(delete(sc).where(sc.c.subscription_id == sub_id, sc.c.name == name))


def remove_all(conn: Connection, sub_id: int) -> None:
    conn.execute(delete(sc).where(sc.c.subscription_id == sub_id))


def release(conn: Connection, sub_id: int, name: str, now: datetime) -> int:
    """The leases the consumer holds given back, deliverable now (its deliveries
    counted); how many. Offsets a transaction holds stay held."""
    return int(conn.execute(
        update(so).where(so.c.subscription_id == sub_id, so.c.consumer == name,
                         so.c.held_by.is_(None), so.c.leased_until > now)
        .values(leased_until=None, next_at=now, consumer=None)).rowcount)


def in_flight(conn: Connection, sub_id: int, now: datetime) -> dict[str, int]:
    """Leases held now, by consumer name."""
    return {r.consumer: int(r.n) for r in conn.execute(
        select(so.c.consumer, func.count().label("n"))
        .where(so.c.subscription_id == sub_id, so.c.leased_until > now,
               so.c.consumer.is_not(None))
        .group_by(so.c.consumer))}


def gone(conn: Connection, sub_id: int, before: datetime) -> list[str]:
    """The consumers last seen before then (no longer alive)."""
    return list(conn.execute(select(sc.c.name).where(sc.c.subscription_id == sub_id,
                                                     sc.c.last_seen < before)).scalars())
