"""Producer groups: registration of the check callbacks."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine

from app.domain.lifecycle import utcnow
from app.domain.messages import ProducerGroupIn
from app.errors import NotFound
from app.storage import groups
from app.storage.db import wraps_db_errors, write_transaction
from app.storage.schema import AnyRow


def _shape(row: AnyRow) -> dict[str, Any]:
    return {"producer_group": row.name, "check_urls": groups.check_urls(row),
            "check_timeout_ms": row.check_timeout_ms, "created_at": row.created_at,
            "updated_at": row.updated_at}


@wraps_db_errors
def register(engine: Engine, name: str, request: ProducerGroupIn) -> dict[str, Any]:
    with write_transaction(engine) as conn:
        row = groups.upsert(conn, name, request.check_urls, request.check_timeout_ms, utcnow())
    return _shape(row)


@wraps_db_errors
def get(engine: Engine, name: str) -> dict[str, Any]:
    with engine.connect() as conn:
        row = groups.get(conn, name)
    if row is None:
        raise NotFound(f"producer group {name!r} is not registered",
                       code="producer_group_not_found")
    return _shape(row)


@wraps_db_errors
def delete(engine: Engine, name: str) -> None:
    with write_transaction(engine) as conn:
        if not groups.delete_group(conn, name):
            raise NotFound(f"producer group {name!r} is not registered",
                           code="producer_group_not_found")
