"""Producing committed data through the real API, and reading the Parquet output back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

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

GROUP = "orders-svc"

# tests move tiny data: a JVM without the optimising compiler starts and runs them ~2x faster
FAST_START_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"

# the dataset as any Parquet reader sees it: file columns, then the partition directories
LAKE_SCHEMA = StructType([
    StructField("offset", LongType()),
    StructField("message_id", StringType()),
    StructField("transaction_id", StringType()),
    StructField("producer_group", StringType()),
    StructField("keys", ArrayType(StringType())),
    StructField("tag", StringType()),
    StructField("ordering_key", StringType()),
    StructField("properties", MapType(StringType(), StringType())),
    StructField("body", StringType()),
    StructField("body_bytes", BinaryType()),
    StructField("created_at", TimestampType()),
    StructField("committed_at", TimestampType()),
    StructField("topic", StringType()),
    StructField("commit_date", DateType()),
])

# the columns compared value by value (timestamps are checked for sense separately)
COMPARED = ["topic", "offset", "message_id", "transaction_id", "producer_group", "keys", "tag",
            "properties", "body", "body_bytes"]
COMPARED_SCHEMA = StructType([f for f in LAKE_SCHEMA.fields if f.name in COMPARED])
COMPARED_SCHEMA = StructType([COMPARED_SCHEMA[c] for c in COMPARED])


def register(client: Any) -> None:
    r = client.put(f"/v1/producer-groups/{GROUP}", json={"check_urls": ["http://127.0.0.1:9/c"]})
    assert r.status_code == 200, r.json


def send(client: Any, transaction_id: str, *messages: dict[str, Any]) -> list[str]:
    """Send one transaction; its message ids, in order."""
    r = client.post(f"/v1/producer-groups/{GROUP}/transactions",
                    json={"transaction_id": transaction_id, "messages": list(messages)})
    assert r.status_code == 201, r.json
    return [m["message_id"] for m in r.json["messages"]]


def commit(client: Any, transaction_id: str) -> list[tuple[str, int]]:
    r = client.post(f"/v1/producer-groups/{GROUP}/transactions/{transaction_id}/commit")
    assert r.status_code == 200, r.json
    return [(m["topic"], m["offset"]) for m in r.json["messages"]]


def rollback(client: Any, transaction_id: str) -> None:
    r = client.post(f"/v1/producer-groups/{GROUP}/transactions/{transaction_id}/rollback")
    assert r.status_code == 200, r.json


def read_lake(spark: Any, path: Path) -> Any:
    return spark.read.parquet(str(path))


def expected(spark: Any, rows: list[tuple]) -> Any:
    return spark.createDataFrame(rows, COMPARED_SCHEMA)


def checkpoint(path: Path) -> dict[str, int]:
    return json.loads((path / "_checkpoint.json").read_text())["topics"]


def data_files(path: Path) -> list[str]:
    """The dataset's files as "topic=T/name" (the commit_date level is today's date)."""
    return sorted(f"{f.parent.parent.name}/{f.name}" for f in path.glob("topic=*/commit_date=*/*")
                  if not f.name.startswith((".", "_")))


TXMSG = str(Path(sys.executable).parent / "txmsg")


def ingest_env(database_url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TXMSG_")}
    env.update(TXMSG_DATABASE_URL=database_url, **extra)
    return env


def run_ingest(env: dict[str, str], out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([TXMSG, "ingest", "--output", str(out), *args], env=env,
                          capture_output=True, text=True, timeout=240, check=False)
