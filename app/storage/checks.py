"""SQL of the check service: finding due transactions, leasing them, recording checks.

A checker claims a due transaction by writing its ``lease_owner`` and pushing
``next_check_at`` (and ``lease_until``) to the end of the lease, so the due query is
only "PREPARED and ``next_check_at <= now``" on the partial index ``ix_txn_due``:
its cost does not grow with resolved history, and a lease whose owner died simply
becomes due again. On PostgreSQL, claims skip rows another checker has locked
(``FOR UPDATE SKIP LOCKED``); on SQLite the claim runs under ``BEGIN IMMEDIATE``.
A check is recorded only by the checker that holds the lease and only for the check
number that follows the stored one, so one check is never counted twice.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from datetime import datetime

import orjson
from sqlalchemy import (
    Connection,
    and_,
    bindparam,
    func,
    insert,
    literal_column,
    or_,
    select,
    update,
)

from app.storage.schema import AnyRow, check_log, op_log, producer_group, signing_secret, txn
from app.vocabulary import RESOLVED, Op, State

# A literal, not a bound parameter: both planners match a partial index only against
# the literal predicate of its definition (``schema.PREPARED_PREDICATE``).
_PREPARED = txn.c.state == literal_column(f"'{State.PREPARED.value}'")
# States an API commit or rollback may have set while a check was in flight.
_RESOLVED_STATES = sorted(s.value for s in RESOLVED)
DETAIL_MAX_CHARS = 2000


def any_due(conn: Connection, now: datetime) -> bool:
    """Whether some transaction is due (a cheap read before taking a write lock)."""
    stmt = select(txn.c.id).where(_PREPARED, txn.c.next_check_at <= now).limit(1)
    return conn.execute(stmt).first() is not None


def lock_due(conn: Connection, now: datetime, limit: int,
             skip_groups: Collection[str] = ()) -> list[AnyRow]:
    """Up to ``limit`` due transactions, oldest due first, locked until the caller's commit,
    none of the producer groups in ``skip_groups`` (those at their cap of checks in flight).

    Each row carries the producer group's registration (``group_urls`` as decoded by
    ``group_urls``, ``check_timeout_ms``), NULL when the group was deleted; its signing
    secret (``secret``, ``previous_secret``, ``previous_expires_at``), NULL if it has none.
    """
    stmt = (
        select(txn.c.id, txn.c.producer_group, txn.c.transaction_id, txn.c.check_times,
               txn.c.check_url, txn.c.created_at,
               producer_group.c.check_urls.label("group_urls"),
               producer_group.c.check_timeout_ms,
               signing_secret.c.secret, signing_secret.c.previous_secret,
               signing_secret.c.previous_expires_at)
        .select_from(
            txn.outerjoin(producer_group, producer_group.c.name == txn.c.producer_group)
            .outerjoin(signing_secret, signing_secret.c.producer_group == txn.c.producer_group))
        .where(_PREPARED, txn.c.next_check_at <= now)
        .order_by(txn.c.next_check_at)
        .limit(limit)
        .with_for_update(of=txn, skip_locked=True)
    )
    if skip_groups:
        stmt = stmt.where(txn.c.producer_group.not_in(sorted(skip_groups)))
    return list(conn.execute(stmt))


def group_urls(row: AnyRow) -> list[str]:
    return orjson.loads(row.group_urls) if row.group_urls is not None else []


_TAKE_LEASE = (
    update(txn)
    .where(txn.c.id == bindparam("b_id"))
    .values(lease_owner=bindparam("b_owner"), lease_until=bindparam("b_until"),
            next_check_at=bindparam("b_until"))
)


def take_leases(conn: Connection, owner: str, leases: Mapping[int, datetime]) -> None:
    """Lease rows locked by ``lock_due`` (same transaction) to ``owner`` until the given times."""
    if leases:
        conn.execute(_TAKE_LEASE, [{"b_id": i, "b_owner": owner, "b_until": until}
                                   for i, until in leases.items()])


def lease_state(conn: Connection, txn_id: int) -> AnyRow | None:
    """State, check count and lease of one transaction (read just before a delivery), and
    ``round_id``: the op id of its latest resume-check (NULL if none)."""
    latest_resume = (select(func.max(op_log.c.id))
                     .where(op_log.c.txn_id == txn_id, op_log.c.op == Op.RESUME.value)
                     .scalar_subquery())
    stmt = (select(txn.c.state, txn.c.check_times, txn.c.lease_owner,
                   latest_resume.label("round_id"))
            .where(txn.c.id == txn_id))
    return conn.execute(stmt).first()


def record_check(conn: Connection, *, txn_id: int, owner: str, check_times: int, result: str,
                 url: str | None, detail: str | None, now: datetime,
                 next_check_at: datetime | None, duration_ms: float | None = None) -> bool:
    """Count check number ``check_times`` and log it; False (nothing written) if not ours.

    It is ours while we hold the lease, or when a commit or rollback through the API
    cleared the lease while our check was in flight (the producer did get that check).
    ``next_check_at`` None keeps the lease: the caller resolves the transaction next.
    """
    values: dict[str, object] = {"check_times": check_times}
    if next_check_at is not None:
        values.update(lease_owner=None, lease_until=None, next_check_at=next_check_at)
    stmt = (
        update(txn)
        .where(txn.c.id == txn_id, txn.c.check_times == check_times - 1,
               or_(txn.c.lease_owner == owner,
                   and_(txn.c.lease_owner.is_(None), txn.c.state.in_(_RESOLVED_STATES))))
        .values(**values)
    )
    if conn.execute(stmt).rowcount != 1:
        return False
    conn.execute(insert(check_log).values(
        txn_id=txn_id, check_times=check_times, result=result, url=url,
        detail=detail[:DETAIL_MAX_CHARS] if detail else None, created_at=now,
        duration_ms=duration_ms))
    return True


def release(conn: Connection, txn_id: int, owner: str, due_at: datetime | None = None) -> None:
    """Drop our lease (if we still hold it); due again at ``due_at`` if given, else the
    due time is left as it is (the end of the lease)."""
    values: dict[str, object] = {"lease_owner": None, "lease_until": None}
    if due_at is not None:
        values["next_check_at"] = due_at
    conn.execute(update(txn).where(txn.c.id == txn_id, txn.c.lease_owner == owner)
                 .values(**values))


def checks_of(conn: Connection, txn_id: int) -> list[AnyRow]:
    """The check log of one transaction, oldest first."""
    stmt = (select(check_log.c.check_times, check_log.c.result, check_log.c.url,
                   check_log.c.detail, check_log.c.created_at, check_log.c.duration_ms)
            .where(check_log.c.txn_id == txn_id).order_by(check_log.c.id))
    return list(conn.execute(stmt))


def checks_by_result(conn: Connection, since: datetime,
                     groups: Collection[str] | None) -> dict[str, int]:
    """Checks made since ``since`` by result (of these groups' transactions unless None)."""
    stmt = (select(check_log.c.result, func.count()).where(check_log.c.created_at >= since)
            .group_by(check_log.c.result))
    if groups is not None:
        if not groups:
            return {}
        stmt = stmt.join(txn, txn.c.id == check_log.c.txn_id).where(
            txn.c.producer_group.in_(sorted(groups)))
    return {result: n for result, n in conn.execute(stmt)}
