"""`txmsg ingest` on a Spark standalone cluster (a master and two workers, separate JVM
processes): exact and incremental, as on local[*]; and the streaming source, whose tasks run
Python on the executors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from pyspark.sql import Row
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from tests.ha.infra import SparkCluster
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

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.postgres, pytest.mark.timeout(900)]


def per_topic(spark, out: Path) -> list[Row]:  # type: ignore[no-untyped-def]
    return read_lake(spark, out).groupBy("topic").agg(
        F.count("*").alias("rows"), F.countDistinct("offset").alias("offsets"),
        F.min("offset").alias("low"), F.max("offset").alias("high"),
        F.countDistinct("body").alias("bodies")).collect()


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_ingest_on_a_standalone_cluster_is_exact_and_incremental(
        spark_cluster: SparkCluster, spark, client, database_url: str,  # type: ignore[no-untyped-def]
        tmp_path: Path) -> None:
    register(client)
    send(client, "tx-1", *[{"topic": "orders", "body": f"o{i}"} for i in range(30)],
         *[{"topic": "payments", "body": f"p{i}"} for i in range(10)])
    commit(client, "tx-1")
    out = tmp_path / "lake"
    env = ingest_env(database_url, TXMSG_SPARK_MASTER=spark_cluster.master,
                     SPARK_LOCAL_IP="127.0.0.1", JAVA_TOOL_OPTIONS=FAST_START_JVM)

    first = run_ingest(env, out)

    print(first.stdout)  # its timings: Spark's start, the read and write
    assert first.returncode == 0, first.stderr
    assert checkpoint(out) == {"orders": 30, "payments": 10}
    apps = [a for a in (spark_cluster.state() or {}).get("completedapps", [])
            if a["name"] == "txmsg-ingest"]
    assert len(apps) == 1, spark_cluster.state()
    ran_on = {d.parent.parent for d in spark_cluster.executors_of(apps[0]["id"])}
    assert ran_on == set(spark_cluster.work_dirs), "not every worker ran an executor"

    send(client, "tx-2", *[{"topic": "orders", "body": f"o{i}"} for i in range(30, 45)])
    commit(client, "tx-2")
    second = run_ingest(env, out)

    assert second.returncode == 0, second.stderr
    assert any(line.split() == ["orders", "15", "rows", "(offsets", "30..44)"]
               for line in second.stdout.splitlines()), second.stdout
    assert checkpoint(out) == {"orders": 45, "payments": 10}
    assertDataFrameEqual(per_topic(spark, out), [
        Row(topic="orders", rows=45, offsets=45, low=0, high=44, bodies=45),
        Row(topic="payments", rows=10, offsets=10, low=0, high=9, bodies=10),
    ])


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_the_streaming_source_on_a_standalone_cluster_reads_each_offset_once(
        spark_cluster: SparkCluster, spark, client, database_url: str,  # type: ignore[no-untyped-def]
        tmp_path: Path) -> None:
    register(client)
    send(client, "tx-1", *[{"topic": "orders", "body": f"o{i}"} for i in range(30)],
         *[{"topic": "payments", "body": f"p{i}"} for i in range(10)])
    commit(client, "tx-1")
    out = tmp_path / "sink"
    # the source's Python runs on the executors: this Python, with txmsg's packages
    env = ingest_env(database_url, TXMSG_SPARK_MASTER=spark_cluster.master,
                     SPARK_LOCAL_IP="127.0.0.1", JAVA_TOOL_OPTIONS=FAST_START_JVM,
                     PYSPARK_PYTHON=sys.executable)

    done = subprocess.run(
        [sys.executable, "-m", "tests.spark.stream_query", "--output", str(out),
         "--checkpoint", str(tmp_path / "checkpoint"), "--available-now",
         "--option=startingOffsets=earliest", "--option=maxOffsetsPerTrigger=25",
         "--option=minPartitions=2"],
        env=env, capture_output=True, text=True, timeout=300, check=False)

    assert done.returncode == 0, done.stderr[-3000:]
    app_id = done.stdout.split("started ", 1)[1].split()[0]
    ran_on = {d.parent.parent for d in spark_cluster.executors_of(app_id)}
    assert ran_on == set(spark_cluster.work_dirs), "not every worker ran an executor"
    assertDataFrameEqual(per_topic(spark, out), [
        Row(topic="orders", rows=30, offsets=30, low=0, high=29, bodies=30),
        Row(topic="payments", rows=10, offsets=10, low=0, high=9, bodies=10),
    ])
