"""Spark job: incremental ingestion of committed messages into Parquet."""
