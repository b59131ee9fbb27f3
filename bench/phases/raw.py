"""The floor txmsg is measured against: plain psycopg INSERTs of message-shaped rows.

The table has the shape of ``half_message`` (a 32-character unique id, topic, tag, keys,
properties, a 1 KiB body, timestamps) with its primary key and unique index, so that
each row costs PostgreSQL what a stored message costs it.
"""

from __future__ import annotations

import os
import uuid
from datetime import UTC, datetime
from typing import Any

import psycopg

from bench.harness.load import closed_loop
from bench.harness.pgdb import database_name, libpq_url
from bench.harness.procs import CpuProbe

BODY = b"x" * 1024
DDL = """
DROP TABLE IF EXISTS bench_raw;
CREATE TABLE bench_raw (
    id bigserial PRIMARY KEY,
    message_id varchar(32) NOT NULL UNIQUE,
    topic varchar(127) NOT NULL,
    tag text,
    keys text NOT NULL,
    properties text NOT NULL,
    body bytea NOT NULL,
    body_is_text boolean NOT NULL,
    created_at timestamptz NOT NULL
)
"""
INSERT = ("INSERT INTO bench_raw (message_id, topic, tag, keys, properties, body, body_is_text,"
          " created_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)")


def _row() -> tuple[Any, ...]:
    return (uuid.uuid4().hex, "bench", None, "[]", "{}", BODY, True, datetime.now(UTC))


def _prepare(url: str) -> None:
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        conn.execute(DDL)


def _drop(url: str) -> None:
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS bench_raw")


def single_inserts(url: str, clients: int, seconds: float, warmup: float) -> dict[str, Any]:
    """(a) one row per transaction: commits per second from ``clients`` threads."""
    return _inserts(url, clients, seconds, warmup, batch=1)


def batched_inserts(url: str, clients: int, seconds: float, warmup: float,
                    batch: int = 100) -> dict[str, Any]:
    """(c) ``batch`` rows per transaction (psycopg executemany, pipelined): rows per second."""
    return _inserts(url, clients, seconds, warmup, batch=batch)


def _inserts(url: str, clients: int, seconds: float, warmup: float,
             batch: int) -> dict[str, Any]:
    _prepare(url)
    conns: list[psycopg.Connection] = []

    def make_op(_i: int):  # type: ignore[no-untyped-def]
        conn = psycopg.connect(libpq_url(url))
        conns.append(conn)
        cur = conn.cursor()

        def op() -> int:
            if batch == 1:
                cur.execute(INSERT, _row(), prepare=True)
            else:
                cur.executemany(INSERT, [_row() for _ in range(batch)])
            conn.commit()
            return batch
        return op

    try:
        return closed_loop(clients, make_op, seconds, warmup,
                           probe=CpuProbe(None, database_name(url)))
    finally:
        for c in conns:
            c.close()
        _drop(url)

if __name__ == "__main__":  # a quick look: python -m bench.phases.raw
    from bench.harness.pgdb import bench_database

    n = int(os.environ.get("CLIENTS", "32"))
    with bench_database() as db:
        print("single", single_inserts(db, n, 5, 1))
        print("batched", batched_inserts(db, n, 5, 1))
