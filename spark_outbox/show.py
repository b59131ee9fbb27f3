"""`python -m spark_outbox.show DIR`: an ingested Parquet dataset, read back with Spark.

Prints rows and offsets per topic, then the first messages of each topic.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.window import Window

from app.config import Settings
from spark_outbox.schema import OUTPUT_SCHEMA
from spark_outbox.session import build_session


def read(spark: SparkSession, path: str) -> DataFrame:
    """The dataset with its declared types (a topic named "007" stays a string)."""
    return spark.read.schema(OUTPUT_SCHEMA).parquet(path).select(*OUTPUT_SCHEMA.fieldNames())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="spark_outbox.show", description=__doc__.splitlines()[0])
    parser.add_argument("path", help="the --output directory of txmsg ingest")
    parser.add_argument("--rows", type=int, default=5, help="messages shown per topic")
    args = parser.parse_args(argv)
    if not os.path.isdir(args.path):
        print(f"spark_outbox.show: no dataset at {args.path}", file=sys.stderr)
        return 2
    logging.getLogger("py4j").setLevel(logging.WARNING)
    spark = build_session(Settings(), os.environ)
    try:
        lake = read(spark, args.path)
        lake.groupBy("topic").agg(
            F.count("*").alias("rows"), F.min("offset").alias("first_offset"),
            F.max("offset").alias("last_offset"), F.min("commit_date").alias("first_day"),
            F.max("commit_date").alias("last_day"),
        ).orderBy("topic").show(truncate=False)
        ranked = lake.withColumn(
            "n", F.row_number().over(Window.partitionBy("topic").orderBy("offset")))
        (ranked.where(F.col("n") <= args.rows)
         .select("topic", "offset", "transaction_id", "keys", "tag", "properties",
                 F.coalesce("body", F.concat(F.lit("<binary "), F.length("body_bytes"),
                                             F.lit(" bytes>"))).alias("body"),
                 "committed_at")
         .orderBy("topic", "offset").show(args.rows * 20, truncate=40))
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
