"""``spark.readStream.format("txmsg")``: the committed messages as a Structured Streaming source.

Built on PySpark's Python data source API, in the shape of Spark's Kafka source: an offset
is ``{topic: next offset}`` (kept in the query's checkpoint), and a micro-batch reads, per
topic, the offsets from its start to its end. Offsets are dense per topic and everything
below a topic's watermark is committed and final (``spark_outbox.plan``), so replaying a
logged batch after a crash reads exactly the same rows: with Spark's file sink or
``foreachBatch``, every (topic, offset) lands once across kills and restarts.

Options: ``url`` (default ``TXMSG_READ_DATABASE_URL``, else ``TXMSG_DATABASE_URL``),
``topics`` (comma-separated) or ``topicsPattern`` (a regular expression, matched whole,
re-read every trigger; neither: every topic but the reserved ones), ``startingOffsets``
(``latest``, the default; ``earliest``: each topic's first retained offset; or JSON
``{"orders": 42}``, topics it does not name from offset 0), ``maxOffsetsPerTrigger``,
``minPartitions`` (default: the driver's cores) and ``failOnDataLoss`` (``false``: offsets
that retention deleted before they were read are reported on stderr, one ``GAP`` line per
range as ``txmsg ingest`` prints them, and skipped; ``true``: the query fails with that
line). A topic that appears later is read from offset 0.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from app.config import Settings
from app.domain.lake import read_settings, watermarks
from app.domain.names import is_reserved_topic
from spark_outbox.committed import engine_for, read_ranges
from spark_outbox.errors import EXIT_CANNOT_RUN, IngestError
from spark_outbox.gaps import Gap, find_gaps, past_gaps
from spark_outbox.plan import (
    TopicRange,
    check_requested,
    limit_ranges,
    partitions_for,
    plan_ranges,
    split_ranges,
    split_topics,
)
from spark_outbox.schema import OUTPUT_SCHEMA

if TYPE_CHECKING:
    from collections.abc import Iterator

    import pyarrow as pa
    from pyspark.sql import SparkSession

NAME = "txmsg"
EARLIEST, LATEST = "earliest", "latest"
# one task per this many rows of a micro-batch (a catch-up reads in parallel, a trickle in one)
ROWS_PER_PARTITION = 50_000

Offsets = dict[str, int]


def register(spark: SparkSession) -> None:
    """Make ``format("txmsg")`` known to ``spark``."""
    spark.dataSource.register(TxmsgDataSource)


@dataclass(frozen=True)
class StreamOptions:
    url: str
    topics: list[str] | None  # None: by pattern (or every topic but the reserved ones)
    pattern: str | None
    starting: str | Offsets  # EARLIEST, LATEST or each named topic's next offset
    max_rows: int | None
    min_partitions: int
    fail_on_data_loss: bool

    def selected(self, known: Sequence[str]) -> list[str]:
        """The topics the query reads, of those the database ``known``s now."""
        if self.topics is not None:
            return sorted(self.topics)
        rule = re.compile(self.pattern) if self.pattern is not None else None
        return sorted(t for t in known if not is_reserved_topic(t)
                      and (rule is None or rule.fullmatch(t)))


def stream_options(options: Mapping[str, str]) -> StreamOptions:
    """The source's options, checked (the database URL resolved here, on the driver)."""
    known = {k.lower(): v for k, v in options.items()}
    url = known.get("url") or read_settings(Settings()).database_url
    topics = _topics(split_topics(known.get("topics")))
    pattern = known.get("topicspattern")
    if topics is not None and pattern is not None:
        raise _refused("give topics or topicsPattern, not both")
    if pattern is not None:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise _refused(f"topicsPattern {pattern!r} is not a regular expression: {exc}") \
                from None
    return StreamOptions(
        url=url, topics=topics, pattern=pattern,
        starting=_starting(known.get("startingoffsets", LATEST), topics),
        max_rows=_positive(known, "maxoffsetspertrigger"),
        min_partitions=_positive(known, "minpartitions") or os.cpu_count() or 1,
        fail_on_data_loss=_boolean(known.get("failondataloss", "false")))


def _starting(text: str, topics: list[str] | None) -> str | Offsets:
    if text.strip().lower() in (EARLIEST, LATEST):
        return text.strip().lower()
    try:
        given = json.loads(text)
    except ValueError:
        given = None
    if not isinstance(given, dict) or not all(
            isinstance(o, int) and not isinstance(o, bool) and o >= 0 for o in given.values()):
        raise _refused(f"startingOffsets is earliest, latest or JSON such as "
                       f'{{"orders": 42}} (next offsets, >= 0), not {text!r}')
    named = _topics(list(given)) or []
    if topics is not None and (extra := sorted(set(named) - set(topics))):
        raise _refused(f"startingOffsets names topics the query does not read: {extra}")
    return {t: given[t] for t in sorted(named)}


def _topics(names: list[str] | None) -> list[str] | None:
    try:
        return check_requested(names)
    except IngestError as exc:
        raise _refused(str(exc)) from None


