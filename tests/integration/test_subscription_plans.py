"""PostgreSQL: a receive's look at the log reaches its rows by index, whatever the
statistics.

A backlog written faster than autovacuum analyzes it leaves ``message_log`` without
statistics; with ``queue_offset >= read ORDER BY queue_offset LIMIT n`` joined to
``half_message``, PostgreSQL then joined and sorted the whole backlog at each receive. The
test writes 20k messages to a table whose statistics are dropped and counts the rows each
node of the scan's plan produced.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import text
from sqlalchemy.dialects import postgresql

from app.storage import subscriptions as store
from app.storage.db import make_engine
from tests.conftest import make_settings

TOPIC = "plans"
BACKLOG = 20_000


def _most_rows(node: dict[str, Any]) -> int:
    """The most rows any node of a plan produced (over all its loops)."""
    own = int(node["Actual Rows"]) * int(node.get("Actual Loops", 1))
    return max([own, *(_most_rows(child) for child in node.get("Plans", []))])


def test_scan_reads_only_its_window_without_statistics(postgres_url: str) -> None:
    engine = make_engine(make_settings(postgres_url))
    try:
        with engine.begin() as conn:
            for table in ("message_log", "half_message", "txn"):
                conn.execute(text("DELETE FROM pg_statistic WHERE starelid = "
                                  f"'{table}'::regclass"))
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
        with engine.connect() as conn:
            rows = store.scan(conn, TOPIC, 5_000, 100)
            assert [r.queue_offset for r in rows] == list(range(5_000, 5_100))
            sql = store.scan_statement(TOPIC, 5_000, 100).compile(
                dialect=postgresql.dialect(), compile_kwargs={"literal_binds": True})
            plan = conn.execute(text(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}")).scalar_one()
        assert _most_rows(plan[0]["Plan"]) <= 100, plan
    finally:
        engine.dispose()
