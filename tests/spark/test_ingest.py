"""Ingestion runs against both stores, with data produced through the real API."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from pyspark.sql import Row
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual, assertSchemaEqual
from sqlalchemy import create_engine, text

from app.config import Settings
from app.vocabulary import Op
from spark_outbox import show
from spark_outbox.dataset import OutputDir
from spark_outbox.errors import EXIT_CANNOT_RUN, IngestError
from spark_outbox.job import run, staged_rows
from spark_outbox.plan import TopicRange
from spark_outbox.progress import rows_read_per_partition
from spark_outbox.source import jdbc_source
from tests.conftest import free_port, make_settings
from tests.spark.helpers import (
    COMPARED,
    GROUP,
    LAKE_SCHEMA,
    checkpoint,
    commit,
    data_files,
    expected,
    read_lake,
    register,
    rollback,
    send,
)

pytestmark = pytest.mark.spark

ORDER_TEXT = {"topic": "orders", "body": "héllo", "keys": ["o-1", "o-1b"], "tag": "created",
              "properties": {"region": "eu"}}
ORDER_BINARY = {"topic": "orders", "body_base64": "AAEC/w=="}
PAYMENT = {"topic": "payments", "body": "paid", "keys": ["p-1"]}


class Crash(Exception):
    pass


def _timestamps_make_sense(lake, since_micros: int) -> None:  # type: ignore[no-untyped-def]
    """created <= committed, both from this test, and commit_date is the UTC commit day."""
    bad = lake.where(
        (F.col("created_at") > F.col("committed_at"))
        | (F.unix_micros("created_at") < since_micros)
        | (F.unix_micros("committed_at") > int(time.time() * 1e6) + 60_000_000)
        | (F.col("commit_date") != F.to_date("committed_at"))  # the test session is in UTC
        | F.col("created_at").isNull()
    )
    assert bad.count() == 0


def test_first_run_then_incremental_with_a_late_commit_then_nothing_twice(
        spark, client, settings: Settings, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    since = int(time.time() * 1e6) - 1_000_000
    register(client)
    late = send(client, "tx-late", ORDER_TEXT, ORDER_BINARY, PAYMENT)  # sent first, committed last
    early = send(client, "tx-early", {"topic": "orders", "body": "second", "keys": ["o-2"]})
    send(client, "tx-undone", {"topic": "orders", "body": "never"})
    rollback(client, "tx-undone")
    send(client, "tx-pending", {"topic": "orders", "body": "not yet"})
    assert commit(client, "tx-early") == [("orders", 0)]
    out = tmp_path / "lake"

    first = run(spark, settings, out, None)

    assert first.topics == ["orders"] and first.rows == {"orders": 1}
    lake = read_lake(spark, out)
    assertSchemaEqual(lake.schema, LAKE_SCHEMA)
    early_row = ("orders", 0, early[0], "tx-early", GROUP, ["o-2"], None, {}, "second",
                 b"second")
    assertDataFrameEqual(lake.select(COMPARED), expected(spark, [early_row]))
    assert checkpoint(out) == {"orders": 1}

    assert commit(client, "tx-late") == [("orders", 1), ("orders", 2), ("payments", 0)]
    # one JDBC read per offset: partition boundaries must neither drop nor repeat a row
    second = run(spark, settings, out, None, rows_per_partition=1)

    assert second.ranges == [TopicRange("orders", 1, 3), TopicRange("payments", 0, 1)]
    assert second.rows == {"orders": 2, "payments": 1}
    all_rows = [
        early_row,
        ("orders", 1, late[0], "tx-late", GROUP, ["o-1", "o-1b"], "created", {"region": "eu"},
         "héllo", "héllo".encode()),
        ("orders", 2, late[1], "tx-late", GROUP, [], None, {}, None, b"\x00\x01\x02\xff"),
        ("payments", 0, late[2], "tx-late", GROUP, ["p-1"], None, {}, "paid", b"paid"),
    ]
    lake = read_lake(spark, out)
    assertDataFrameEqual(lake.select(COMPARED), expected(spark, all_rows))
    _timestamps_make_sense(lake, since)
    assert checkpoint(out) == {"orders": 3, "payments": 1}

    third = run(spark, settings, out, None)

    assert third.ranges == [] and third.rows == {}
    assertDataFrameEqual(read_lake(spark, out).select(COMPARED), expected(spark, all_rows))
    assert data_files(out) == [
        "topic=orders/part-0000000000000000000-0000000000000000001-00000.parquet",
        "topic=orders/part-0000000000000000001-0000000000000000003-00000.parquet",
        "topic=orders/part-0000000000000000001-0000000000000000003-00001.parquet",
        "topic=payments/part-0000000000000000000-0000000000000000001-00000.parquet",
    ]
    assert sorted(p.name for p in out.iterdir()) == [
        ".lock", "_checkpoint.json", "topic=orders", "topic=payments"]


@pytest.mark.parametrize("stage", ["staged", "published"])
def test_a_run_interrupted_before_its_checkpoint_is_redone_exactly(
        spark, client, settings: Settings, tmp_path: Path, stage: str) -> None:  # type: ignore[no-untyped-def]
    register(client)
    first = send(client, "tx-1", {"topic": "orders", "body": "a"}, {"topic": "orders", "body": "b"})
    commit(client, "tx-1")
    out = tmp_path / "lake"

    def crash(at: str) -> None:
        if at == stage:
            raise Crash(at)

    with pytest.raises(Crash):
        run(spark, settings, out, None, fault=crash)

    assert not (out / "_checkpoint.json").exists()
    assert OutputDir(out).pending() == [TopicRange("orders", 0, 2)]
    if stage == "published":  # the data of the unfinished range is there, under its final name
        assert data_files(out) == [
            "topic=orders/part-0000000000000000000-0000000000000000002-00000.parquet"]
    # more commits before the rerun: it covers a larger range, so other file names
    second = send(client, "tx-2", {"topic": "orders", "body": "c"})
    commit(client, "tx-2")

    report = run(spark, settings, out, None)

    assert report.recovered == [TopicRange("orders", 0, 2)]
    assert report.ranges == [TopicRange("orders", 0, 3)] and report.rows == {"orders": 3}
    assertDataFrameEqual(read_lake(spark, out).select(COMPARED), expected(spark, [
        ("orders", 0, first[0], "tx-1", GROUP, [], None, {}, "a", b"a"),
        ("orders", 1, first[1], "tx-1", GROUP, [], None, {}, "b", b"b"),
        ("orders", 2, second[0], "tx-2", GROUP, [], None, {}, "c", b"c"),
    ]))
    assert data_files(out) == [
        "topic=orders/part-0000000000000000000-0000000000000000003-00000.parquet"]
    assert checkpoint(out) == {"orders": 3}
    assert OutputDir(out).pending() == [] and not (out / "_staging").exists()


def test_discarded_messages_only_when_named_and_internal_topics_never(
        spark, app, client, settings: Settings, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    register(client)
    lost = send(client, "tx-lost", {"topic": "orders", "body": "unanswered", "tag": "t"})
    app.extensions["txmsg"].lifecycle.finish(GROUP, "tx-lost", Op.DISCARD, source="check",
                                             check_times=15)
    kept = send(client, "tx-kept", {"topic": "orders", "body": "kept"})
    commit(client, "tx-kept")
    out = tmp_path / "lake"

    default = run(spark, settings, out, None)
    named = run(spark, settings, out, ["TRANS_CHECK_MAX_TIME_TOPIC"])

    assert default.topics == ["orders"] and default.rows == {"orders": 1}
    assert named.topics == ["TRANS_CHECK_MAX_TIME_TOPIC"]
    assert named.rows == {"TRANS_CHECK_MAX_TIME_TOPIC": 1}
    assertDataFrameEqual(read_lake(spark, out).select(COMPARED), expected(spark, [
        ("orders", 0, kept[0], "tx-kept", GROUP, [], None, {}, "kept", b"kept"),
        ("TRANS_CHECK_MAX_TIME_TOPIC", 0, lost[0], "tx-lost", GROUP, [], "t",
         {"REAL_TOPIC": "orders", "TRANSACTION_ID": "tx-lost", "PRODUCER_GROUP": GROUP,
          "CHECK_TIMES": "15"}, "unanswered", b"unanswered"),
    ]))
    with pytest.raises(IngestError, match="RMQ_SYS_TRANS_HALF_TOPIC is internal") as err:
        run(spark, settings, out, ["orders", "RMQ_SYS_TRANS_HALF_TOPIC"])
    assert err.value.exit_code == EXIT_CANNOT_RUN


@pytest.mark.parametrize("store", ["postgres-closed-port", "sqlite-not-migrated"])
def test_an_unreadable_database_is_one_clear_line(spark, tmp_path: Path, store: str) -> None:  # type: ignore[no-untyped-def]
    if store == "postgres-closed-port":
        url = f"postgresql+psycopg://txmsg:secret@127.0.0.1:{free_port()}/txmsg"
        reason = 'connection to server at "127.0.0.1", port '
    else:
        (tmp_path / "empty.db").write_bytes(b"")
        url = f"sqlite:///{tmp_path / 'empty.db'}"
        reason = "no such table: topic_watermarks"

    with pytest.raises(IngestError) as err:
        run(spark, make_settings(url), tmp_path / "lake", None)

    message = str(err.value)
    assert message.startswith("cannot read the database ") and reason in message
    assert "\n" not in message and "secret" not in message
    assert not (tmp_path / "lake" / "_checkpoint.json").exists()


def test_topic_names_that_look_like_numbers_or_need_escaping_round_trip(
        spark, client, settings: Settings, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    register(client)
    send(client, "tx-odd", {"topic": "007", "body": "x"}, {"topic": "a%b|c", "body": "y"})
    commit(client, "tx-odd")
    out = tmp_path / "lake"

    first = run(spark, settings, out, None)
    again = run(spark, settings, out, None)

    assert first.rows == {"007": 1, "a%b|c": 1} and again.ranges == []
    assert checkpoint(out) == {"007": 1, "a%b|c": 1}
    assertDataFrameEqual(show.read(spark, str(out)).select("topic", "offset", "body"),
                         [Row(topic="007", offset=0, body="x"),
                          Row(topic="a%b|c", offset=0, body="y")])


def test_one_spark_job_reads_and_writes_every_topic_and_footers_verify_it(
        spark, client, settings: Settings, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    register(client)
    send(client, "tx-1", *[{"topic": t, "body": f"{t}{i}"} for t in ("a", "b", "c")
                           for i in range(5)])
    commit(client, "tx-1")
    tracker = spark.sparkContext.statusTracker()
    group = f"one-run-{tmp_path.name}"  # job groups outlive a test in the shared session
    spark.sparkContext.setJobGroup(group, "one ingestion run")
    try:
        report = run(spark, settings, tmp_path / "lake", None, rows_per_partition=4,
                     progress_seconds=0.01)
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)

    assert report.rows == {"a": 5, "b": 5, "c": 5}
    # one job for every topic (the driver reads the watermarks itself); nothing read back
    assert len(tracker.getJobIdsForGroup(group)) == 1
    assert set(report.stages) == {"plan", "read and write", "verify", "publish"}
    lines = capsys.readouterr().out.splitlines()
    progress = [line for line in lines if "rows read and written" in line]
    assert progress and all(" of 15 rows read and written (" in line for line in progress)
    # per topic, when a count moved (a read piece's rows show once its task reports them)
    per_topic = [line.split() for line in lines if line.endswith("%)") and line not in progress]
    assert all(w[0] == "..." and w[1] in ("a", "b", "c") and w[3:7] == ["of", "5", "rows", "read"]
               and 0 < int(w[2]) <= 5 for w in per_topic), per_topic


def test_rows_read_are_seen_per_partition_while_the_stage_still_runs(
        spark, postgres_url: str) -> None:  # type: ignore[no-untyped-def]
    source = jdbc_source(make_settings(postgres_url))
    lock = 717_171
    engine = create_engine(postgres_url)
    with engine.connect() as conn:
        conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": lock})
        # partition 0 reads its 3 rows at once; partition 1 waits for the lock held here
        df = spark.read.options(**source.options()).jdbc(
            source.url, "(SELECT g FROM generate_series(1, 3) g) t",
            predicates=["true", f"pg_advisory_lock({lock}) IS NOT NULL"])
        job = threading.Thread(target=lambda: df.write.format("noop").mode("overwrite").save())
        job.start()
        try:
            deadline = time.monotonic() + 120
            found = rows_read_per_partition(spark)
            while (found or {}).get(0) != 3 and time.monotonic() < deadline:
                time.sleep(0.05)
                found = rows_read_per_partition(spark)
            # partition 1 (still running) has read nothing, or has no count yet
            assert found is not None and found.get(0) == 3 and found.get(1, 0) == 0, found
        finally:
            conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": lock})
            job.join(timeout=120)
    engine.dispose()
    assert not job.is_alive()


def test_files_that_miss_an_offset_are_not_published(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    output = OutputDir(tmp_path)
    rows = [(o, "orders") for o in (0, 1, 3)] + [(o, "payments") for o in (0, 1)]
    (spark.createDataFrame(rows, "offset long, topic string")
     .repartition(2).write.partitionBy("topic").parquet(str(output.staging / "x")))
    # the layout Spark gives a run: staging/topic=T/commit_date=D/part-...
    for topic_dir in (output.staging / "x").glob("topic=*"):
        day = output.staging / topic_dir.name / "commit_date=2026-11-23"
        day.mkdir(parents=True)
        for f in topic_dir.glob("part-*"):
            f.rename(day / f.name)

    assert staged_rows(spark, output, [TopicRange("payments", 0, 2)]) == {"payments": 2}
    with pytest.raises(IngestError, match=r"topic orders: offsets \[0, 4\) should give 4 rows, "
                       r"the written files hold 3 \(offsets 0..3\); nothing was published"):
        staged_rows(spark, output, [TopicRange("orders", 0, 4), TopicRange("payments", 0, 2)])
    with pytest.raises(IngestError, match="should give 3 rows, the written files hold 3 "
                       r"\(offsets 0..3\)"):
        staged_rows(spark, output, [TopicRange("orders", 0, 3)])
