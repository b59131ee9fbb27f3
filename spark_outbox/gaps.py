"""Offsets that retention deleted before ingestion read them.

Each topic's ``first_offset`` (the lowest offset still retained, from the
``topic_watermarks`` view) is read with the watermarks. A topic whose checkpoint is below
it lost the offsets in between: that range is reported as a gap, the run reads from
``first_offset`` on, and the checkpoint moves past the gap. Retention deleting more while
the run reads shows as a range with rows missing at its start, which the run refuses
(nothing is published); the next run then reports it as a gap.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pyspark.sql import SparkSession

from spark_outbox.errors import IngestError, java_reason
from spark_outbox.plan import TopicRange
from spark_outbox.source import JdbcSource

EXIT_GAPS = 3  # the run succeeded, but some offsets had expired before it read them
FIRST_OFFSETS_TABLE = "(SELECT topic, first_offset FROM topic_watermarks) first_offsets"


@dataclass(frozen=True)
class Gap:
    topic: str
    start: int
    end: int  # exclusive: the topic's first retained offset

    @property
    def messages(self) -> int:
        return self.end - self.start

    def line(self) -> str:
        return (f"txmsg ingest: GAP {self.topic} offsets {self.start}..{self.end - 1} "
                f"({self.messages} messages expired before ingestion)")

    def as_range(self) -> TopicRange:
        """The gap as a range with no data, to move the checkpoint past it."""
        return TopicRange(self.topic, self.start, self.end)


def read_first_offsets(spark: SparkSession, source: JdbcSource) -> dict[str, int]:
    try:
        rows = (spark.read.format("jdbc").options(**source.options())
                .option("dbtable", FIRST_OFFSETS_TABLE).load().collect())
    except Exception as exc:  # noqa: BLE001 - as read_watermarks
        raise IngestError(f"cannot read the topics' first offsets: {java_reason(exc)}") from None
    return {r["topic"]: int(r["first_offset"]) for r in rows}


def find_gaps(checkpoint: Mapping[str, int], first_offsets: Mapping[str, int],
              watermarks: Mapping[str, int], topics: Sequence[str]) -> list[Gap]:
    """Per topic, the offsets from its checkpoint up to its first retained offset (read
    after the watermark, so no further than the watermark: the run reads up to it)."""
    gaps = []
    for topic in topics:
        done = checkpoint.get(topic, 0)
        first = min(first_offsets.get(topic, 0), watermarks.get(topic, 0))
        if first > done:
            gaps.append(Gap(topic, done, first))
    return gaps


def past_gaps(checkpoint: Mapping[str, int], gaps: Sequence[Gap]) -> dict[str, int]:
    """The checkpoint as the run plans from it: each gap skipped."""
    return {**checkpoint, **{g.topic: g.end for g in gaps}}
