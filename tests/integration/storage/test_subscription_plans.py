"""PostgreSQL: a receive's look at the log reaches its rows by index, whatever the
statistics.

A backlog written faster than autovacuum analyzes it leaves ``message_log`` without
statistics; with ``queue_offset >= read ORDER BY queue_offset LIMIT n`` joined to
``half_message``, PostgreSQL then joined and sorted the whole backlog at each receive. The
test writes 20k messages to a table whose statistics are dropped and counts the rows each
node of the scan's plan produced.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import event, select, text
from sqlalchemy.dialects import postgresql

from app.storage import subscription_acks as acks
from app.storage import subscription_leases as store
from app.storage.db import make_engine
from tests.conftest import make_settings
from tests.plans import committed_backlog, drop_statistics, indexes_used, most_rows

TOPIC = "plans"
BACKLOG = 20_000


def test_scan_reads_only_its_window_without_statistics(postgres_url: str) -> None:
    engine = make_engine(make_settings(postgres_url))
    try:
        with engine.begin() as conn:
            committed_backlog(conn, TOPIC, BACKLOG)
        with engine.connect() as conn:
            rows = store.scan(conn, TOPIC, 5_000, 5_100)
            assert [r.queue_offset for r in rows] == list(range(5_000, 5_100))
            sql = store.scan_statement(TOPIC, 5_000, 5_100).compile(
                dialect=postgresql.dialect(), compile_kwargs={"literal_binds": True})
            plan = conn.execute(text(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}")).scalar_one()
        assert most_rows(plan[0]["Plan"]) <= 100, plan
    finally:
        engine.dispose()


OPEN_ROWS = 20_000


def _plan(conn: Any, stmt: Any) -> dict[str, Any]:
    sql = stmt.compile(dialect=postgresql.dialect(), compile_kwargs={"literal_binds": True})
    return conn.execute(text(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}")).scalar_one()[0]["Plan"]


def _explained(conn: Any, call: Callable[[], Any]) -> dict[str, Any]:
    """The plan of the one statement ``call`` runs on ``conn``, run under EXPLAIN ANALYZE
    with its own parameters."""
    plans: list[Any] = []

    def explain(_c: Any, _cur: Any, statement: str, params: Any, _ctx: Any, _many: bool
                ) -> tuple[str, Any]:
        return f"EXPLAIN (ANALYZE, FORMAT JSON) {statement}", params

    def keep(_c: Any, cursor: Any, *_: Any) -> None:
        plans.append(cursor.fetchone()[0])

    event.listen(conn, "before_cursor_execute", explain, retval=True)
    event.listen(conn, "after_cursor_execute", keep)
    try:
        call()
    finally:
        event.remove(conn, "before_cursor_execute", explain)
        event.remove(conn, "after_cursor_execute", keep)
    [plan] = plans
    return plan[0]["Plan"]


def test_due_probe_and_ack_read_only_their_rows_without_statistics(postgres_url: str) -> None:
    """The question every receive asks (is any offset row due?) is one probe of the due
    index, and an ack of 100 offsets reads their 100 rows by primary key, with 20k rows
    leased and no statistics. With the due index partial on ``held_by IS NULL``, the
    planner took it for the ack's rows and read all 20k."""
    engine = make_engine(make_settings(postgres_url))
    future = datetime.now(UTC) + timedelta(hours=1)
    try:
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO subscription_offset (subscription_id, queue_offset,"
                              " deliveries, leased_until, next_at)"
                              " SELECT 1, i, 1, :t, :t FROM generate_series(0, :n - 1) AS i"),
                         {"t": future, "n": OPEN_ROWS})
            drop_statistics(conn, "subscription_offset")
        with engine.begin() as conn:
            now = datetime.now(UTC)
            assert store.any_row_due(conn, 1, now) is False
            probe = _plan(conn, select(store._any_due(1, now)))
            assert indexes_used(probe) == {"ix_subscription_offset_due"}, probe
            assert most_rows(probe) <= 1, probe
            wanted = list(range(5_000, 5_100))
            plan = _explained(conn, lambda: acks.acknowledge(conn, 1, wanted))
            assert "ix_subscription_offset_due" not in indexes_used(plan), plan
            assert most_rows(plan) <= len(wanted), plan
            conn.rollback()
    finally:
        engine.dispose()
