"""The engine's edge (``app.storage.db``): every way the database fails to answer is
raised as the domain's ``DatabaseUnavailable``; other database errors pass unchanged."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sqlalchemy import exc as sa_exc
from sqlalchemy import insert, text

from app.config import Settings
from app.errors import DatabaseUnavailable, one_line
from app.storage.db import make_engine
from app.storage.schema import producer_group
from tests.conftest import free_port, make_settings

_NOW = datetime(2026, 1, 1, tzinfo=UTC)
_GROUP = {"name": "g", "check_urls": "[]", "check_timeout_ms": 3000, "created_at": _NOW,
          "updated_at": _NOW}


def test_an_unreachable_server_is_unavailable() -> None:
    engine = make_engine(Settings(
        database_url=f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/nothing",
        db_connect_timeout_seconds=1))
    with pytest.raises(DatabaseUnavailable) as raised:
        engine.connect()
    assert raised.value.status == 503
    assert "Connection refused" in one_line(raised.value)  # the driver's words, for logs
    engine.dispose()


def test_no_free_pooled_connection_is_unavailable(postgres_url: str) -> None:
    engine = make_engine(make_settings(postgres_url, db_pool_size=1, db_max_overflow=0,
                                       db_pool_timeout_seconds=0.05))
    with engine.connect(), pytest.raises(DatabaseUnavailable,
                                         match="no database connection was free"):
        engine.connect()
    with engine.connect() as conn:  # given back: served again
        assert conn.execute(text("SELECT 1")).scalar() == 1
    engine.dispose()


def test_a_statement_timeout_and_a_read_only_write_are_unavailable(postgres_url: str) -> None:
    engine = make_engine(make_settings(postgres_url))
    with engine.connect() as conn, conn.begin():
        conn.execute(text("SET LOCAL statement_timeout = 20"))
        with pytest.raises(DatabaseUnavailable):
            conn.execute(text("SELECT pg_sleep(2)"))
    with engine.connect() as conn, conn.begin():
        conn.execute(text("SET TRANSACTION READ ONLY"))
        with pytest.raises(DatabaseUnavailable, match="refuses writes"):
            conn.execute(insert(producer_group).values(**_GROUP))
    engine.dispose()


def test_a_lost_connection_is_unavailable_and_invalidated(postgres_url: str) -> None:
    engine = make_engine(make_settings(postgres_url))
    with engine.connect() as victim, engine.connect() as killer:
        pid = victim.execute(text("SELECT pg_backend_pid()")).scalar()
        killer.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
        killer.commit()
        with pytest.raises(DatabaseUnavailable) as raised:
            victim.execute(text("SELECT 1"))
        assert raised.value.connection_invalidated
    with engine.connect() as conn:  # a fresh connection
        assert conn.execute(text("SELECT 1")).scalar() == 1
    engine.dispose()


def test_a_constraint_violation_passes_unchanged(database_url: str) -> None:
    engine = make_engine(make_settings(database_url))
    with engine.begin() as conn:
        conn.execute(insert(producer_group).values(**_GROUP))
    with pytest.raises(sa_exc.IntegrityError), engine.begin() as conn:
        conn.execute(insert(producer_group).values(**_GROUP))
    engine.dispose()
