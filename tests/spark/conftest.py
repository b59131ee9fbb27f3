"""One local SparkSession for the whole test session (starting a JVM costs seconds).

local[2] with two shuffle partitions and no UI; both JDBC drivers on its classpath.
Without Java or the Debian JDBC jars the Spark tests skip, except in CI where they fail.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.config import Settings
from spark_outbox.session import LOG4J_CONFIG, SESSION_CONF
from tests.spark.helpers import FAST_START_JVM

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _missing() -> str | None:
    settings = Settings()
    if not (os.environ.get("JAVA_HOME") or shutil.which("java")):
        return "no Java"
    for jar in (settings.postgresql_jdbc_jar, settings.sqlite_jdbc_jar):
        if not Path(jar).is_file():
            return f"no JDBC driver at {jar}"
    return None


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    missing = _missing()
    if missing:
        if IN_CI:
            pytest.fail(f"Spark tests cannot run in CI: {missing}")
        pytest.skip(f"Spark tests need Java and the Debian JDBC jars: {missing}")
    from pyspark.sql import SparkSession

    settings = Settings()
    # the streaming source's Python (its planner and tasks) runs with txmsg's packages: the
    # JVM starts PYSPARK_PYTHON, else whatever python3 is on PATH
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master("local[2]").appName("txmsg-tests")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.jars", f"{settings.postgresql_jdbc_jar},{settings.sqlite_jdbc_jar}")
        .config("spark.driver.extraJavaOptions",
                f"-Dlog4j2.configurationFile={LOG4J_CONFIG} {FAST_START_JVM}")
    )
    for key, value in SESSION_CONF.items():  # the lake's settings, as `txmsg ingest` has them
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    yield session
    session.stop()
