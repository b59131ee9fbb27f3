"""The SparkSession of an ingestion run: local by default, any cluster when asked.

Run by ``txmsg ingest``, this process launches the JVM: the master is
``TXMSG_SPARK_MASTER``, else ``SPARK_MASTER``, else Spark's own default (``spark.master``
from spark-defaults.conf, else ``local[*]``), and the JDBC driver jar travels with the
job (``spark.jars``) to the executors. Under ``spark-submit`` the JVM already runs:
its ``--master``, ``--jars`` and ``--conf`` are left as given.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from app.config import Settings
from spark_outbox.errors import EXIT_CANNOT_RUN, IngestError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

LOG4J_CONFIG = Path(__file__).resolve().with_name("log4j2.properties")
MIN_JAVA = 17
# a read piece spans few topics (see plan.split_ranges); past this many it sorts instead
MAX_OPEN_FILES_PER_TASK = 16
SHORT_RUN_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1"

# every session that writes the lake, tests' included: instants in UTC, written as Parquet
# TIMESTAMP(MICROS, UTC) (Spark's default, INT96, reads back as naive nanoseconds in other
# readers), each task keeping one open file per topic instead of sorting its rows first
SESSION_CONF = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.maxConcurrentOutputFileWriters": str(MAX_OPEN_FILES_PER_TASK),
}
# ``txmsg ingest --follow``: one session for hours of batches; what Spark keeps of finished
# jobs and queries (even without a UI) stays this small
FOLLOW_CONF = {
    "spark.ui.retainedJobs": "20",
    "spark.ui.retainedStages": "40",
    "spark.ui.retainedTasks": "2000",
    "spark.sql.ui.retainedExecutions": "20",
    "spark.sql.streaming.ui.retainedQueries": "5",
    "spark.cleaner.periodicGC.interval": "5min",
}


def under_spark_submit(environ: Mapping[str, str]) -> bool:
    # how pyspark itself knows it must attach to a running JVM instead of starting one
    return "PYSPARK_GATEWAY_PORT" in environ


def check_java(environ: Mapping[str, str]) -> None:
    """Java 17+ must be there before Spark tries to start it (else: a page of errors)."""
    java_home = environ.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if not java or not os.access(java, os.X_OK):
        where = f"JAVA_HOME={java_home} has no bin/java" if java_home else "no java on PATH"
        raise IngestError(f"Java not found ({where}): install Java {MIN_JAVA}+ "
                          "(Debian: openjdk-17-jre-headless, see scripts/ensure-system-deps.sh)",
                          EXIT_CANNOT_RUN)
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30,
                             check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise IngestError(f"cannot run {java}: {exc}", EXIT_CANNOT_RUN) from exc
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if match:
        major = int(match.group(1))
        if major == 1 and match.group(2):  # "1.8.0_392"
            major = int(match.group(2))
        if major < MIN_JAVA:
            raise IngestError(f"Spark needs Java {MIN_JAVA}+, {java} is Java {major}",
                              EXIT_CANNOT_RUN)


def build_session(settings: Settings, environ: Mapping[str, str],
                  jars: Sequence[str] = (), *, short: bool = False,
                  follow: bool = False) -> SparkSession:
    """The run's SparkSession, with ``jars`` (JDBC drivers) on the driver and executors.

    ``short``: a run of few rows, whose driver JVM (when this process starts it) compiles
    with C1 only: most of such a run is the JVM warming up, and the optimising compiler's
    threads would take CPU from it rather than pay back. ``follow``: a session kept for
    many batches (``FOLLOW_CONF``).
    """
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName("txmsg-ingest").config(
        "spark.ui.showConsoleProgress", "false")
    for key, value in (SESSION_CONF | (FOLLOW_CONF if follow else {})).items():
        builder = builder.config(key, value)
    if not under_spark_submit(environ):
        master = settings.spark_master or environ.get("SPARK_MASTER")
        if master:
            builder = builder.master(master)
        if jars:
            builder = builder.config("spark.jars", ",".join(jars))
        java_options = f"-Dlog4j2.configurationFile={LOG4J_CONFIG}"
        if short:
            java_options += f" {SHORT_RUN_JAVA_OPTIONS}"
        builder = builder.config("spark.driver.extraJavaOptions", java_options)
        if not master or master.startswith("local"):
            builder = builder.config("spark.ui.enabled", "false")  # a short local batch
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark
