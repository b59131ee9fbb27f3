"""SQL of the producer_group table (check-callback registrations)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

import orjson
from sqlalchemy import Connection, String, any_, bindparam, delete, select
from sqlalchemy.dialects import postgresql, sqlite

from app.storage.schema import AnyRow, producer_group


def upsert(conn: Connection, name: str, check_urls: list[str], check_timeout_ms: int,
           now: datetime) -> AnyRow:
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    stmt = dialect.insert(producer_group).values(
        name=name, check_urls=orjson.dumps(check_urls).decode(),
        check_timeout_ms=check_timeout_ms, created_at=now, updated_at=now,
    )
    stmt = stmt.on_conflict_do_update(
        index_elements=[producer_group.c.name],
        set_={"check_urls": stmt.excluded.check_urls,
              "check_timeout_ms": stmt.excluded.check_timeout_ms,
              "updated_at": stmt.excluded.updated_at},
    ).returning(*producer_group.c)
    return conn.execute(stmt).one()


def get(conn: Connection, name: str) -> AnyRow | None:
    return conn.execute(select(producer_group).where(producer_group.c.name == name)).first()


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
    stmt = _REGISTERED_PG if conn.dialect.name == "postgresql" else _REGISTERED
    return set(conn.execute(stmt, {"names": sorted(names)}).scalars())


def check_urls(row: AnyRow) -> list[str]:
    urls: list[str] = orjson.loads(row.check_urls)
    return urls
