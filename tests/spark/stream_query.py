"""A streaming query run as its own process (``python -m tests.spark.stream_query``), so a
test can kill it (SIGKILL, JVM included) or run it against a Spark cluster: the txmsg source
into Spark's Parquet file sink, partitioned as the lake is, settings from ``TXMSG_*``."""

from __future__ import annotations

import argparse
import os
import sys

from app.config import Settings
from spark_outbox import streaming
from spark_outbox.session import build_session


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--output", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--option", action="append", default=[], help="key=value")
    parser.add_argument("--available-now", action="store_true")
    args = parser.parse_args()
    spark = build_session(Settings(), os.environ)
    streaming.register(spark)
    reader = spark.readStream.format("txmsg")
    for option in args.option:
        key, _, value = option.partition("=")
        reader = reader.option(key, value)
    writer = (reader.load().writeStream.format("parquet").partitionBy("topic", "commit_date")
              .option("path", args.output).option("checkpointLocation", args.checkpoint))
    query = writer.trigger(**({"availableNow": True} if args.available_now
                              else {"processingTime": "0 seconds"})).start()
    print(f"started {spark.sparkContext.applicationId}", flush=True)
    query.awaitTermination()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
