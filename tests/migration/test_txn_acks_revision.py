"""The revision that keeps the acks a send carried (``txn_ack``), on each store: the
offsets transactions hold before it become their recorded acks, so that their late
commit can take them again after a discard."""

from __future__ import annotations

from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine, text

from tests.migration.rows import insert_subscription

REVISION = "0010_txn_acks"


def test_held_offsets_become_recorded_acks(alembic_config: Config, database_url: str) -> None:
    command.upgrade(alembic_config, f"{REVISION}-1")
    engine = create_engine(database_url)
    try:
        with engine.begin() as conn:
            insert_subscription(conn, ack_cursor=0, read_offset=3)
            conn.execute(text(
                "INSERT INTO subscription_offset (subscription_id, queue_offset, deliveries,"
                " leased_until, next_at, held_by) VALUES (1, 0, 1, NULL, :past, 7),"
                " (1, 1, 1, NULL, :past, NULL), (1, 2, 2, NULL, :past, 7)"),
                {"past": "1970-01-01 00:00:00"})
        command.upgrade(alembic_config, REVISION)
        with engine.connect() as conn:
            assert conn.execute(text(
                "SELECT txn_id, subscription_id, queue_offset FROM txn_ack"
                " ORDER BY queue_offset")).all() == [(7, 1, 0), (7, 1, 2)]
        command.downgrade(alembic_config, f"{REVISION}-1")
        with engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM subscription_offset")
                                ).scalar_one() == 3
    finally:
        engine.dispose()
