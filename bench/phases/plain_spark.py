"""The reference for `txmsg ingest`: the JDBC → Parquet job a data engineer writes by hand.

One Spark JDBC read of the whole ``committed_messages`` view, split on ``queue_offset``
into ``--partitions`` strides, ``fetchsize`` 10000, written with
``partitionBy("topic")``: no checkpoint, no parsing of keys and properties (they stay
JSON text), no verification, Spark's default settings. Prints its timings as JSON::

    python -m bench.phases.plain_spark --database-url URL --output DIR --upper-bound N

``--trivial``: only Spark's start, ``spark.range(1).count()`` and stop, as the floor an
incremental run is compared with; ``--short-jvm``: with the JVM options `txmsg ingest`
gives a short run.
"""

from __future__ import annotations

import argparse
import json
import logging
import time

from app.config import Settings
from spark_outbox.session import LOG4J_CONFIG, SHORT_RUN_JAVA_OPTIONS
from spark_outbox.source import jdbc_source


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", required=True, help="SQLAlchemy URL of PostgreSQL")
    parser.add_argument("--output", default=None)
    parser.add_argument("--upper-bound", type=int, default=0,
                        help="the largest topic's next offset")
    parser.add_argument("--trivial", action="store_true",
                        help="start Spark, count spark.range(1), stop: nothing read")
    parser.add_argument("--short-jvm", action="store_true",
                        help=f"driver JVM with {SHORT_RUN_JAVA_OPTIONS}, as for a short run")
    parser.add_argument("--partitions", type=int, default=4)
    args = parser.parse_args()
    if not args.trivial and (args.output is None or args.upper_bound < 1):
        parser.error("--output and --upper-bound are needed to copy the rows")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    source = jdbc_source(Settings(database_url=args.database_url))
    started = time.perf_counter()

    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.appName("plain-jdbc-to-parquet")
             .config("spark.jars", str(source.jar))
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.extraJavaOptions",
                     f"-Dlog4j2.configurationFile={LOG4J_CONFIG}"
                     + (f" {SHORT_RUN_JAVA_OPTIONS}" if args.short_jvm else ""))
             .getOrCreate())
    startup = time.perf_counter() - started
    try:
        if args.trivial:
            spark.range(1).count()
        else:
            (spark.read.format("jdbc").options(**source.options())
             .option("dbtable", "committed_messages")
             .option("partitionColumn", "queue_offset").option("lowerBound", "0")
             .option("upperBound", str(args.upper_bound))
             .option("numPartitions", str(args.partitions))
             .load()
             .write.mode("overwrite").partitionBy("topic").parquet(args.output))
    finally:
        spark.stop()
    print(json.dumps({"startup_seconds": startup,
                      "job_seconds": time.perf_counter() - started - startup}))


if __name__ == "__main__":
    main()
