"""transform: the view's rows become the Parquet columns, whatever the session time zone."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest
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
from pyspark.testing import assertDataFrameEqual, assertSchemaEqual

from spark_outbox.job import transform

pytestmark = pytest.mark.spark

RAW = StructType([
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

OUT = StructType([
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

T0 = datetime(2026, 11, 22, 23, 59, 58, 123456, tzinfo=UTC)
LAST_MICRO = datetime(2026, 11, 22, 23, 59, 59, 999999, tzinfo=UTC)
MIDNIGHT = datetime(2026, 11, 23, 0, 0, 0, tzinfo=UTC)


def test_transform_parses_json_renames_offset_and_dates_commits_in_utc(spark) -> None:  # type: ignore[no-untyped-def]
    raw = spark.createDataFrame([
        ("orders", 7, "M1", "tx-1", "g", '["k1","k2"]', "created", "cart-9", '{"a":"1","b":"x y"}',
         "hé", "hé".encode(), T0, LAST_MICRO),
        ("orders", 8, "M2", "tx-1", "g", "[]", None, None, "{}", None, b"\x00\xff", T0, MIDNIGHT),
    ], RAW)
    before = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "America/Los_Angeles")
    try:
        out = transform(raw)
        assertSchemaEqual(out.schema, OUT)
        assertDataFrameEqual(out, spark.createDataFrame([
            (7, "M1", "tx-1", "g", "orders", ["k1", "k2"], "created", "cart-9",
             {"a": "1", "b": "x y"},
             "hé", "hé".encode(), T0, LAST_MICRO, date(2026, 11, 22)),
            (8, "M2", "tx-1", "g", "orders", [], None, None, {}, None, b"\x00\xff", T0, MIDNIGHT,
             date(2026, 11, 23)),
        ], OUT))
    finally:
        spark.conf.set("spark.sql.session.timeZone", before)


def test_transform_refuses_keys_that_are_not_json(spark) -> None:  # type: ignore[no-untyped-def]
    raw = spark.createDataFrame([
        ("orders", 0, "M1", "tx-1", "g", "not json", None, None, "{}", "x", b"x", T0, T0),
    ], RAW)
    with pytest.raises(Exception, match="MALFORMED_RECORD_IN_PARSING"):
        transform(raw).collect()


@pytest.mark.parametrize("column, value", [("keys", '{"k": "v"}'), ("properties", '["a"]')])
def test_transform_refuses_json_of_another_shape(spark, column: str, value: str) -> None:  # type: ignore[no-untyped-def]
    row = {"keys": "[]", "properties": "{}", column: value}
    raw = spark.createDataFrame([
        ("orders", 0, "M1", "tx-1", "g", row["keys"], None, None, row["properties"], "x", b"x",
         T0, T0),
    ], RAW)
    with pytest.raises(Exception, match="INVALID_VARIANT_CAST"):
        transform(raw).collect()
