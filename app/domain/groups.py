"""Producer groups: registration of the check callbacks, and the secret that signs them.

A group's signing secret is made at its first registration and kept: re-registering
does not change it, and deleting the registration does not delete it (the group's
transactions still get signed checks, and a new registration finds the same secret).
Only a rotation replaces it, the previous one signing too for
``TXMSG_SIGNING_SECRET_OVERLAP_SECONDS``.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlalchemy import Connection, Engine

from app.config import Settings
from app.domain import clock, signing
from app.domain.messages import ProducerGroupIn
from app.errors import InvalidRequest, NotFound
from app.problems import ProblemCode
from app.storage import groups
from app.storage.db import write_transaction
from app.storage.schema import AnyRow


def _shape(row: AnyRow) -> dict[str, Any]:
    now = clock.utcnow()
    overlap = row.previous_secret_expires_at
    return {"producer_group": row.name, "check_urls": groups.check_urls(row),
            "check_timeout_ms": row.check_timeout_ms, "signing_secret": row.signing_secret,
            "previous_secret_expires_at": overlap if overlap and overlap > now else None,
            "created_at": row.created_at, "updated_at": row.updated_at}


def _not_found(name: str) -> NotFound:
    return NotFound(f"producer group {name!r} is not registered",
                    code=ProblemCode.PRODUCER_GROUP_NOT_FOUND)


def _registration(conn: Connection, name: str) -> dict[str, Any]:
    row = groups.get(conn, name)
    if row is None:
        raise _not_found(name)
    return _shape(row)


def register(engine: Engine, name: str, request: ProducerGroupIn) -> dict[str, Any]:
    """Register the group, or change what the request names of its registration (what it
    leaves out keeps its value). A group is registered with its ``check_urls``."""
    named = request.named()
    now = clock.utcnow()
    with write_transaction(engine) as conn:
        if "check_urls" in named:
            groups.upsert(conn, name, named["check_urls"], request.check_timeout_ms, now,
                          keep_timeout="check_timeout_ms" not in named)
        elif not groups.change(conn, name, now, named.get("check_timeout_ms")):
            raise InvalidRequest(f"check_urls: producer group {name!r} is not registered; "
                                 "registering it needs its check_urls",
                                 code=ProblemCode.MISSING_FIELD)
        groups.ensure_secret(conn, name, signing.new_secret(), now)
        return _registration(conn, name)


def get(engine: Engine, name: str) -> dict[str, Any]:
    with engine.connect() as conn:
        return _registration(conn, name)


def delete(engine: Engine, name: str) -> None:
    with write_transaction(engine) as conn:
        if not groups.delete_group(conn, name):
            raise _not_found(name)


def rotate_secret(engine: Engine, settings: Settings, name: str) -> dict[str, Any]:
    """A new signing secret; the one it replaces signs too during the overlap."""
    now = clock.utcnow()
    until = now + timedelta(seconds=settings.signing_secret_overlap_seconds)
    with write_transaction(engine) as conn:
        if not groups.rotate_secret(conn, name, signing.new_secret(), now, until):
            raise _not_found(name)
        return _registration(conn, name)
