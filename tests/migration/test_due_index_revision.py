"""The revision that indexes offset rows by their due time, on each store: a row that was
deliverable at once (``next_at`` NULL) gets a time long past, so the one probe of the index
still finds it due, and the receive still delivers it."""

from __future__ import annotations

from datetime import UTC, datetime

from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine, text

from app.storage import subscription_leases as store
from app.storage.schema import UTCDateTime
from tests.migration.rows import insert_subscription

REVISION = "0009_due_offsets_index"


def test_rows_due_at_once_stay_due(alembic_config: Config, database_url: str) -> None:
    command.upgrade(alembic_config, f"{REVISION}-1")
    engine = create_engine(database_url)
    try:
        with engine.begin() as conn:
            insert_subscription(conn, ack_cursor=0, read_offset=3)
            conn.execute(text(
                "INSERT INTO subscription_offset (subscription_id, queue_offset, deliveries,"
                " leased_until, next_at) VALUES (1, 0, 1, NULL, NULL),"
                " (1, 1, 1, :later, :later)"), {"later": "2999-01-01 00:00:00"})
        command.upgrade(alembic_config, REVISION)
        now = datetime.now(UTC)
        with engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM subscription_offset"
                                     " WHERE next_at IS NULL")).scalar_one() == 0
            due = conn.execute(text("SELECT queue_offset, next_at FROM subscription_offset"
                                    " ORDER BY queue_offset").columns(next_at=UTCDateTime())
                               ).all()
            assert due[0].next_at < now < due[1].next_at
            assert store.any_row_due(conn, 1, now)
        command.downgrade(alembic_config, f"{REVISION}-1")
        with engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM subscription_offset")
                                ).scalar_one() == 2
    finally:
        engine.dispose()
