"""Least privilege on PostgreSQL: what ``txmsg migrate --grant-to ROLE`` grants ROLE.

``serve``, ``checker`` and ``ingest`` read and write rows and nothing else, so ROLE gets
exactly that on txmsg's own objects in the current schema: SELECT, INSERT, UPDATE and
DELETE on its tables, USAGE and SELECT on their sequences, SELECT on its views and on
``alembic_version`` (``serve``'s migrate at head only reads it, as ``/readyz`` does).
Nothing lets ROLE create, alter or drop: on PostgreSQL 15 and later nobody but the owner
may create in ``public``, and only an object's owner may alter or drop it.

VACUUM needs ownership: with autovacuum off, retention's vacuuming as ROLE is skipped by
the server with a warning (leave autovacuum on, or vacuum as the owner).
"""

from __future__ import annotations

from sqlalchemy import Connection, text

from app.errors import NotFound
from app.problems import ProblemCode
from app.storage.schema import metadata

VIEWS = ("committed_messages", "topic_watermarks")
VERSION_TABLE = "alembic_version"


def grant_to(conn: Connection, role: str) -> list[str]:
    """Grant ``role`` what the service needs (in the caller's transaction); the
    statements run. An unknown role → NotFound."""
    exists = conn.execute(text("SELECT EXISTS (SELECT FROM pg_roles WHERE rolname = :r)"),
                          {"r": role}).scalar()
    if not exists:
        raise NotFound(f"no role {role!r} on this server (CREATE ROLE it first)",
                       code=ProblemCode.ROLE_NOT_FOUND)
    quote = conn.dialect.identifier_preparer.quote
    who = quote(role)
    schema = conn.execute(text("SELECT current_schema()")).scalar_one()
    tables = [t.name for t in metadata.sorted_tables]
    sequences = []
    for table in metadata.sorted_tables:
        column = table.autoincrement_column
        if column is not None:
            found = conn.execute(text("SELECT pg_get_serial_sequence(:t, :c)"),
                                 {"t": f"{quote(schema)}.{quote(table.name)}",
                                  "c": column.name}).scalar()
            if found:
                sequences.append(found)
    rows = ", ".join(quote(t) for t in tables)
    read_only = ", ".join(quote(v) for v in (*VIEWS, VERSION_TABLE))
    statements = [f"GRANT USAGE ON SCHEMA {quote(schema)} TO {who}",
                  f"GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE {rows} TO {who}",
                  f"GRANT SELECT ON TABLE {read_only} TO {who}"]
    if sequences:  # already quoted by pg_get_serial_sequence
        statements.append(f"GRANT USAGE, SELECT ON SEQUENCE {', '.join(sequences)} TO {who}")
    for statement in statements:
        conn.exec_driver_sql(statement)
    return statements
