"""A line every few seconds while Spark reads: rows read so far, of how many, how fast."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Self

from pyspark.sql import SparkSession

INTERVAL_SECONDS = 10.0


def rows_read(spark: SparkSession) -> int | None:
    """Records read by the stages running now, counted as their tasks finish.

    Spark keeps these in its status store whether or not its web UI runs; None when this
    Spark does not expose it.
    """
    try:
        stages = spark.sparkContext._jsc.sc().statusStore().activeStages()
        return sum(int(stages.apply(i).inputRecords()) for i in range(stages.size()))
    except Exception:  # noqa: BLE001 - an internal API: progress is a courtesy, not the run
        return None


class Progress:
    """Prints ``line(read, elapsed)`` every ``interval`` seconds until the block ends."""

    def __init__(self, spark: SparkSession, total: int, say: Callable[[str], None],
                 interval: float = INTERVAL_SECONDS) -> None:
        self.spark, self.total, self.say, self.interval = spark, total, say, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="ingest-progress")
        self._started = 0.0

    def __enter__(self) -> Self:
        self._started = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        most = 0  # a finished stage leaves the running ones: its rows stay read
        while not self._stop.wait(self.interval):
            read = rows_read(self.spark)
            if read is None:
                return
            most = max(most, read)
            self.say(progress_line(most, self.total, time.monotonic() - self._started))


def progress_line(read: int, total: int, seconds: float) -> str:
    read = min(read, total)
    rate = read / seconds if seconds > 0 else 0.0
    percent = 100 * read / total if total else 100.0
    return (f"  ... {read:,} of {total:,} rows read and written ({percent:.0f}%) in "
            f"{seconds:.0f} s, {rate:,.0f} rows/s")
