"""UTCDateTime: aware UTC datetimes back from SQLite, which stores naive text."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone

import pytest
from sqlalchemy import Column, Engine, Integer, MetaData, Table, create_engine, insert, select, text

from app.storage.schema import UTCDateTime

table = Table("t", MetaData(), Column("id", Integer, primary_key=True),
              Column("at", UTCDateTime, nullable=True))


@pytest.fixture
def engine() -> Iterator[Engine]:
    engine = create_engine("sqlite://")
    yield engine
    engine.dispose()


def round_trip(engine: Engine, value: datetime | None) -> tuple[datetime | None, str | None]:
    """The value read back, and the text SQLite stored."""
    with engine.begin() as conn:
        table.create(conn)
        conn.execute(insert(table).values(id=1, at=value))
        stored = conn.execute(text("SELECT at FROM t")).scalar_one()
        back = conn.execute(select(table.c.at)).scalar_one()
    return back, stored


def test_a_utc_datetime_comes_back_aware_and_equal(engine: Engine) -> None:
    at = datetime(2024, 5, 1, 12, 30, 15, 123456, tzinfo=UTC)
    back, stored = round_trip(engine, at)
    assert back == at and back is not None and back.tzinfo is UTC
    assert stored is not None and "+" not in stored  # naive text, in UTC


def test_another_offset_is_stored_as_utc(engine: Engine) -> None:
    at = datetime(2024, 5, 1, 14, 0, tzinfo=timezone(timedelta(hours=2)))
    back, stored = round_trip(engine, at)
    assert back == at and back is not None and back.utcoffset() == timedelta(0)
    assert stored is not None and stored.startswith("2024-05-01 12:00:00")


def test_none_stays_none(engine: Engine) -> None:
    assert round_trip(engine, None) == (None, None)


def test_stored_text_sorts_as_time_does(engine: Engine) -> None:
    # a query orders by the column's text: the offsets must not survive into it
    early = datetime(2024, 5, 1, 13, 0, tzinfo=timezone(timedelta(hours=2)))  # 11:00 UTC
    late = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
    with engine.begin() as conn:
        table.create(conn)
        conn.execute(insert(table), [{"id": 1, "at": late}, {"id": 2, "at": early}])
        assert conn.execute(select(table.c.id).order_by(table.c.at)).scalars().all() == [2, 1]

