"""Retention under load, on PostgreSQL: what deleting costs the writers.

- ``throughput``: (b) and (d) with a ``txmsg checker`` beside the service, retention off
  (a year: nothing expires) and on (a few seconds: the job deletes as fast as the load
  writes, and vacuums), in interleaved rounds, each run from empty tables; medians and
  the on/off ratios.
- ``drain``: a table holding many expired rows (written in-process through the service's
  write path, ``bench.harness.seed``, not over HTTP) emptied by the retention job while a paced send + commit load runs: the time it
  takes and the commit latency meanwhile, against the same load before the job starts.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from bench.harness import seed
from bench.harness.pgdb import clean_env, libpq_url, truncate_all, txmsg_command
from bench.harness.service import Server
from bench.phases import txmsg_load

EXPIRED_GROUP = "bench-expired"
EXPIRED_TOPIC = "bench-expired"
MESSAGES_PER_TXN = 10
YEAR = 31_536_000


class Checker:
    """``txmsg checker`` as a subprocess (the check service, so the retention job too)."""

    def __init__(self, database_url: str, **settings: object) -> None:
        env = clean_env(TXMSG_DATABASE_URL=database_url,
                        **{f"TXMSG_{k.upper()}": str(v) for k, v in settings.items()})
        self.proc = subprocess.Popen([*txmsg_command(), "--log-level", "WARNING", "checker"],
                                     env=env, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, start_new_session=True)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)


def _wait_for_first_run(db: str, timeout: float = 120.0) -> None:
    """Until the checker's retention job has run once (its walk's cursor row exists): its
    start-up is no part of what either mode measures."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(libpq_url(db), autocommit=True) as conn:
        while not conn.execute("SELECT EXISTS (SELECT 1 FROM retention_cursor)").fetchone()[0]:
            if time.monotonic() > deadline:
                raise RuntimeError("the checker's retention job did not run")
            time.sleep(0.2)


def throughput(db: str, server: Server, clients: int, seconds: float, warmup: float,
               rounds: int, batch: int, retention_seconds: int = 5) -> dict[str, Any]:
    """(b) and (d) with retention off and on, in interleaved rounds, each run from empty
    tables (so that neither mode pays for the rows another run left, nor for vacuuming
    them): the medians, their ratio, and the median of each round's ratio (a round's two
    runs are adjacent in time, so the pair shares whatever else the machine does)."""
    runs: dict[str, list[float]] = {}
    loads: dict[str, Callable[[], dict[str, Any]]] = {
        "b": lambda: txmsg_load.pairs(server, clients, seconds, warmup),
        "d": lambda: txmsg_load.pairs(server, clients, seconds, warmup, messages=batch),
    }
    for _ in range(rounds):
        for name, load in loads.items():
            for mode, retention in (("off", YEAR), ("on", retention_seconds)):
                truncate_all(db)
                checker = Checker(db, retention_seconds=retention,
                                  retention_interval_seconds=1)
                try:
                    _wait_for_first_run(db)
                    result = load()
                finally:
                    checker.stop()
                key = "per_second" if name == "b" else "messages_per_second"
                runs.setdefault(f"{name}_{mode}", []).append(result[key])
    out: dict[str, Any] = {"rounds": runs, "retention_seconds": retention_seconds}
    for key, values in runs.items():
        out[key] = sorted(values)[len(values) // 2]
    for name in loads:
        out[f"{name}_on_over_off"] = round(out[f"{name}_on"] / out[f"{name}_off"], 3)
        paired = sorted(on / off for on, off in zip(runs[f"{name}_on"], runs[f"{name}_off"],
                                                      strict=True))
        out[f"{name}_paired_on_over_off"] = round(paired[len(paired) // 2], 3)
    return out


def build_expired(db: str, rows: int) -> dict[str, Any]:
    """``rows`` messages committed 30 days ago, in transactions of MESSAGES_PER_TXN,
    through the service's write path: all past retention."""
    txns = max(1, rows // MESSAGES_PER_TXN)
    started = time.monotonic()
    old = datetime.now(UTC) - timedelta(days=30)
    body = "x" * 100
    with seed.engine_of(db) as engine:
        seed.register(engine, EXPIRED_GROUP, "http://127.0.0.1:9/check", at=old)
        seed.write(engine, EXPIRED_GROUP, (
            seed.Txn(f"x-{g}", [seed.text(EXPIRED_TOPIC, body)] * MESSAGES_PER_TXN,
                     sent_at=old, resolved_at=old)
            for g in range(1, txns + 1)))
    with psycopg.connect(libpq_url(db), autocommit=True) as conn:
        conn.execute("SET statement_timeout = 0")
        conn.execute("VACUUM ANALYZE")
        size = conn.execute("SELECT pg_total_relation_size('message_log')"
                            " + pg_total_relation_size('half_message')"
                            " + pg_total_relation_size('txn') + pg_total_relation_size('op_log')"
                            ).fetchone()[0]
    return {"messages": txns * MESSAGES_PER_TXN, "transactions": txns,
            "seconds": round(time.monotonic() - started, 1), "bytes": size}


def _left(db: str) -> tuple[int, bool]:
    """(expired log rows left, whether expired transactions are left): cheap lookups."""
    with psycopg.connect(libpq_url(db), autocommit=True) as conn:
        next_offset = conn.execute("SELECT next_offset FROM topic_offset WHERE topic = %s",
                                   (EXPIRED_TOPIC,)).fetchone()[0]
        first = conn.execute("SELECT first_offset FROM topic_retention WHERE topic = %s",
                             (EXPIRED_TOPIC,)).fetchone()
        txns = conn.execute("SELECT EXISTS (SELECT 1 FROM txn WHERE producer_group = %s)",
                            (EXPIRED_GROUP,)).fetchone()[0]
    return next_offset - (first[0] if first else 0), txns


def drain(db: str, server: Server, rows: int, rate: float, clients: int,
          chunk_seconds: float = 10.0, limit_seconds: float = 3600.0) -> dict[str, Any]:
    """Build ``rows`` expired rows, measure a paced load alone, then with the retention
    job emptying them: the time to empty and the commit latency meanwhile."""
    built = build_expired(db, rows)
    baseline = txmsg_load.paced(server, clients, rate, chunk_seconds)
    chunks: list[dict[str, Any]] = []
    progress: list[tuple[float, int]] = []
    done = threading.Event()
    checker = Checker(db, retention_interval_seconds=1)
    started = time.monotonic()
    try:
        while time.monotonic() - started < limit_seconds:
            chunks.append(txmsg_load.paced(server, clients, rate, chunk_seconds))
            logs, txns = _left(db)
            progress.append((round(time.monotonic() - started, 1), logs))
            if logs == 0 and not txns:
                done.set()
                break
        emptied = round(time.monotonic() - started, 1) if done.is_set() else None
    finally:
        checker.stop()
    commits = [c["commit_ms"] for c in chunks if c.get("commit_ms")]
    return {
        "built": built, "rate": rate, "emptied_seconds": emptied,
        "messages_per_second": round(built["messages"] / emptied, 1) if emptied else None,
        "baseline_commit_ms": baseline.get("commit_ms"),
        "commit_ms_worst_chunk_p99": max((c["p99"] for c in commits), default=None),
        "commit_ms_max": max((c["max"] for c in commits), default=None),
        "commit_ms_median_chunk_p99": sorted(c["p99"] for c in commits)[len(commits) // 2]
        if commits else None,
        "achieved_rates": [c["achieved_rate"] for c in chunks],
        "errors": sum(c["errors"] for c in chunks),
        "log_rows_left": progress,
    }
