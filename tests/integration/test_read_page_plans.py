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
from tests.plans import drop_statistics, most_rows, plans

TOPIC = "pages"
BACKLOG = 20_000


def test_a_page_reads_only_its_rows_without_statistics(postgres_url: str) -> None:
    engine = make_engine(make_settings(postgres_url))
    try:
        with engine.begin() as conn:
            drop_statistics(conn, "message_log", "half_message", "txn")
            conn.execute(text(
                "INSERT INTO txn (producer_group, transaction_id, state, fingerprint,"
                " message_count, check_immunity_seconds, check_times, next_check_at,"
                " created_at, resolved_at)"
                " VALUES ('g', 't', 'COMMITTED', 'f', :n, 0, 0, now(), now(), now())"),
                {"n": BACKLOG})
            conn.execute(text(
                "INSERT INTO half_message (message_id, txn_id, seq, topic, keys, properties,"
                " body, body_is_text, created_at)"
                " SELECT 'm' || i, (SELECT max(id) FROM txn), i, :t, '[]', '{}',"
                " convert_to(repeat('x', 100), 'UTF8'), true, now()"
                " FROM generate_series(0, :n - 1) AS i"), {"t": TOPIC, "n": BACKLOG})
            conn.execute(text(
                "INSERT INTO message_log (topic, queue_offset, half_message_id, committed_at)"
                " SELECT topic, seq, id, now() FROM half_message WHERE topic = :t"),
                {"t": TOPIC})
        with engine.connect() as conn, plans(conn) as found:
            one = log.read_page(conn, TOPIC, 10_000, 10_001, 1 << 20)
            budget = log.read_page(conn, TOPIC, 10_000, 10_100, 250)
            whole = log.read_page(conn, TOPIC, 19_950, 20_050, 1 << 20)
            conn.execute(text("SELECT 'done'"))  # the last read's plan arrives with it
        assert [r.queue_offset for r in one] == [10_000]
        assert [r.queue_offset for r in budget] == [10_000, 10_001]
        assert [r.queue_offset for r in whole] == list(range(19_950, 20_000))
        read = [p for q, p in found if "message_log" in q]
        assert len(read) == 3
        assert [most_rows(p) for p in read] == [1, 100, 50], read
    finally:
        engine.dispose()
