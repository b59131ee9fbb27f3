"""The two shapes of the data: as read from the committed view, and as written to Parquet."""

from __future__ import annotations

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DateType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

# what ``extract`` returns on every store: the view's columns, keys/properties as JSON text
RAW_SCHEMA = StructType([
    StructField("topic", StringType()),
    StructField("queue_offset", LongType()),
    StructField("message_id", StringType()),
    StructField("transaction_id", StringType()),
    StructField("producer_group", StringType()),
    StructField("keys", StringType()),
    StructField("tag", StringType()),
    StructField("ordering_key", StringType()),
    StructField("properties", StringType()),
    StructField("body", StringType()),
    StructField("body_bytes", BinaryType()),
    StructField("created_at", TimestampType()),
    StructField("committed_at", TimestampType()),
])

# what ``transform`` returns, and the streaming source's schema (``spark_outbox.streaming``);
# ``topic`` and ``commit_date`` become directories on write
OUTPUT_SCHEMA = StructType([
    StructField("offset", LongType()),
    StructField("message_id", StringType()),
    StructField("transaction_id", StringType()),
    StructField("producer_group", StringType()),
    StructField("topic", StringType()),
    StructField("keys", ArrayType(StringType())),
    StructField("tag", StringType()),
    StructField("ordering_key", StringType()),
    StructField("properties", MapType(StringType(), StringType())),
    StructField("body", StringType()),
    StructField("body_bytes", BinaryType()),
    StructField("created_at", TimestampType()),
    StructField("committed_at", TimestampType()),
    StructField("commit_date", DateType()),
])

PARTITION_COLUMNS = ("topic", "commit_date")
