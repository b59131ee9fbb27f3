"""`txmsg ingest --follow` as a person runs it: one process keeps the lake current, a kill -9
at any moment then a restart leaves each (topic, offset) once, SIGTERM ends it cleanly; the
lake's timestamps are Parquet TIMESTAMP(MICROS, UTC) as other readers see them."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import Row
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from tests.spark.helpers import (
    FAST_START_JVM,
    TXMSG,
    checkpoint,
    commit,
    ingest_env,
    read_lake,
    register,
    send,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _commit(client, topic: str, n: int, first: int, tx: str) -> None:  # type: ignore[no-untyped-def]
    send(client, tx, *[{"topic": topic, "body": f"{topic} {first + i}"} for i in range(n)])
    commit(client, tx)


def _wait(what: str, ready: Callable[[], bool], proc: subprocess.Popen[str], log: Path) -> None:
    deadline = time.monotonic() + 180
    while not ready():
        assert proc.poll() is None, f"exited {proc.returncode}: {log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"{what}: {log.read_text()[-3000:]}"
        time.sleep(0.05)


def _start(env: dict[str, str], out: Path, log: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([TXMSG, "ingest", "--output", str(out), "--follow", "--interval",
                             "0.2"], env=env, stdout=log.open("w"), stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_follow_keeps_the_lake_current_through_a_kill_and_stops_on_sigterm(
        spark, client, database_url: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    register(client)
    _commit(client, "orders", 20, 0, "tx-1")
    _commit(client, "payments", 5, 0, "tx-2")
    out = tmp_path / "lake"
    env = ingest_env(database_url, JAVA_TOOL_OPTIONS=FAST_START_JVM)

    first_log = tmp_path / "first.log"
    first = _start(env, out, first_log)
    try:
        _wait("the first commits in the lake",
              lambda: (out / "_checkpoint.json").exists()
              and checkpoint(out) == {"orders": 20, "payments": 5}, first, first_log)
        _commit(client, "orders", 20, 20, "tx-3")
        # killed while it writes them, if it is caught at it (else just after)
        deadline = time.monotonic() + 30
        while not (out / "_pending.json").exists() and checkpoint(out)["orders"] < 40 \
                and time.monotonic() < deadline:
            time.sleep(0.005)
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(timeout=30)

    second_log = tmp_path / "second.log"
    second = _start(env, out, second_log)
    try:
        _commit(client, "payments", 5, 5, "tx-4")
        _wait("every commit in the lake",
              lambda: checkpoint(out) == {"orders": 40, "payments": 10}, second, second_log)
        second.send_signal(signal.SIGTERM)
        assert second.wait(timeout=60) == 0, second_log.read_text()
    finally:
        if second.poll() is None:
            os.killpg(second.pid, signal.SIGKILL)
            second.wait(timeout=30)

    printed = second_log.read_text()
    assert printed.count("  Spark ") == 1, printed  # one session for every run
    assert printed.splitlines()[-1].startswith("txmsg ingest: stopped after "), printed
    assert "Traceback" not in printed
    per_topic = read_lake(spark, out).groupBy("topic").agg(
        F.count("*").alias("rows"), F.countDistinct("offset").alias("offsets"),
        F.min("offset").alias("low"), F.max("offset").alias("high"),
        F.countDistinct("body").alias("bodies"))
    assertDataFrameEqual(per_topic, [
        Row(topic="orders", rows=40, offsets=40, low=0, high=39, bodies=40),
        Row(topic="payments", rows=10, offsets=10, low=0, high=9, bodies=10),
    ])
    # written by `txmsg ingest`'s own session: instants, in microseconds, not INT96
    for written in out.glob("topic=*/commit_date=*/*.parquet"):
        schema = pq.read_schema(written)
        assert schema.field("created_at").type == pa.timestamp("us", tz="UTC"), written
        assert schema.field("committed_at").type == pa.timestamp("us", tz="UTC"), written
