"""A line every few seconds while Spark reads: rows read so far, of how many, how fast;
then a line per topic whose count moved since the last report.

Spark's status store counts the records each task has read, whether or not its web UI
runs (at the latest when the task ends; a running task's count arrives with its
executor's heartbeats). A task reads one piece of the run (``plan.split_ranges``: the
task's partition is the piece's index), so its count is its topics' rows; a piece that
spans topics and is partly read counts against its ranges in order.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Self

from pyspark.sql import SparkSession

from spark_outbox.plan import TopicRange

INTERVAL_SECONDS = 10.0
# past this many tasks in the running stages, only the total is shown (listing every task
# every few seconds would cost the driver more than the line is worth)
MAX_TASKS_LISTED = 2_000


def rows_read(spark: SparkSession) -> int | None:
    """Records read by the stages running now; None when this Spark does not expose it."""
    try:
        stages = spark.sparkContext._jsc.sc().statusStore().activeStages()
        return sum(int(stages.apply(i).inputRecords()) for i in range(stages.size()))
    except Exception:  # noqa: BLE001 - an internal API: progress is a courtesy, not the run
        return None


def rows_read_per_partition(spark: SparkSession) -> dict[int, int] | None:
    """Records read so far by each task of the stages running now, by partition; None when
    this Spark does not expose it or the stages have too many tasks to list."""
    try:
        store = spark.sparkContext._jsc.sc().statusStore()
        stages = store.activeStages()
        found: dict[int, int] = {}
        for i in range(stages.size()):
            stage = stages.apply(i)
            if int(stage.numTasks()) > MAX_TASKS_LISTED:
                return None
            tasks = store.taskList(stage.stageId(), stage.attemptId(), MAX_TASKS_LISTED)
            for k in range(tasks.size()):
                task = tasks.apply(k)
                metrics = task.taskMetrics()
                if metrics.isDefined():
                    part = int(task.partitionId())
                    read = int(metrics.get().inputMetrics().recordsRead())
                    found[part] = max(found.get(part, 0), read)  # a retried task: its best
        return found
    except Exception:  # noqa: BLE001 - an internal API, as above
        return None


def rows_per_topic(pieces: Sequence[Sequence[TopicRange]],
                   read: dict[int, int]) -> dict[str, int]:
    """Rows read per topic, from the rows read per piece (``read``: piece index -> rows)."""
    topics: dict[str, int] = {r.topic: 0 for piece in pieces for r in piece}
    for index, piece in enumerate(pieces):
        left = read.get(index, 0)
        for r in piece:
            take = min(left, r.rows)
            topics[r.topic] += take
            left -= take
    return topics


class Progress:
    """Prints the progress lines every ``interval`` seconds until the block ends.

    ``pieces``: the run's read pieces in partition order (for the per-topic lines).
    """

    def __init__(self, spark: SparkSession, total: int, say: Callable[[str], None],
                 interval: float = INTERVAL_SECONDS,
                 pieces: Sequence[Sequence[TopicRange]] = ()) -> None:
        self.spark, self.total, self.say, self.interval = spark, total, say, interval
        self.pieces = list(pieces)
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
        seen: dict[int, int] = {}
        shown: dict[str, int] = {}
        sizes: dict[str, int] = {}
        for piece in self.pieces:
            for r in piece:
                sizes[r.topic] = sizes.get(r.topic, 0) + r.rows
        while not self._stop.wait(self.interval):
            by_partition = rows_read_per_partition(self.spark) if self.pieces else None
            if by_partition is not None:
                for part, read in by_partition.items():
                    seen[part] = max(seen.get(part, 0), read)
                most = max(most, sum(seen.values()))
            else:
                total = rows_read(self.spark)
                if total is None:
                    return
                most = max(most, total)
            self.say(progress_line(most, self.total, time.monotonic() - self._started))
            if by_partition is None:
                continue
            for topic, read in rows_per_topic(self.pieces, seen).items():
                if read != shown.get(topic, 0):
                    shown[topic] = read
                    self.say(topic_line(topic, read, sizes[topic]))


def progress_line(read: int, total: int, seconds: float) -> str:
    read = min(read, total)
    rate = read / seconds if seconds > 0 else 0.0
    percent = 100 * read / total if total else 100.0
    return (f"  ... {read:,} of {total:,} rows read and written ({percent:.0f}%) in "
            f"{seconds:.0f} s, {rate:,.0f} rows/s")


def topic_line(topic: str, read: int, total: int) -> str:
    percent = 100 * read / total if total else 100.0
    return f"  ...   {topic:<38} {read:>12,} of {total:,} rows read ({percent:.0f}%)"
