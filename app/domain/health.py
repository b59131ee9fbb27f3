"""Readiness: whether this process can serve, as ``/readyz`` answers it."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Engine
from sqlalchemy import exc as sa_exc

from app.errors import DatabaseUnavailable
from app.problems import ProblemCode
from app.storage.db import current_revision, head_revision, refuses_writes


@dataclass(frozen=True, slots=True)
class Readiness:
    """Ready, or why not: ``code`` is ``database_unavailable`` or ``schema_not_at_head``."""

    revision: str | None
    head: str | None
    code: ProblemCode | None = None
    detail: str = ""


def readiness(engine: Engine) -> Readiness:
    """The database answers, takes writes and its schema is at the head revision."""
    head = head_revision()
    try:
        with engine.connect() as conn:
            current = current_revision(conn)
            read_only = refuses_writes(conn)
    except (DatabaseUnavailable, sa_exc.SQLAlchemyError) as exc:
        cause = exc.__cause__ if isinstance(exc, DatabaseUnavailable) else exc
        return Readiness(None, head, ProblemCode.DATABASE_UNAVAILABLE,
                         f"cannot reach the database: {type(cause).__name__}")
    if read_only:
        return Readiness(current, head, ProblemCode.DATABASE_UNAVAILABLE,
                         "the database refuses writes (read-only, or a standby)")
    if current != head:
        return Readiness(current, head, ProblemCode.SCHEMA_NOT_AT_HEAD,
                         f"schema revision is {current}, head is {head}; run `txmsg migrate`")
    return Readiness(current, head)
