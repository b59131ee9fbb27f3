"""SQL of the producer_group and signing_secret tables (check-callback registrations and
the secrets that sign their callbacks)."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from datetime import datetime

import orjson
from sqlalchemy import Connection, String, any_, bindparam, delete, select, update
from sqlalchemy.dialects import postgresql

from app.storage.bulk import dialect_insert
from app.storage.dialects import dialect_of
from app.storage.schema import AnyRow, producer_group, signing_secret

# a registration with its signing secret (and until when the previous one still signs)
_REGISTRATION = select(
    producer_group, signing_secret.c.secret.label("signing_secret"),
    signing_secret.c.previous_expires_at.label("previous_secret_expires_at"),
).select_from(producer_group.outerjoin(
    signing_secret, signing_secret.c.producer_group == producer_group.c.name))


def upsert(conn: Connection, name: str, check_urls: list[str], check_timeout_ms: int,
           now: datetime, *, keep_timeout: bool = False) -> None:
    """Register the group, or change its URLs (and its timeout unless ``keep_timeout``:
    ``check_timeout_ms`` is then only a new group's)."""
    stmt = dialect_insert(conn, producer_group).values(
        name=name, check_urls=orjson.dumps(check_urls).decode(),
        check_timeout_ms=check_timeout_ms, created_at=now, updated_at=now,
    )
    changed = {"check_urls": stmt.excluded.check_urls, "updated_at": stmt.excluded.updated_at}
    if not keep_timeout:
        changed["check_timeout_ms"] = stmt.excluded.check_timeout_ms
    conn.execute(stmt.on_conflict_do_update(index_elements=[producer_group.c.name],
                                            set_=changed))


def change(conn: Connection, name: str, now: datetime, check_timeout_ms: int | None) -> bool:
    """Change a registered group's timeout (None: none of its settings); False if the
    group is not registered."""
    values: dict[str, object] = {"updated_at": now}
    if check_timeout_ms is not None:
        values["check_timeout_ms"] = check_timeout_ms
    stmt = update(producer_group).where(producer_group.c.name == name).values(**values)
    return conn.execute(stmt).rowcount == 1


def get(conn: Connection, name: str) -> AnyRow | None:
    """The registration, with ``signing_secret`` and ``previous_secret_expires_at``."""
    return conn.execute(_REGISTRATION.where(producer_group.c.name == name)).first()


def ensure_secret(conn: Connection, name: str, secret: str, now: datetime) -> AnyRow:
    """Give the group ``secret`` unless it has one (a group keeps its secret); the group's
    ``secret``, ``previous_secret`` and ``previous_expires_at`` as stored."""
    stmt = dialect_insert(conn, signing_secret).values(
        producer_group=name, secret=secret, created_at=now)
    conn.execute(stmt.on_conflict_do_nothing(index_elements=[signing_secret.c.producer_group]))
    return conn.execute(
        select(signing_secret.c.secret, signing_secret.c.previous_secret,
               signing_secret.c.previous_expires_at)
        .where(signing_secret.c.producer_group == name)).one()


def rotate_secret(conn: Connection, name: str, secret: str, now: datetime,
                  previous_until: datetime) -> bool:
    """Make ``secret`` the registered group's secret, the one it replaces signing too
    until ``previous_until``; False if the group is not registered."""
    stmt = (update(signing_secret)
            .where(signing_secret.c.producer_group == name,
                   select(producer_group.c.name).where(producer_group.c.name == name).exists())
            .values(secret=secret, previous_secret=signing_secret.c.secret,
                    previous_expires_at=previous_until, rotated_at=now))
    return conn.execute(stmt).rowcount == 1


def delete_group(conn: Connection, name: str) -> bool:
    return conn.execute(delete(producer_group).where(producer_group.c.name == name)).rowcount > 0


# Checked by every batch of sends, so built once; PostgreSQL takes the names as one
# array (one prepared plan whatever their number).
_REGISTERED = select(producer_group.c.name).where(
    producer_group.c.name.in_(bindparam("names", expanding=True)))
_REGISTERED_PG = select(producer_group.c.name).where(
    producer_group.c.name == any_(bindparam("names", type_=postgresql.ARRAY(String))))


def registered(conn: Connection, names: Iterable[str]) -> set[str]:
    names = set(names)
    if not names:
        return set()
    stmt = _REGISTERED_PG if dialect_of(conn).arrays else _REGISTERED
    return set(conn.execute(stmt, {"names": sorted(names)}).scalars())


def check_urls(row: AnyRow) -> list[str]:
    urls: list[str] = orjson.loads(row.check_urls)
    return urls


def list_groups(conn: Connection, after: str, limit: int,
                only: Collection[str] | None) -> list[AnyRow]:
    """Registered producer groups by name after ``after`` (only those in ``only`` unless
    None), without their signing secrets."""
    stmt = (select(producer_group).where(producer_group.c.name > after)
            .order_by(producer_group.c.name).limit(limit))
    if only is not None:
        if not only:
            return []
        stmt = stmt.where(producer_group.c.name.in_(sorted(only)))
    return list(conn.execute(stmt))
