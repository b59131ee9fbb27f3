"""`txmsg ingest` as a person runs it: a real process, its output, its exit code, a real kill."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

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
    run_ingest,
    send,
)


@pytest.mark.parametrize("case", ["no-pyspark", "no-java", "no-driver", "no-database-file"])
def test_what_is_missing_is_one_line_and_a_nonzero_exit(tmp_path: Path, case: str) -> None:
    db = tmp_path / "txmsg.db"
    db.write_bytes(b"")
    env = ingest_env(f"sqlite:///{db}")
    if case == "no-pyspark":  # as after `pip install .`, without the spark extra
        blocker = tmp_path / "no-pyspark" / "pyspark"
        blocker.mkdir(parents=True)
        (blocker / "__init__.py").write_text(
            "raise ModuleNotFoundError(\"No module named 'pyspark'\", name='pyspark')\n")
        env["PYTHONPATH"] = os.pathsep.join(
            [str(blocker.parent), *filter(None, [env.get("PYTHONPATH")])])
        expected = ("txmsg ingest: PySpark is not installed; it comes with the spark extra: "
                    "pip install 'txmsg[spark]' (and a Java runtime)")
    elif case == "no-java":
        env.pop("JAVA_HOME", None)
        env["PATH"] = str(tmp_path)  # no java there
        expected = "txmsg ingest: Java not found (no java on PATH)"
    elif case == "no-driver":
        env["TXMSG_SQLITE_JDBC_JAR"] = str(tmp_path / "missing.jar")
        expected = f"txmsg ingest: sqlite JDBC driver not found at {tmp_path / 'missing.jar'}"
    else:
        env["TXMSG_DATABASE_URL"] = f"sqlite:///{tmp_path / 'absent.db'}"
        expected = f"txmsg ingest: database file {tmp_path / 'absent.db'} does not exist"

    done = run_ingest(env, tmp_path / "lake")

    assert done.returncode == 2
    assert done.stderr.startswith(expected) and done.stderr.count("\n") == 1, done.stderr
    assert done.stdout == ""


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_ingest_killed_midway_then_rerun_is_exact_and_prints_rows_per_topic(
        spark, client, database_url: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    register(client)
    send(client, "tx-1", *[{"topic": "orders", "body": f"o{i}"} for i in range(40)],
         *[{"topic": "payments", "body": f"p{i}"} for i in range(10)])
    commit(client, "tx-1")
    out = tmp_path / "lake"
    env = ingest_env(database_url, JAVA_TOOL_OPTIONS=FAST_START_JVM)

    # the first run is killed (SIGKILL, JVM included) while Spark writes its data
    with open(tmp_path / "first.log", "w") as log:
        first = subprocess.Popen([TXMSG, "ingest", "--output", str(out)], env=env,
                                 stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            deadline = time.monotonic() + 180
            while first.poll() is None and time.monotonic() < deadline:
                if any(p.is_file() for p in (out / "_staging").rglob("*")):
                    break
                time.sleep(0.02)
            assert first.poll() is None, "the run ended before it could be killed"
        finally:
            os.killpg(first.pid, signal.SIGKILL)
            first.wait(timeout=30)
    assert (out / "_pending.json").exists() and not (out / "_checkpoint.json").exists()

    done = run_ingest(env, out)

    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert any(line.split() == ["orders", "40", "rows", "(offsets", "0..39)"] for line in lines)
    assert any(line.split() == ["payments", "10", "rows", "(offsets", "0..9)"] for line in lines)
    assert lines[-1].startswith("txmsg ingest: 50 rows from 2 topic(s) in ")
    assert "rows/s" in lines[-1]
    assert "Traceback" not in done.stderr
    per_topic = read_lake(spark, out).groupBy("topic").agg(
        F.count("*").alias("rows"), F.countDistinct("offset").alias("offsets"),
        F.min("offset").alias("low"), F.max("offset").alias("high"),
        F.countDistinct("body").alias("bodies"))
    assertDataFrameEqual(per_topic, [
        Row(topic="orders", rows=40, offsets=40, low=0, high=39, bodies=40),
        Row(topic="payments", rows=10, offsets=10, low=0, high=9, bodies=10),
    ])
    assert checkpoint(out) == {"orders": 40, "payments": 10}

    # nothing new: the run ends without starting Spark
    again = run_ingest(env, out)
    assert again.returncode == 0, again.stderr
    assert "Spark" not in again.stdout
    assert any(line.split() == ["orders", "0", "rows", "(nothing", "new)"]
               for line in again.stdout.splitlines())
    assert again.stdout.splitlines()[-1].startswith("txmsg ingest: 0 rows from 0 topic(s) in ")
