"""(f) The checker's due scan with a large resolved history against a small backlog alone.

Rows are written through the service's own write path (``bench.harness.seed``), one half
message per transaction. The scan is the check service's own claim query
(``app.storage.checks.lock_due``) run in a transaction that is rolled back, so every
repetition sees the same rows; until that module exists, the equivalent SELECT on the
partial index ``ix_txn_due``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from sqlalchemy import Connection, create_engine, literal_column, select

from app.storage.schema import txn
from app.vocabulary import Op
from bench.harness import seed
from bench.harness.pgdb import libpq_url, truncate_all

CLAIM_LIMIT = 200
_OPS = {"COMMITTED": "COMMIT", "ROLLED_BACK": "ROLLBACK"}

GROUP = "bench"


def _txns(state: str, n: int, prefix: str) -> Iterator[seed.Txn]:
    """Sent two hours ago, due for a check over the last hour; resolved an hour ago
    unless PREPARED."""
    now = datetime.now(UTC)
    sent, resolved = now - timedelta(hours=2), now - timedelta(hours=1)
    op = None if state == "PREPARED" else Op(_OPS[state])
    body = "x" * 100
    for g in range(1, n + 1):
        yield seed.Txn(f"{prefix}{g}", [seed.text("bench", body)], sent_at=sent,
                       first_check_delay=3600 + g % 3600, op=op, resolved_at=resolved)


def generate(url: str, state: str, n: int, prefix: str,
             check_url: str = "http://127.0.0.1:9/bench-check") -> float:
    """Store ``n`` transactions of group "bench" in ``state``, one message each, all due
    for a check; register the group with ``check_url``. Seconds taken."""
    t0 = time.perf_counter()
    with seed.engine_of(url) as engine:
        seed.register(engine, GROUP, check_url, timeout_ms=1000)
        seed.write(engine, GROUP, _txns(state, n, prefix))
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE txn")
        conn.execute("VACUUM ANALYZE half_message")
    return time.perf_counter() - t0


def due_query() -> tuple[str, Any]:
    """The claim function of the check service, or the equivalent query."""
    try:
        from app.storage.checks import lock_due
    except ImportError:
        prepared = txn.c.state == literal_column("'PREPARED'")

        def lock_due(conn: Connection, now: datetime, limit: int) -> list:  # type: ignore[misc]
            stmt = (select(txn.c.id, txn.c.producer_group, txn.c.transaction_id,
                           txn.c.check_times, txn.c.check_url, txn.c.created_at)
                    .where(prepared, txn.c.next_check_at <= now)
                    .order_by(txn.c.next_check_at).limit(limit))
            return list(conn.execute(stmt))
        return "equivalent SELECT (app.storage.checks not found)", lock_due
    return "app.storage.checks.lock_due", lock_due


def time_scan(url: str, repeats: int) -> dict[str, Any]:
    name, lock_due = due_query()
    engine = create_engine(url)
    times = []
    rows = 0
    try:
        with engine.connect() as conn:
            for i in range(repeats + 3):
                trans = conn.begin()
                t0 = time.perf_counter()
                rows = len(lock_due(conn, datetime.now(UTC), CLAIM_LIMIT))
                elapsed = time.perf_counter() - t0
                trans.rollback()
                if i >= 3:  # the first runs warm the caches and the prepared statement
                    times.append(elapsed)
    finally:
        engine.dispose()
    times.sort()
    return {"query": name, "rows": rows, "repeats": repeats,
            "median_ms": round(1000 * statistics.median(times), 3),
            "p90_ms": round(1000 * times[int(0.9 * (len(times) - 1))], 3)}


def plan(url: str) -> str:
    with psycopg.connect(libpq_url(url)) as conn:
        rows = conn.execute(
            "EXPLAIN SELECT id FROM txn WHERE state = 'PREPARED' AND next_check_at <= now() "
            "ORDER BY next_check_at LIMIT 200").fetchall()
    return "\n".join(r[0] for r in rows)


def run(url: str, resolved: int, pending: int, repeats: int) -> dict[str, Any]:
    truncate_all(url)
    out: dict[str, Any] = {"resolved": resolved, "pending": pending, "claim_limit": CLAIM_LIMIT}
    out["generate_pending_s"] = round(generate(url, "PREPARED", pending, "p-"), 2)
    out["pending_only"] = time_scan(url, repeats)
    out["generate_resolved_s"] = round(generate(url, "COMMITTED", resolved, "r-"), 2)
    out["with_resolved"] = time_scan(url, repeats)
    out["ratio"] = round(out["with_resolved"]["median_ms"] / out["pending_only"]["median_ms"], 3)
    out["plan"] = plan(url)
    truncate_all(url)
    return out
