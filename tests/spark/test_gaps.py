"""Offsets that retention deleted before `txmsg ingest` read them: reported, skipped, and
the data that exists still written once."""

from __future__ import annotations

import subprocess
from datetime import timedelta
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from app.config import Settings
from app.domain.clock import utcnow
from app.domain.retention import Retention
from spark_outbox.gaps import Gap, find_gaps, past_gaps
from spark_outbox.job import run
from tests.spark.helpers import (
    FAST_START_JVM,
    checkpoint,
    commit,
    ingest_env,
    read_lake,
    register,
    run_ingest,
    send,
)

pytestmark = pytest.mark.settings(retention_seconds=3600)


def test_a_gap_is_what_lies_between_the_checkpoint_and_the_first_retained_offset() -> None:
    gaps = find_gaps({"a": 5, "b": 7, "c": 2}, {"a": 9, "b": 7, "c": 0, "d": 4, "f": 8},
                     {"a": 12, "b": 9, "c": 3, "d": 4, "f": 6}, ["a", "b", "c", "d", "e", "f"])
    assert gaps == [Gap("a", 5, 9), Gap("d", 0, 4), Gap("f", 0, 6)]
    assert past_gaps({"a": 5, "b": 7}, gaps) == {"a": 9, "b": 7, "d": 4, "f": 6}
    assert gaps[0].line() == "txmsg ingest: GAP a offsets 5..8 (4 messages expired before ingestion)"


def _expire_everything(app) -> None:  # type: ignore[no-untyped-def]
    state = app.extensions["txmsg"]
    Retention(state.engine, state.settings, clock=lambda: utcnow() + timedelta(hours=2)).run()


def _commit(client, topic: str, n: int, prefix: str) -> None:  # type: ignore[no-untyped-def]
    for i in range(n):
        send(client, f"{prefix}-{i}", {"topic": topic, "body": f"{prefix}{i}"})
        commit(client, f"{prefix}-{i}")


@pytest.mark.spark
def test_expired_offsets_are_reported_skipped_and_the_rest_written_once(
        spark, client, app, settings: Settings, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    register(client)
    _commit(client, "orders", 5, "a")
    out = tmp_path / "lake"
    assert run(spark, settings, out, None).gaps == []
    _commit(client, "orders", 5, "b")
    _commit(client, "payments", 3, "p")
    _expire_everything(app)
    _commit(client, "orders", 2, "c")

    report = run(spark, settings, out, None)

    assert report.gaps == [Gap("orders", 5, 10), Gap("payments", 0, 3)]
    assert report.rows == {"orders": 2}
    assert checkpoint(out) == {"orders": 12, "payments": 3}
    lake = read_lake(spark, out).orderBy("topic", "offset")
    assert [(r.topic, r.offset, r.body) for r in lake.select("topic", "offset", "body").collect()
            ] == [("orders", i, f"a{i}") for i in range(5)] + [("orders", 10, "c0"),
                                                               ("orders", 11, "c1")]
    assert lake.groupBy("topic", "offset").count().where(F.col("count") > 1).count() == 0

    again = run(spark, settings, out, None)
    assert again.gaps == [] and again.ranges == []


@pytest.mark.spark
@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_the_cli_prints_one_gap_line_per_range_and_exits_3(
        spark, client, app, database_url: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    register(client)
    _commit(client, "orders", 4, "a")
    _expire_everything(app)
    _commit(client, "orders", 1, "b")
    env = ingest_env(database_url, JAVA_TOOL_OPTIONS=FAST_START_JVM)

    done: subprocess.CompletedProcess[str] = run_ingest(env, tmp_path / "lake")

    assert done.returncode == 3, done.stderr
    gap_lines = [line for line in done.stderr.splitlines() if " GAP " in line]
    assert gap_lines == [
        "txmsg ingest: GAP orders offsets 0..3 (4 messages expired before ingestion)"]
    assert checkpoint(tmp_path / "lake") == {"orders": 5}
    assert run_ingest(env, tmp_path / "lake").returncode == 0
