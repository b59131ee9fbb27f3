"""Which offsets a run ingests: per topic, [checkpoint, watermark).

Offsets are dense per topic and a lower offset never becomes visible after a higher one,
so everything below a watermark read at the start of the run is committed and final:
reading up to it never skips a message that commits late (that one gets a higher offset,
for the next run).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from app.domain.names import is_internal_topic, is_reserved_topic, name_refusal
from spark_outbox.errors import EXIT_CANNOT_RUN, EXIT_FAILED, IngestError

# below this, one more JDBC read (a query, a task, a file per topic) costs more than it saves
MIN_ROWS_PER_PARTITION = 10_000


@dataclass(frozen=True, order=True)
class TopicRange:
    topic: str
    start: int
    end: int  # exclusive

    @property
    def rows(self) -> int:
        return self.end - self.start


def split_topics(option: str | None) -> list[str] | None:
    """The ``--topics a,b`` option as a list; None (every topic) when absent or empty."""
    topics = [t.strip() for t in option.split(",") if t.strip()] if option else []
    return topics or None


def check_requested(topics: Sequence[str] | None) -> list[str] | None:
    """The topics asked for by name, validated; None means every ingestible topic."""
    if topics is None:
        return None
    out: list[str] = []
    for topic in topics:
        refusal = name_refusal("topic", topic)
        if refusal is not None:
            raise IngestError(f"{refusal} (not a topic name)", EXIT_CANNOT_RUN)
        if is_internal_topic(topic):
            raise IngestError(f"topic {topic} is internal and is never ingested",
                              EXIT_CANNOT_RUN)
        if topic not in out:
            out.append(topic)
    return out


def select_topics(known: Sequence[str], requested: Sequence[str] | None) -> list[str]:
    """Requested topics as given; otherwise every topic but the reserved ones."""
    if requested is not None:
        return sorted(requested)
    return sorted(t for t in known if not is_reserved_topic(t))


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


def partitions_for(rows: int, rows_per_partition: int, cores: int) -> int:
    """How many parallel JDBC reads a run of ``rows`` rows gets: one per
    ``rows_per_partition`` rows, and at least one per core if each gets a fair share."""
    enough_for_each_core = min(cores, rows // MIN_ROWS_PER_PARTITION)
    return max(1, -(-rows // rows_per_partition), enough_for_each_core)


def split_ranges(ranges: Sequence[TopicRange], parts: int) -> list[list[TopicRange]]:
    """``ranges`` cut into at most ``parts`` contiguous pieces of nearly equal row counts.

    The ranges are laid end to end and cut at equal distances, so a piece holds a few
    whole or partial topic ranges and a topic spans as few pieces as its size needs:
    one read per piece, and few files per topic.
    """
    total = sum(r.rows for r in ranges)
    if total == 0:
        return []
    parts = max(1, min(parts, total))
    pieces: list[list[TopicRange]] = []
    queue = [r for r in ranges if r.rows > 0]
    for k in range(parts):
        # rows [k*total//parts, (k+1)*total//parts) of the laid-out ranges
        want = (k + 1) * total // parts - k * total // parts
        piece: list[TopicRange] = []
        while want > 0:
            r = queue[0]
            take = min(want, r.rows)
            piece.append(TopicRange(r.topic, r.start, r.start + take))
            want -= take
            if take == r.rows:
                queue.pop(0)
            else:
                queue[0] = TopicRange(r.topic, r.start + take, r.end)
        pieces.append(piece)
    return pieces


def limit_ranges(ranges: Sequence[TopicRange], max_rows: int) -> list[TopicRange]:
    """The first ``max_rows`` offsets of ``ranges`` (a streaming trigger's share), divided
    among topics in proportion to their backlog, as Spark's Kafka source divides
    ``maxOffsetsPerTrigger``: no topic waits while another's backlog is read."""
    total = sum(r.rows for r in ranges)
    if total <= max_rows:
        return [r for r in ranges if r.rows > 0]
    shares = [r.rows * max_rows // total for r in ranges]
    # the rows the rounding left, one each to the largest remainders (earlier first on ties)
    by_remainder = sorted(range(len(ranges)),
                          key=lambda i: (-(ranges[i].rows * max_rows % total), i))
    for i in by_remainder[:max_rows - sum(shares)]:
        shares[i] += 1
    return [TopicRange(r.topic, r.start, r.start + n)
            for r, n in zip(ranges, shares, strict=True) if n > 0]
