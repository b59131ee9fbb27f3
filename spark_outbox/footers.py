"""What a Parquet file holds, from its footer alone: rows, and the range of one column.

Read through the JVM's own parquet-hadoop (Spark ships it), so the driver needs no other
Parquet library and reads a few kilobytes per file instead of the data.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import SparkSession

from spark_outbox.errors import IngestError


@dataclass(frozen=True)
class ColumnRange:
    rows: int
    low: int | None  # None when the file has no rows
    high: int | None


def column_range(spark: SparkSession, path: Path, column: str) -> ColumnRange:
    """Rows of the Parquet file at ``path`` and min/max of its int64 ``column``, per the footer."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    input_file = jvm.org.apache.parquet.hadoop.util.HadoopInputFile.fromPath(
        jvm.org.apache.hadoop.fs.Path("file", None, str(path)), conf)  # taken literally
    reader = jvm.org.apache.parquet.hadoop.ParquetFileReader.open(input_file)
    rows, low, high = 0, None, None
    try:
        blocks = reader.getFooter().getBlocks()
        # the column chunk's place, found once per file: a few py4j calls per row group
        index = next((i for i, c in enumerate(blocks.get(0).getColumns())
                      if c.getPath().toDotString() == column), None) if blocks.size() else None
        for block in blocks:
            count = int(block.getRowCount())
            if count == 0:
                continue
            stats = block.getColumns().get(index).getStatistics() if index is not None else None
            if stats is None or not stats.hasNonNullValue() or stats.getNumNulls() > 0:
                raise IngestError(f"{path}: no min/max of {column} in a row group's footer; "
                                  "nothing was published")
            rows += count
            lo, hi = int(stats.genericGetMin()), int(stats.genericGetMax())
            low = lo if low is None else min(low, lo)
            high = hi if high is None else max(high, hi)
    finally:
        reader.close()
    return ColumnRange(rows, low, high)
