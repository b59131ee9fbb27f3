"""The revision after which a subscription keeps rows only for unacknowledged offsets, on
each store: rows marked acknowledged go at the upgrade, and the downgrade gives every
acknowledged offset below the read offset its marked row back."""

from __future__ import annotations

from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine, inspect, text

from tests.migration.rows import insert_subscription

REVISION = "0008_open_offsets_only"
# offset: acknowledged, in a subscription read up to offset 6 whose stored cursor is 1
BEFORE = {1: True, 2: False, 3: True, 4: True, 5: False}


def _rows(url: str) -> list[tuple[object, ...]]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            columns = {c["name"] for c in inspect(conn).get_columns("subscription_offset")}
            acked = "acked" if "acked" in columns else "NULL"
            return [tuple(r) for r in conn.execute(text(
                f"SELECT queue_offset, {acked}, deliveries FROM subscription_offset"
                " ORDER BY queue_offset"))]
    finally:
        engine.dispose()


def test_acknowledged_rows_go_and_come_back(alembic_config: Config, database_url: str) -> None:
    command.upgrade(alembic_config, f"{REVISION}-1")
    engine = create_engine(database_url)
    with engine.begin() as conn:
        insert_subscription(conn, ack_cursor=1, read_offset=6)
        for offset, acked in BEFORE.items():
            conn.execute(text("INSERT INTO subscription_offset (subscription_id, queue_offset,"
                              " acked, deliveries) VALUES (1, :o, :a, 1)"),
                         {"o": offset, "a": acked})
    engine.dispose()

    command.upgrade(alembic_config, REVISION)
    assert _rows(database_url) == [(2, None, 1), (5, None, 1)]

    command.downgrade(alembic_config, f"{REVISION}-1")
    assert [(o, bool(a)) for o, a, _ in _rows(database_url)] == sorted(BEFORE.items())
