"""`spark.readStream.format("txmsg")`: the committed messages as a Structured Streaming
source, on the tests' one local session (queries into the memory sink or Spark's file sink);
one query runs as its own process, to be killed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import Row
from pyspark.sql import functions as F
from pyspark.sql.types import StructType
from pyspark.testing import assertDataFrameEqual, assertSchemaEqual

from app.config import Settings
from app.domain.clock import utcnow
from app.domain.retention import Retention
from spark_outbox import streaming
from spark_outbox.job import run
from tests.spark.helpers import (
    FAST_START_JVM,
    LAKE_SCHEMA,
    commit,
    ingest_env,
    read_lake,
    register,
    send,
)

pytestmark = [pytest.mark.settings(retention_seconds=3600), pytest.mark.spark]

# the stream's columns: the lake's, with topic and commit_date where transform puts them
_LAKE = {f.name: f for f in LAKE_SCHEMA.fields}
STREAM_SCHEMA = StructType([_LAKE[name] for name in (
    "offset", "message_id", "transaction_id", "producer_group", "topic", "keys", "tag",
    "ordering_key", "properties", "body", "body_bytes", "created_at", "committed_at",
    "commit_date")])


@pytest.fixture
def txmsg_stream(spark, tmp_path: Path):  # type: ignore[no-untyped-def]
    """Starts txmsg queries into the memory sink (table ``name``); stops them after the test."""
    streaming.register(spark)
    started: list[Any] = []

    def start(settings: Settings, name: str, trigger: dict[str, Any] | None = None,
              **options: str) -> Any:
        reader = spark.readStream.format("txmsg").option("url", settings.database_url)
        for key, value in options.items():
            reader = reader.option(key, value)
        writer = (reader.load().writeStream.format("memory").queryName(name)
                  .option("checkpointLocation", str(tmp_path / f"checkpoint-{name}")))
        query = writer.trigger(**(trigger or {"processingTime": "0 seconds"})).start()
        started.append(query)
        return query

    yield start
    for query in started:
        query.stop()


def _commit(client, topic: str, n: int, tx: str) -> None:  # type: ignore[no-untyped-def]
    send(client, tx, *[{"topic": topic, "body": f"{topic} {i}"} for i in range(n)])
    commit(client, tx)


def _expire_everything(app) -> None:  # type: ignore[no-untyped-def]
    state = app.extensions["txmsg"]
    Retention(state.engine, state.settings, clock=lambda: utcnow() + timedelta(hours=2)).run()


def _offsets(spark, name: str) -> list[tuple[str, int]]:  # type: ignore[no-untyped-def]
    return [(r.topic, r.offset) for r in
            spark.table(name).select("topic", "offset").orderBy("topic", "offset").collect()]


def test_the_stream_gives_the_rows_ingest_writes_and_available_now_ends(
        spark, client, settings: Settings, txmsg_stream, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    register(client)
    send(client, "tx-1", {"topic": "orders", "body": "héllo", "keys": ["o-1", "o-1b"],
                          "tag": "created", "ordering_key": "order-1",
                          "properties": {"region": "eu"}},
         {"topic": "orders", "body_base64": "AAEC/w=="}, {"topic": "payments", "body": "paid"})
    commit(client, "tx-1")
    out = tmp_path / "lake"
    run(spark, settings, out, None)

    query = txmsg_stream(settings, "all", {"availableNow": True}, startingOffsets="earliest")
    query.awaitTermination(120)

    assert not query.isActive and query.exception() is None
    got = spark.table("all")
    assertSchemaEqual(got.schema, STREAM_SCHEMA)
    # every column as `txmsg ingest` writes it, timestamps and commit_date included
    assertDataFrameEqual(got, read_lake(spark, out).select(got.columns))
    assert [(r.topic, r.offset, r.ordering_key) for r in read_lake(spark, out).orderBy(
        "topic", "offset").collect()] == [("orders", 0, "order-1"), ("orders", 1, None),
                                          ("payments", 0, None)]
    assert json.loads(query.lastProgress["sources"][0]["endOffset"]) == {"orders": 2,
                                                                        "payments": 1}


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_pattern_takes_topics_created_later_and_each_trigger_reads_at_most_its_limit(
        spark, client, settings: Settings, txmsg_stream) -> None:  # type: ignore[no-untyped-def]
    register(client)
    _commit(client, "orders-a", 10, "tx-a")
    query = txmsg_stream(settings, "pattern", topicsPattern="orders-.*",
                         startingOffsets="earliest", maxOffsetsPerTrigger="4")
    query.processAllAvailable()
    assert _offsets(spark, "pattern") == [("orders-a", i) for i in range(10)]

    _commit(client, "orders-b", 3, "tx-b")  # a topic the query has never seen
    _commit(client, "audit", 2, "tx-c")  # not matched
    _commit(client, "orders-a", 2, "tx-d")
    query.processAllAvailable()

    assert _offsets(spark, "pattern") == ([("orders-a", i) for i in range(12)]
                                          + [("orders-b", i) for i in range(3)])
    batches = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    # how the later commits fall into triggers depends on timing; the limit never does
    assert batches[:3] == [4, 4, 2] and sum(batches) == 15 and max(batches) == 4, batches


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_starting_offsets_and_offsets_retention_deleted_first(
        spark, client, app, settings: Settings, txmsg_stream) -> None:  # type: ignore[no-untyped-def]
    register(client)
    _commit(client, "orders", 5, "tx-1")
    latest = txmsg_stream(settings, "latest", topics="orders")
    latest.processAllAvailable()
    _commit(client, "orders", 2, "tx-2")
    latest.processAllAvailable()
    assert _offsets(spark, "latest") == [("orders", 5), ("orders", 6)]

    given = txmsg_stream(settings, "given", {"availableNow": True},
                         startingOffsets='{"orders": 3}')
    given.awaitTermination(120)
    assert _offsets(spark, "given") == [("orders", i) for i in range(3, 7)]

    _expire_everything(app)
    _commit(client, "orders", 1, "tx-3")
    strict = txmsg_stream(settings, "strict", {"availableNow": True},
                          startingOffsets='{"orders": 0}', failOnDataLoss="true")
    with pytest.raises(Exception, match=r"txmsg stream: GAP orders offsets 0\.\.6 \(7 messages "
                       r"expired before ingestion\); failOnDataLoss is true"):
        strict.awaitTermination(120)
    lenient = txmsg_stream(settings, "lenient", {"availableNow": True},
                           startingOffsets='{"orders": 0}')
    lenient.awaitTermination(120)
    assert lenient.exception() is None and _offsets(spark, "lenient") == [("orders", 7)]


@pytest.mark.parametrize("options, message", [
    ({"topics": "a", "topicsPattern": "a.*"}, "give topics or topicsPattern, not both"),
    ({"topicsPattern": "(a"}, "topicsPattern '(a' is not a regular expression"),
    ({"startingOffsets": "first"}, "startingOffsets is earliest, latest or JSON"),
    ({"topics": "a", "startingOffsets": '{"b": 1}'}, "names topics the query does not read"),
    ({"maxOffsetsPerTrigger": "0"}, "maxoffsetspertrigger is a positive number"),
    ({"topics": "no spaces"}, "'no spaces' must match"),
])
def test_options_are_checked_when_the_stream_is_defined(
        spark, options: dict[str, str], message: str) -> None:  # type: ignore[no-untyped-def]
    streaming.register(spark)
    reader = spark.readStream.format("txmsg").option("url", "sqlite:////nonexistent.db")
    with pytest.raises(Exception, match="txmsg stream: ") as caught:
        reader.options(**options).load()
    assert message in str(caught.value)


@pytest.mark.slow
@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_query_killed_midway_then_restarted_writes_each_offset_once(
        spark, client, app, database_url: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    register(client)
    _commit(client, "gone", 3, "tx-gone")
    _expire_everything(app)  # offsets 0..2 of "gone" expire before the query reads them
    _commit(client, "gone", 2, "tx-gone-2")
    _commit(client, "orders", 60, "tx-orders")
    out, checkpoint = tmp_path / "sink", tmp_path / "checkpoint"
    options = {"url": database_url, "startingOffsets": '{"gone": 0}',
               "maxOffsetsPerTrigger": "7"}
    env = ingest_env(database_url, JAVA_TOOL_OPTIONS=FAST_START_JVM)
    committed = checkpoint / "commits"

    with open(tmp_path / "query.log", "w") as log:
        query = subprocess.Popen(
            [sys.executable, "-m", "tests.spark.stream_query", "--output", str(out),
             "--checkpoint", str(checkpoint), *[f"--option={k}={v}" for k, v in options.items()]],
            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            deadline = time.monotonic() + 180
            while query.poll() is None and time.monotonic() < deadline:
                if len(list(committed.glob("[0-9]*"))) >= 3:
                    break
                time.sleep(0.02)
            assert query.poll() is None, (tmp_path / "query.log").read_text()[-3000:]
        finally:
            os.killpg(query.pid, signal.SIGKILL)
            query.wait(timeout=30)
    assert len(list(committed.glob("[0-9]*"))) < 10  # killed before the end
    log_text = (tmp_path / "query.log").read_text()
    assert "txmsg stream: GAP gone offsets 0..2 (3 messages expired before ingestion)" \
        in log_text, log_text[-3000:]

    streaming.register(spark)  # the same query, restarted here: Trigger.AvailableNow
    reader = spark.readStream.format("txmsg").options(**options).load()
    again = (reader.writeStream.format("parquet").partitionBy("topic", "commit_date")
             .option("path", str(out)).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    again.awaitTermination(120)
    assert again.exception() is None

    per_topic = spark.read.parquet(str(out)).groupBy("topic").agg(
        F.count("*").alias("rows"), F.countDistinct("offset").alias("offsets"),
        F.min("offset").alias("low"), F.max("offset").alias("high"),
        F.countDistinct("body").alias("bodies"))
    assertDataFrameEqual(per_topic, [
        Row(topic="gone", rows=2, offsets=2, low=3, high=4, bodies=2),
        Row(topic="orders", rows=60, offsets=60, low=0, high=59, bodies=60),
    ])
