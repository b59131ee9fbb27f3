"""The revision that keeps the keys of the transactions retention deleted, on each store:
one row per (producer group, transaction id), gone again on downgrade."""

from __future__ import annotations

import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine, inspect, text
from sqlalchemy.exc import IntegrityError

REVISION = "0014_forgotten_transactions"
INSERT = ("INSERT INTO forgotten_txn (producer_group, transaction_id, forgotten_at)"
          " VALUES (:g, :x, '2026-11-27 00:00:00')")


def test_a_key_is_kept_once_and_the_table_goes_on_downgrade(alembic_config: Config,
                                                             database_url: str) -> None:
    command.upgrade(alembic_config, f"{REVISION}-1")
    engine = create_engine(database_url)
    try:
        assert "forgotten_txn" not in inspect(engine).get_table_names()
        command.upgrade(alembic_config, REVISION)
        with engine.begin() as conn:
            conn.execute(text(INSERT), [{"g": "g", "x": "t-1"}, {"g": "h", "x": "t-1"}])
        with pytest.raises(IntegrityError), engine.begin() as conn:
            conn.execute(text(INSERT), {"g": "g", "x": "t-1"})
        with engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM forgotten_txn")).scalar_one() == 2
        command.downgrade(alembic_config, f"{REVISION}-1")
        assert "forgotten_txn" not in inspect(engine).get_table_names()
    finally:
        engine.dispose()
