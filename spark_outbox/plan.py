"""Which offsets a run ingests: per topic, [checkpoint, watermark).

Offsets are dense per topic and a lower offset never becomes visible after a higher one,
so everything below a watermark read at the start of the run is committed and final:
reading up to it never skips a message that commits late (that one gets a higher offset,
for the next run).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from app.domain.names import DISCARD_TOPIC, SYSTEM_TOPIC_PREFIX, is_valid_name
from spark_outbox.errors import EXIT_CANNOT_RUN, EXIT_FAILED, IngestError


@dataclass(frozen=True, order=True)
class TopicRange:
    topic: str
    start: int
    end: int  # exclusive

    @property
    def rows(self) -> int:
        return self.end - self.start


def check_requested(topics: Sequence[str] | None) -> list[str] | None:
    """The topics asked for by name, validated; None means every ingestible topic."""
    if topics is None:
        return None
    out: list[str] = []
    for topic in topics:
        if not is_valid_name(topic):
            raise IngestError(f"{topic!r} is not a topic name", EXIT_CANNOT_RUN)
        if topic.startswith(SYSTEM_TOPIC_PREFIX):
            raise IngestError(f"topic {topic} is internal and is never ingested",
                              EXIT_CANNOT_RUN)
        if topic not in out:
            out.append(topic)
    return out


def select_topics(known: Sequence[str], requested: Sequence[str] | None) -> list[str]:
    """Requested topics as given; otherwise every topic but the reserved ones."""
    if requested is not None:
        return sorted(requested)
    return sorted(t for t in known
                  if t != DISCARD_TOPIC and not t.startswith(SYSTEM_TOPIC_PREFIX))


def plan_ranges(watermarks: Mapping[str, int], checkpoint: Mapping[str, int],
                topics: Sequence[str]) -> list[TopicRange]:
    """The ranges to ingest now: one per topic with something new."""
    ranges: list[TopicRange] = []
    for topic in topics:
        done = checkpoint.get(topic, 0)
        watermark = watermarks.get(topic, 0)
        if done > watermark:
            raise IngestError(
                f"the output already holds offsets up to {done} of topic {topic}, but the "
                f"database has only {watermark}: is this output directory from another "
                "database?", EXIT_FAILED)
        if watermark > done:
            ranges.append(TopicRange(topic, done, watermark))
    return ranges


def partitions_for(rows: int, rows_per_partition: int, max_partitions: int) -> int:
    """How many parallel JDBC reads a range gets."""
    return max(1, min(max_partitions, -(-rows // rows_per_partition)))
