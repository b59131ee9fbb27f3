"""(f) The checker's due scan with a large resolved history against a small backlog alone.

Rows are generated in the database (INSERT ... SELECT generate_series), one half message
per transaction. The scan is the check service's own claim query
(``app.storage.checks.lock_due``) run in a transaction that is rolled back, so every
repetition sees the same rows; until that module exists, the equivalent SELECT on the
partial index ``ix_txn_due``.
"""

from __future__ import annotations

import statistics
import time
from datetime import UTC, datetime
from typing import Any

import orjson
import psycopg
from sqlalchemy import Connection, create_engine, literal_column, select

from app.storage.schema import txn
from bench.harness.pgdb import libpq_url, truncate_all

CLAIM_LIMIT = 200

_GENERATE = """
WITH t AS (
    INSERT INTO txn (producer_group, transaction_id, state, fingerprint, message_count,
                     check_url, check_immunity_seconds, check_times, next_check_at,
                     created_at, resolved_at)
    SELECT 'bench', %(prefix)s::text || g, %(state)s::text, md5(g::text) || md5(g::text), 1, NULL, 0,
           0, now() - interval '1 hour' + (g %% 3600) * interval '1 second',
           now() - interval '2 hours',
           CASE WHEN %(state)s::text = 'PREPARED' THEN NULL ELSE now() - interval '1 hour' END
    FROM generate_series(1, %(n)s) AS g
    RETURNING id
)
INSERT INTO half_message (message_id, txn_id, seq, topic, tag, keys, properties, body,
                          body_is_text, created_at)
SELECT md5(%(prefix)s::text || t.id), t.id, 0, 'bench', NULL, '[]', '{}',
       convert_to(repeat('x', 100), 'UTF8'), true, now() - interval '2 hours'
FROM t
"""


def generate(url: str, state: str, n: int, prefix: str,
             check_url: str = "http://127.0.0.1:9/bench-check") -> float:
    """Insert ``n`` transactions of group "bench" in ``state``, one message each, all due
    for a check; register the group with ``check_url``. Seconds taken."""
    t0 = time.perf_counter()
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        conn.execute("INSERT INTO producer_group (name, check_urls, check_timeout_ms, "
                     "created_at, updated_at) VALUES ('bench', %s, 1000, now(), now()) "
                     "ON CONFLICT (name) DO UPDATE SET check_urls = excluded.check_urls",
                     [orjson.dumps([check_url]).decode()])
        conn.execute(_GENERATE, {"prefix": prefix, "state": state, "n": n})
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
