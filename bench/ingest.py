"""Benchmark: `txmsg ingest` (Spark JDBC → Parquet) of N committed messages, against a
plain ``COPY (SELECT … FROM committed_messages) TO STDOUT`` of the same rows.

The messages are generated in SQL, consistently with the schema (producer group, committed
transactions with their op log rows, half messages, committed log, topic counters), in a
database of their own on the PostgreSQL server, dropped at the end::

    python -m bench.ingest [--rows 1000000] [--database-url postgresql://postgres@127.0.0.1/postgres]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from typing import Any

import psycopg

from app.config import Settings
from bench.pgdb import bench_database, libpq_url
from spark_outbox.job import print_report
from spark_outbox.job import run as ingest_run
from spark_outbox.session import build_session
from spark_outbox.source import jdbc_source

TOPICS = 4  # message g goes to topic (g-1) % TOPICS, at offset (g-1) // TOPICS: dense
PER_TXN = 4  # messages per transaction

GENERATE = """
INSERT INTO producer_group (name, check_urls, check_timeout_ms, created_at, updated_at)
VALUES ('bench', '["http://127.0.0.1:9/check"]', 3000, now(), now());

INSERT INTO txn (id, producer_group, transaction_id, state, fingerprint, message_count,
                 check_url, check_immunity_seconds, check_times, next_check_at, created_at,
                 resolved_at)
SELECT t, 'bench', 'tx-' || t, 'COMMITTED', md5(t::text), LEAST({per_txn}, {rows} - (t - 1) * {per_txn}),
       NULL, 0, 0, now(), now() - interval '1 second', now()
FROM generate_series(1, ({rows} + {per_txn} - 1) / {per_txn}) t;

INSERT INTO op_log (txn_id, op, source, check_times, created_at)
SELECT t, 'COMMIT', 'api', 0, now() FROM generate_series(1, ({rows} + {per_txn} - 1) / {per_txn}) t;

INSERT INTO half_message (id, message_id, txn_id, seq, topic, tag, keys, properties, body,
                          body_is_text, created_at)
SELECT g, upper(md5(g::text)), (g - 1) / {per_txn} + 1, (g - 1) % {per_txn},
       'bench-' || ((g - 1) % {topics}), CASE WHEN g % 2 = 0 THEN 'even' END,
       '["k-' || g || '"]', '{{"n":"' || g || '"}}',
       convert_to(repeat('message body ', 8) || g, 'UTF8'), g % 10 <> 0,
       now() - interval '1 second'
FROM generate_series(1, {rows}) g;

INSERT INTO message_log (topic, queue_offset, half_message_id, properties, committed_at)
SELECT 'bench-' || ((g - 1) % {topics}), (g - 1) / {topics}, g, NULL, now()
FROM generate_series(1, {rows}) g;

INSERT INTO topic_offset (topic, next_offset)
SELECT topic, count(*) FROM message_log GROUP BY topic;

SELECT setval(pg_get_serial_sequence('txn', 'id'), (SELECT max(id) FROM txn));
SELECT setval(pg_get_serial_sequence('half_message', 'id'), (SELECT max(id) FROM half_message));
"""

COPY = "COPY (SELECT * FROM committed_messages WHERE topic LIKE 'bench-%') TO STDOUT"


def generate(url: str, rows: int) -> float:
    """Insert ``rows`` committed messages; seconds taken."""
    started = time.perf_counter()
    with psycopg.connect(libpq_url(url)) as conn:
        conn.execute(GENERATE.format(rows=rows, per_txn=PER_TXN, topics=TOPICS))
        conn.commit()
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
    return time.perf_counter() - started


def copy_out(url: str) -> tuple[float, int, int]:
    """COPY the committed rows to this process: (seconds, rows, bytes)."""
    started = time.perf_counter()
    size = lines = 0
    with psycopg.connect(libpq_url(url)) as conn, conn.cursor() as cur, cur.copy(COPY) as copy:
        for block in copy:
            size += len(block)
            lines += bytes(block).count(b"\n")
    return time.perf_counter() - started, lines, size


def run(database_url: str | None = None, rows: int = 1_000_000) -> dict[str, Any]:
    """Generate ``rows`` committed messages on the PostgreSQL server of ``database_url``
    (an admin URL; default TXMSG_BENCH_PG_URL or the local server), then time COPY and
    one Spark ingestion of them. The figures, as a dict."""
    out_dir = tempfile.mkdtemp(prefix="txmsg-bench-ingest-")
    try:
        with bench_database(database_url) as url:
            generated = generate(url, rows)
            print(f"generated {rows:,} committed messages in {generated:.1f} s", flush=True)
            copy_first, copied, size = copy_out(url)
            settings = Settings(database_url=url)
            started = time.perf_counter()
            spark = build_session(settings, os.environ, [str(jdbc_source(settings).jar)])
            startup = time.perf_counter() - started
            try:
                cores = spark.sparkContext.defaultParallelism
                report = ingest_run(spark, settings, out_dir, None)
                print_report(report)
            finally:
                spark.stop()
            copy_second, _, _ = copy_out(url)
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)
    if copied != rows or report.total != rows:
        raise RuntimeError(f"expected {rows} rows: COPY gave {copied}, ingest {report.total}")
    copy_seconds = min(copy_first, copy_second)
    result = {
        "rows": rows,
        "topics": TOPICS,
        "spark_cores": cores,
        "spark_startup_seconds": round(startup, 2),
        "ingest_seconds": round(report.seconds, 2),
        "ingest_rows_per_second": round(rows / report.seconds),
        "copy_seconds": round(copy_seconds, 2),
        "copy_rows_per_second": round(rows / copy_seconds),
        "copy_megabytes": round(size / 1e6, 1),
        "ingest_over_copy": round(report.seconds / copy_seconds, 2),
    }
    print(f"ingest (Spark JDBC -> Parquet, {cores} cores): {rows:,} rows in "
          f"{report.seconds:.1f} s = {rows / report.seconds:,.0f} rows/s "
          f"(+ {startup:.1f} s Spark startup)")
    print(f"COPY (committed_messages) TO STDOUT:   {rows:,} rows in "
          f"{copy_seconds:.1f} s = {rows / copy_seconds:,.0f} rows/s ({size / 1e6:,.0f} MB)")
    print(f"ingest / COPY = {report.seconds / copy_seconds:.2f}x the time", flush=True)
    return result


def _main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--database-url", default=None,
                        help="PostgreSQL admin URL (default: TXMSG_BENCH_PG_URL or local)")
    args = parser.parse_args()
    print(json.dumps(run(args.database_url, args.rows), indent=1))


if __name__ == "__main__":
    _main()