def _positive(options: Mapping[str, str], key: str) -> int | None:
    if key not in options:
        return None
    try:
        value = int(options[key])
    except ValueError:
        value = 0
    if value < 1:
        raise _refused(f"{key} is a positive number, not {options[key]!r}")
    return value


def _boolean(text: str) -> bool:
    if text.strip().lower() not in ("true", "false"):
        raise _refused(f"failOnDataLoss is true or false, not {text!r}")
    return text.strip().lower() == "true"


def _refused(reason: str) -> IngestError:
    return IngestError(f"txmsg stream: {reason}", EXIT_CANNOT_RUN)


class TxmsgDataSource(DataSource):
    """The ``txmsg`` format: a streaming source only (``txmsg ingest`` is the batch one)."""

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.stream_options = stream_options(options)

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        return OUTPUT_SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return TxmsgStreamReader(self.stream_options)


@dataclass(frozen=True)
class RangesPartition(InputPartition):
    """One task's share of a micro-batch: exact offset ranges."""

    ranges: tuple[TopicRange, ...]


class TxmsgStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Plans micro-batches on the driver; ``read`` runs in the tasks."""

    def __init__(self, options: StreamOptions) -> None:
        self.options = options
        self._target: Offsets | None = None  # Trigger.AvailableNow: the watermarks at start
        self._engine: Any = None  # the driver's, for the watermarks; never pickled to tasks

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_engine": None}

    def _watermarks(self) -> tuple[Offsets, Offsets]:
        """Each topic's next offset and first retained offset, read together."""
        if self._engine is None:
            self._engine = engine_for(self.options.url)
        with self._engine.connect() as conn:
            rows = watermarks(conn)
        return ({r.topic: int(r.next_offset) for r in rows},
                {r.topic: int(r.first_offset) for r in rows})

    def initialOffset(self) -> Offsets:
        next_offsets, first_offsets = self._watermarks()
        topics = self.options.selected(list(next_offsets))
        starting = self.options.starting
        if starting == LATEST:
            return {t: next_offsets.get(t, 0) for t in topics}
        if starting == EARLIEST:
            return {t: min(first_offsets.get(t, 0), next_offsets.get(t, 0)) for t in topics}
        assert isinstance(starting, dict)
        return dict(sorted({**{t: 0 for t in topics}, **starting}.items()))

    def prepareForTriggerAvailableNow(self) -> None:
        self._target, _ = self._watermarks()

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_rows is not None:
            return ReadMaxRows(self.options.max_rows)
        return ReadAllAvailable()

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:
        """Where the next micro-batch ends: every selected topic's watermark (no further
        than the AvailableNow target), at most ``limit`` rows past ``start``."""
        next_offsets, first_offsets = self._watermarks()
        if self._target is not None:
            next_offsets = {t: min(o, self._target.get(t, 0)) for t, o in next_offsets.items()}
        topics = sorted(set(start) | set(self.options.selected(list(next_offsets))))
        ends = {t: next_offsets.get(t, start.get(t, 0)) for t in topics}
        gaps = find_gaps(start, first_offsets, ends, topics)
        ranges = plan_ranges(ends, past_gaps(start, gaps), topics)
        if isinstance(limit, ReadMaxRows):
            ranges = limit_ranges(ranges, limit.max_rows)
        return {**{t: start.get(t, 0) for t in topics}, **{g.topic: g.end for g in gaps},
                **{r.topic: r.end for r in ranges}}

    def reportLatestOffset(self) -> Offsets:
        next_offsets, _ = self._watermarks()
        return {t: next_offsets[t] for t in self.options.selected(list(next_offsets))}

    def partitions(self, start: Offsets, end: Offsets) -> Sequence[InputPartition]:
        """The tasks of the micro-batch (start, end]; offsets retention deleted first are
        reported (or fail the query, with ``failOnDataLoss``) and not read."""
        ranges = [TopicRange(t, start.get(t, 0), e) for t, e in sorted(end.items())
                  if e > start.get(t, 0)]
        if not ranges:
            return []
        _, first_offsets = self._watermarks()
        gaps = [Gap(r.topic, r.start, min(first_offsets.get(r.topic, 0), r.end))
                for r in ranges if first_offsets.get(r.topic, 0) > r.start]
        for gap in gaps:
            line = gap.line().replace("txmsg ingest:", "txmsg stream:", 1)
            if self.options.fail_on_data_loss:
                raise IngestError(f"{line}; failOnDataLoss is true")
            print(line, file=sys.stderr, flush=True)
        skipped = past_gaps({}, gaps)
        ranges = [TopicRange(r.topic, max(r.start, skipped.get(r.topic, 0)), r.end)
                  for r in ranges]
        ranges = [r for r in ranges if r.rows > 0]
        total = sum(r.rows for r in ranges)
        parts = partitions_for(total, ROWS_PER_PARTITION, self.options.min_partitions)
        return [RangesPartition(tuple(piece)) for piece in split_ranges(ranges, parts)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        from pyspark.sql.pandas.types import to_arrow_schema

        assert isinstance(partition, RangesPartition)
        schema = to_arrow_schema(OUTPUT_SCHEMA, timezone="UTC")
        return read_ranges(self.options.url, partition.ranges, schema)

    def stop(self) -> None:
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None
