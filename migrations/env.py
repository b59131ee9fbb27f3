"""Alembic environment: URL from settings, timeouts, an advisory lock, one transaction each."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, text

from app.config import Settings
from app.storage.db import make_engine, transaction_pooled
from app.storage.schema import metadata

MIGRATION_LOCK_ID = 0x7478_6D73  # "txms": serialises concurrent `txmsg migrate` runs


def run_migrations_online() -> None:
    config = context.config
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    url = config.attributes.get("database_url") or Settings().database_url
    pooling = config.attributes.get("database_pooling", "session")
    # the driver's own errors: a failing revision surfaces as itself
    engine = make_engine(Settings(database_url=url, database_pooling=pooling), pool=False,
                         domain_errors=False)
    try:
        with engine.connect() as conn:
            _run(conn)
    finally:
        engine.dispose()


def _run(connection: Connection) -> None:
    if transaction_pooled(connection):
        _run_in_one_transaction(connection)
        return
    postgres = connection.dialect.name == "postgresql"
    if postgres:
        # a second migrator waits for the first on the advisory lock, at most lock_timeout
        connection.execute(text("SET lock_timeout = '10s'"))
        connection.execute(text("SET statement_timeout = '120s'"))
        connection.execute(text("SELECT pg_advisory_lock(:k)"), {"k": MIGRATION_LOCK_ID})
        connection.commit()
    try:
        context.configure(
            connection=connection,
            target_metadata=metadata,
            transaction_per_migration=True,
            render_as_batch=connection.dialect.name == "sqlite",
            compare_type=True,
            compare_server_default=True,
        )
        context.run_migrations()
        connection.commit()
    finally:
        if postgres:
            if connection.in_transaction():  # a failed run: unlocking must not hide its error
                connection.rollback()
            connection.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": MIGRATION_LOCK_ID})
            connection.commit()


def _run_in_one_transaction(connection: Connection) -> None:
    """Through a transaction pooler, where a session's lock or settings would stay on a
    server connection the pooler hands to others: every revision in one transaction,
    which holds the lock and the timeouts for itself only."""
    connection.execute(text("SET LOCAL lock_timeout = '10s'"))
    connection.execute(text("SET LOCAL statement_timeout = '120s'"))
    connection.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": MIGRATION_LOCK_ID})
    context.configure(
        connection=connection,
        target_metadata=metadata,
        transaction_per_migration=False,
        compare_type=True,
        compare_server_default=True,
    )
    context.run_migrations()
    connection.commit()


if context.is_offline_mode():
    raise SystemExit("txmsg migrations run online only")
run_migrations_online()
