"""SQL of acks, nacks and renews: they lock only the offset rows they change, in offset
order and never a row a transaction holds (``app.storage.subscriptions``)."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, Connection, and_, any_, bindparam, delete, func, select, update
from sqlalchemy.dialects import postgresql

from app.storage.bulk import among
from app.storage.dialects import Dialect, dialect_of
from app.storage.schema import AnyRow, subscription
from app.storage.subscriptions import get, locking_offsets, so

_RESCHEDULE = (update(so)
               .where(so.c.subscription_id == bindparam("b_sub"),
                      so.c.queue_offset == bindparam("b_offset"))
               .values(leased_until=bindparam("b_until"), next_at=bindparam("b_next")))


def reschedule(conn: Connection, sub_id: int,
               changes: Iterable[tuple[int, datetime | None, datetime | None]]) -> None:
    """Set each (offset, leased until, next deliverable time)."""
    params = [{"b_sub": sub_id, "b_offset": o, "b_until": u, "b_next": n} for o, u, n in changes]
    if params:
        conn.execute(_RESCHEDULE, params)


def rows_at(conn: Connection, sub_id: int, offsets: Iterable[int]) -> list[AnyRow]:
    """The offset rows at these offsets (not acknowledged) that no transaction holds,
    lowest first, locked.

    Every writer of offset rows but the settling of held ones locks them this way, in
    offset order and never a held row, so two writers cannot deadlock, and a finish batch
    that settles held rows never waits for one."""
    wanted = sorted(set(offsets))
    if not wanted:
        return []
    return list(conn.execute(locking_offsets(dialect_of(conn), (
        select(so).where(so.c.subscription_id == sub_id, so.c.held_by.is_(None),
                         _at_these(conn, wanted)).order_by(so.c.queue_offset)))))


def _at(first: Any, last: Any, listed: Any) -> Any:
    """At the offsets ``listed`` (a condition), also bounded by the first and the last: a
    range the planner takes for the primary key's index without statistics, where the
    list alone let it read every row of the subscription."""
    return and_(so.c.queue_offset.between(first, last), listed)


def _at_these(conn: Connection, wanted: Sequence[int]) -> Any:
    """``_at`` these offsets (sorted)."""
    return _at(wanted[0], wanted[-1], among(conn, so.c.queue_offset, wanted))


def acknowledge(conn: Connection, sub_id: int, offsets: Iterable[int]) -> int:
    """Acknowledge these offsets (only those no transaction holds): delete their rows; how
    many were not acknowledged before. One statement, whose subquery locks the rows as
    ``rows_at`` does."""
    wanted = sorted(set(offsets))
    if not wanted:
        return 0
    return int(conn.execute(_acknowledging(dialect_of(conn), sub_id,
                                           _at_these(conn, wanted))).rowcount)


def acknowledge_keyed(conn: Connection, sub_id: int, offsets: Iterable[int]
                      ) -> tuple[int, list[str]]:
    """``acknowledge`` on a key_shared subscription: only delivered rows (not those waiting
    behind their key, never delivered); how many, and the ordering keys of those
    acknowledged (each key's next message is due to be promoted)."""
    wanted = sorted(set(offsets))
    if not wanted:
        return 0, []
    # delivered ones: ``deliveries``, not ``next_at IS NOT NULL``, which is the due index's
    # predicate and took the planner to it, over every row of the subscription
    gone = list(conn.execute(_acknowledging(dialect_of(conn), sub_id, and_(
        _at_these(conn, wanted), so.c.deliveries > 0)).returning(so.c.ordering_key)
    ).scalars())
    return len(gone), [k for k in gone if k is not None]


def acknowledge_through(conn: Connection, sub_id: int, through: int) -> tuple[int, list[str]]:
    """Acknowledge every offset up to ``through`` that no transaction holds; how many were
    not acknowledged before, and their ordering keys."""
    gone = list(conn.execute(_acknowledging(dialect_of(conn), sub_id,
                                            so.c.queue_offset <= through)
                             .returning(so.c.ordering_key)).scalars())
    return len(gone), [k for k in gone if k is not None]


def held_through(conn: Connection, sub_id: int, through: int) -> int | None:
    """The lowest offset up to ``through`` that an unresolved transaction holds."""
    return conn.execute(select(func.min(so.c.queue_offset)).where(
        so.c.subscription_id == sub_id, so.c.held_by.is_not(None),
        so.c.queue_offset <= through)).scalar_one_or_none()


def _acknowledging(dialect: Dialect, sub_id: Any, at: Any) -> Any:
    """The delete of the offset rows ``at`` (a condition)."""
    free = and_(so.c.subscription_id == sub_id, so.c.held_by.is_(None))
    locked = locking_offsets(dialect, select(so.c.queue_offset).where(free, at)
                             .order_by(so.c.queue_offset))
    return delete(so).where(free, so.c.queue_offset.in_(locked))


def acknowledge_named(conn: Connection, topic: str, name: str, offsets: Iterable[int],
                      *, unless_type: str) -> tuple[AnyRow | None, int]:
    """``acknowledge`` on the subscription of this name, unless it is of type
    ``unless_type``: its row as it was (None if there is none) and how many offsets were
    newly acknowledged (0 when of that type: the caller acknowledges its way). On
    PostgreSQL one statement (the lookup and the delete together)."""
    wanted = sorted(set(offsets))
    dialect = dialect_of(conn)
    if not dialect.one_statement_acks or not wanted:
        sub = get(conn, topic, name)
        if sub is None or sub.type == unless_type:
            return sub, 0
        return sub, acknowledge(conn, sub.id, wanted)
    row = conn.execute(_acknowledge_named_stmt(dialect), {
        "a_topic": topic, "a_name": name, "a_first": wanted[0], "a_last": wanted[-1],
        "a_offsets": wanted, "a_unless": unless_type}).first()
    return (None, 0) if row is None else (row, int(row.acked))


@functools.cache
def _acknowledge_named_stmt(dialect: Dialect) -> Any:
    """Built once: an ack's statement built anew cost more of the service's CPU than its
    execution (about 0.3 ms, most of it SQLAlchemy's cache key of the new statement)."""
    named = and_(subscription.c.topic == bindparam("a_topic"),
                 subscription.c.name == bindparam("a_name"))
    sub_id = (select(subscription.c.id).where(named, subscription.c.type != bindparam("a_unless"))
              .scalar_subquery())
    at = _at(bindparam("a_first"), bindparam("a_last"), so.c.queue_offset == any_(
        bindparam("a_offsets", type_=postgresql.ARRAY(BigInteger))))
    gone = _acknowledging(dialect, sub_id, at).returning(so.c.queue_offset).cte("gone")
    return select(subscription, select(func.count()).select_from(gone)
                  .scalar_subquery().label("acked")).where(named)
