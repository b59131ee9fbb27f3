"""Offsets that retention deleted before ingestion read them.

Each topic's ``first_offset`` (the lowest offset still retained) is read with its
watermark, from the ``topic_watermarks`` view. A topic whose checkpoint is below
it lost the offsets in between: that range is reported as a gap, the run reads from
``first_offset`` on, and the checkpoint moves past the gap. Retention deleting more while
the run reads shows as a range with rows missing at its start, which the run refuses
(nothing is published); the next run then reports it as a gap.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from spark_outbox.plan import TopicRange

EXIT_GAPS = 3  # the run succeeded, but some offsets had expired before it read them


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


def find_gaps(checkpoint: Mapping[str, int], first_offsets: Mapping[str, int],
              watermarks: Mapping[str, int], topics: Sequence[str]) -> list[Gap]:
    """Per topic, the offsets from its checkpoint up to its first retained offset (never
    past the watermark, up to which the run reads)."""
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
