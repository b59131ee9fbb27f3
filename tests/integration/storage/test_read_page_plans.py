"""PostgreSQL: a page of a topic reads its own rows by index, whatever the statistics.

The page query used to join the log to a sized sub-page on ``(topic, queue_offset)``;
without statistics (a topic written faster than autovacuum analyzes it) PostgreSQL ran
that join as a nested loop over every message of the topic, so a one-message read cost
the topic's size (24 ms at 1,200 messages). The test writes 20k messages to tables whose
statistics are dropped and counts the rows each node of the read's plan produced.
"""

from __future__ import annotations

from sqlalchemy import text

from app.storage import log
from app.storage.db import make_engine
from tests.conftest import make_settings
from tests.plans import committed_backlog, most_rows, plans

TOPIC = "pages"
BACKLOG = 20_000


def test_a_page_reads_only_its_rows_without_statistics(postgres_url: str) -> None:
    engine = make_engine(make_settings(postgres_url))
    try:
        with engine.begin() as conn:
            committed_backlog(conn, TOPIC, BACKLOG)
        with engine.connect() as conn, plans(conn) as found:
            _, one = log.read_page(conn, TOPIC, 10_000, 10_001, 1 << 20)
            _, budget = log.read_page(conn, TOPIC, 10_000, 10_100, 250)
            _, whole = log.read_page(conn, TOPIC, 19_950, 20_050, 1 << 20)
            conn.execute(text("SELECT 'done'"))  # the last read's plan arrives with it
        assert [r.queue_offset for r in one] == [10_000]
        assert [r.queue_offset for r in budget] == [10_000, 10_001]
        assert [r.queue_offset for r in whole] == list(range(19_950, 20_000))
        read = [p for q, p in found if "message_log" in q]
        assert len(read) == 3
        assert [most_rows(p) for p in read] == [1, 100, 50], read
    finally:
        engine.dispose()
