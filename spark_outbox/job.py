"""`txmsg ingest`: one incremental Spark run from the committed views into Parquet.

``main`` runs ``ingest``: plan the offset ranges (the driver reads the watermarks), start
the SparkSession only if there is something to read, ``extract`` (one Spark JDBC source
for every topic, read in pieces of exact offsets), ``transform``
(pure: the Parquet columns), ``load`` (hive-partitioned Parquet), verify the files'
footers, publish and checkpoint.
``transform`` uses Spark SQL functions only, so executors need no Python packages.

Also runnable with spark-submit (settings from ``TXMSG_*``)::

    spark-submit --master spark://host:7077 --jars /usr/share/java/postgresql.jar \\
        spark_outbox/job.py --output /shared/lake [--topics a,b]
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, MapType, StringType

from app.config import Settings
from app.domain.lake import make_engine, watermarks
from spark_outbox.dataset import OutputDir
from spark_outbox.errors import EXIT_CANNOT_RUN, EXIT_FAILED, IngestError, java_reason
from spark_outbox.follow import follow
from spark_outbox.footers import column_range
from spark_outbox.gaps import EXIT_GAPS, Gap, find_gaps, past_gaps
from spark_outbox.plan import (
    TopicRange,
    check_requested,
    partitions_for,
    plan_ranges,
    select_topics,
    split_ranges,
    split_topics,
)
from spark_outbox.progress import INTERVAL_SECONDS, Progress
from spark_outbox.schema import PARTITION_COLUMNS, RAW_SCHEMA
from spark_outbox.session import build_session, check_java, under_spark_submit
from spark_outbox.source import (
    JdbcSource,
    checked_source,
    range_predicate,
)

# rows per parallel JDBC read: a piece this small of a large table is read through the
# indexes, and its task reports progress when done
ROWS_PER_PARTITION = 250_000
MICROS_PER_DAY = 86_400_000_000
# up to this many rows a run is over before the JVM's optimising compiler pays for itself:
# its driver JVM runs without it (see session.build_session)
SHORT_RUN_ROWS = 100_000

Fault = Callable[[str], None]


@dataclass
class RunReport:
    source: str
    output: Path
    topics: list[str]
    ranges: list[TopicRange]
    rows: dict[str, int] = field(default_factory=dict)  # as found in the written files
    recovered: list[TopicRange] = field(default_factory=list)
    gaps: list[Gap] = field(default_factory=list)
    seconds: float = 0.0
    stages: dict[str, float] = field(default_factory=dict)  # seconds per step of the run

    @property
    def total(self) -> int:
        return sum(self.rows.values())


def main(settings: Settings, output_dir: str, topics: str | None, *,
         follow_seconds: float | None = None) -> int:
    """Run one ingestion (``topics``: the ``--topics a,b`` option), or, with
    ``follow_seconds``, one every so many seconds until SIGTERM (``spark_outbox.follow``,
    one SparkSession for them all); the process exit code.

    Failures are one line on stderr.
    """
    logging.getLogger("py4j").setLevel(logging.WARNING)
    environ = os.environ
    following = follow_seconds is not None
    try:
        source = checked_source(settings)
        requested = check_requested(split_topics(topics))
        if not under_spark_submit(environ):
            check_java(environ)
    except IngestError as exc:
        return _fail(exc)
    _say(f"txmsg ingest: {source.display} -> {Path(output_dir).resolve()}"
         + (f", every {follow_seconds:g} s until stopped" if following else ""))
    sessions: list[SparkSession] = []

    def start_spark(rows: int) -> SparkSession:
        if sessions:  # following: the session of the first run that read something
            return sessions[0]
        started = time.monotonic()
        try:
            spark = build_session(settings, environ, [str(source.jar)],
                                  short=rows <= SHORT_RUN_ROWS and not following,
                                  follow=following)
        except Exception as exc:  # noqa: BLE001 - the JVM did not start, whatever the reason
            raise IngestError(f"Spark did not start: {java_reason(exc)}",
                              EXIT_CANNOT_RUN) from None
        sessions.append(spark)
        _say(f"  Spark {spark.version}, master {spark.sparkContext.master}, "
             f"started in {time.monotonic() - started:.1f} s")
        return spark

    def one_run() -> tuple[int, int]:
        report = ingest(start_spark, source, output_dir, requested)
        if report.ranges or report.gaps or not following:
            print_report(report)
        for gap in report.gaps:
            print(gap.line(), file=sys.stderr, flush=True)
        return report.total, len(report.gaps)

    try:
        if following:
            assert follow_seconds is not None
            done = follow(one_run, follow_seconds)
            _say(f"txmsg ingest: stopped after {done.runs} run(s), {done.rows:,} rows")
            gaps = done.gaps
        else:
            _, gaps = one_run()
    except IngestError as exc:
        return _fail(exc)
    except Exception as exc:  # noqa: BLE001 - a Spark or JDBC failure: one line, not a trace
        reason = java_reason(exc)
        return _fail(IngestError(f"run failed: {reason}{_classpath_hint(source, reason)}",
                                 EXIT_FAILED))
    finally:
        for spark in sessions:
            spark.stop()
    return EXIT_GAPS if gaps else 0


def run(spark: SparkSession, settings: Settings, output_dir: str | Path,
        topics: Sequence[str] | None, *, rows_per_partition: int = ROWS_PER_PARTITION,
        fault: Fault | None = None, progress_seconds: float = INTERVAL_SECONDS) -> RunReport:
    """``ingest`` from the database of ``settings``, the topics checked first."""
    requested = check_requested(topics)
    return ingest(spark, checked_source(settings), output_dir, requested,
                  rows_per_partition=rows_per_partition, fault=fault,
                  progress_seconds=progress_seconds)


def ingest(spark: SparkSession | Callable[[int], SparkSession], source: JdbcSource,
           output_dir: str | Path, requested: list[str] | None, *,
           rows_per_partition: int = ROWS_PER_PARTITION, fault: Fault | None = None,
           progress_seconds: float = INTERVAL_SECONDS) -> RunReport:
    """Ingest, per topic, exactly what was committed since the last run into ``output_dir``.

    ``spark``: the session, or what starts it for a run of so many rows, once the plan
    is known (a run with nothing to read starts none).
    One Spark job reads every topic's range and writes it; the written files' footers
    must then hold each range exactly (rows, lowest and highest offset) before anything
    is published. ``fault(stage)`` is called at "staged" (data written, not yet
    published) and "published" (data durable, checkpoint not yet moved): tests
    interrupt the run there.
    """
    started = time.monotonic()
    output = OutputDir(output_dir)
    with output.locked():
        recovered = output.recover()
        if recovered:
            _say("  removed the unfinished ranges of an interrupted run: "
                 + ", ".join(f"{r.topic} [{r.start}, {r.end})" for r in recovered))
        next_offsets, first_offsets = read_watermarks(source)
        selected = select_topics(list(next_offsets), requested)
        gaps = find_gaps(output.checkpoint(), first_offsets, next_offsets, selected)
        ranges = plan_ranges(next_offsets, past_gaps(output.checkpoint(), gaps), selected)
        report = RunReport(source.display, output.root, selected, ranges, recovered=recovered,
                           gaps=gaps)
        report.stages["plan"] = time.monotonic() - started
        if ranges:
            total = sum(r.rows for r in ranges)
            if not isinstance(spark, SparkSession):
                step = time.monotonic()
                spark = spark(total)
                report.stages["Spark start"] = time.monotonic() - step
            _say(f"  reading {total} rows of {len(ranges)} topic(s)")
            output.begin(ranges)
            step = time.monotonic()
            pieces = read_pieces(spark, ranges, rows_per_partition)
            with Progress(spark, total, _say, progress_seconds, pieces):
                load(transform(extract(spark, source, pieces)), str(output.staging))
            report.stages["read and write"] = time.monotonic() - step
            step = time.monotonic()
            report.rows = staged_rows(spark, output, ranges)
            report.stages["verify"] = time.monotonic() - step
            if fault:
                fault("staged")
            step = time.monotonic()
            output.publish(ranges)
            if fault:
                fault("published")
            output.commit([g.as_range() for g in gaps] + ranges)
            report.stages["publish"] = time.monotonic() - step
        elif gaps:  # nothing to read, but the checkpoint moves past them
            output.commit([g.as_range() for g in gaps])
    # the run's own time: Spark's start is one of its stages, not part of its rate
    report.seconds = time.monotonic() - started - report.stages.get("Spark start", 0.0)
    return report


def read_watermarks(source: JdbcSource) -> tuple[dict[str, int], dict[str, int]]:
    """Each topic's next offset and its first retained offset (``spark_outbox.gaps``),
    read once at the start of the run, by the driver: one query, not a Spark job."""
    try:
        engine = make_engine(source.settings, pool=False, domain_errors=False)
        try:
            with engine.connect() as conn:
                rows = watermarks(conn)
        finally:
            engine.dispose()
    except Exception as exc:  # noqa: BLE001 - unreachable, unknown database, not migrated...
        reason = _db_reason(exc)
        hint = " (is the schema migrated? `txmsg migrate`)" if "topic_watermarks" in reason else ""
        raise IngestError(f"cannot read the database {source.display}: {reason}{hint}",
                          EXIT_FAILED) from None
    return ({r.topic: int(r.next_offset) for r in rows},
            {r.topic: int(r.first_offset) for r in rows})


def _db_reason(exc: Exception) -> str:
    # the driver's own words (SQLAlchemy's wrapper adds the statement and a link), one line
    reason = str(getattr(exc, "orig", None) or exc)
    return " ".join(reason.split()) or type(exc).__name__


def _classpath_hint(source: JdbcSource, reason: str) -> str:
    if "ClassNotFoundException" not in reason:
        return ""
    return f" (put {source.jar} on the classpath: spark-submit --jars {source.jar})"


def read_pieces(spark: SparkSession, ranges: Sequence[TopicRange],
                rows_per_partition: int = ROWS_PER_PARTITION) -> list[list[TopicRange]]:
    """``ranges`` cut into the pieces read in parallel, of nearly equal size."""
    parts = partitions_for(sum(r.rows for r in ranges), rows_per_partition,
                           spark.sparkContext.defaultParallelism)
    return split_ranges(ranges, parts)


def extract(spark: SparkSession, source: JdbcSource,
            pieces: Sequence[Sequence[TopicRange]]) -> DataFrame:
    """The committed messages in ``pieces``, as RAW_SCHEMA: one JDBC source for every topic,
    one read (partition) per piece, each an exact set of offsets."""
    predicates = [range_predicate(piece) for piece in pieces]
    df = (spark.read.options(**source.options())
          .option("customSchema", source.custom_schema)
          .jdbc(source.url, source.committed_table, predicates=predicates))
    if source.timestamps_as_text:
        df = df.withColumns({c: F.col(c).cast("timestamp") for c in ("created_at", "committed_at")})
    return df.select(*(F.col(f.name).cast(f.dataType).alias(f.name) for f in RAW_SCHEMA))


def transform(df: DataFrame) -> DataFrame:
    """RAW_SCHEMA rows → OUTPUT_SCHEMA rows (pure: no I/O, no session settings)."""
    return df.select(
        F.col("queue_offset").cast("long").alias("offset"),
        "message_id", "transaction_id", "producer_group", "topic",
        _json(F.col("keys"), ArrayType(StringType())).alias("keys"),
        "tag", "ordering_key",
        _json(F.col("properties"), MapType(StringType(), StringType())).alias("properties"),
        "body", "body_bytes", "created_at", "committed_at",
        _utc_date(F.col("committed_at")).alias("commit_date"),
    )


def _json(column: Column, schema: ArrayType | MapType) -> Column:
    # parse_json fails on text that is not JSON, variant_get on JSON of another shape
    # (whatever spark.sql.ansi.enabled says): a value that is not the JSON we wrote stops
    # the run instead of becoming null. Cheaper than from_json.
    return F.variant_get(F.parse_json(column), "$", schema.simpleString())


def _utc_date(ts: Column) -> Column:
    # from the instant itself, not the session time zone (to_date would use it)
    return F.date_from_unix_date(F.floor(F.unix_micros(ts) / MICROS_PER_DAY).cast("int"))


def load(df: DataFrame, path: str) -> None:
    """Parquet under ``path``, hive-partitioned by topic and commit date.

    Each task keeps one open file per partition directory it meets (the session's
    ``spark.sql.maxConcurrentOutputFileWriters``) rather than sorting its rows first.
    """
    df.write.mode("overwrite").partitionBy(*PARTITION_COLUMNS).parquet(path)


def staged_rows(spark: SparkSession, output: OutputDir,
                ranges: Sequence[TopicRange]) -> dict[str, int]:
    """Rows per topic as written; each range must be complete (every offset exactly once).

    From the files' footers: rows, lowest and highest offset per topic must be the
    range's own, which (offsets being distinct within a range read) means every offset
    of it is there once.
    """
    stats: dict[str, tuple[int, int | None, int | None]] = {}
    for topic, path in output.staged_files():
        found = column_range(spark, path, "offset")
        rows, low, high = stats.get(topic, (0, None, None))
        stats[topic] = (rows + found.rows, _bound(min, low, found.low),
                        _bound(max, high, found.high))
    counts: dict[str, int] = {}
    for r in ranges:
        rows, low, high = stats.get(r.topic, (0, None, None))
        if (rows, low, high) != (r.rows, r.start, r.end - 1):
            raise IngestError(
                f"topic {r.topic}: offsets [{r.start}, {r.end}) should give {r.rows} rows, "
                f"the written files hold {rows} (offsets {low}..{high}); nothing was published")
        counts[r.topic] = rows
    return counts


def _bound(pick: Callable[[int, int], int], a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else pick(a, b)


def print_report(report: RunReport) -> None:
    by_topic = {r.topic: r for r in report.ranges}
    for topic in report.topics:
        r = by_topic.get(topic)
        if r is None:
            _say(f"  {topic:<40} {0:>12,} rows (nothing new)")
        else:
            _say(f"  {topic:<40} {report.rows.get(topic, 0):>12,} rows "
                 f"(offsets {r.start}..{r.end - 1})")
    if not report.topics:
        _say("  no topics to ingest")
    rate = report.total / report.seconds if report.seconds > 0 else 0.0
    if report.ranges:
        _say("  time: " + ", ".join(f"{k} {v:.1f} s" for k, v in report.stages.items()))
    _say(f"txmsg ingest: {report.total:,} rows from {len(report.ranges)} topic(s) in "
         f"{report.seconds:.1f} s ({rate:,.{0 if rate >= 10 else 1}f} rows/s); checkpoint "
         f"{report.output / '_checkpoint.json'}")


def _say(line: str) -> None:
    print(line, flush=True)


def _fail(exc: IngestError) -> int:
    print(f"txmsg ingest: {exc}", file=sys.stderr, flush=True)
    return exc.exit_code


def _submit_main(argv: Sequence[str] | None = None) -> int:
    """Entry point for ``spark-submit spark_outbox/job.py --output DIR [--topics a,b]``."""
    parser = argparse.ArgumentParser(prog="spark_outbox.job",
                                     description="One incremental txmsg ingestion run.")
    parser.add_argument("--output", required=True, help="directory of the Parquet dataset")
    parser.add_argument("--topics", default=None, help="comma-separated topics")
    args = parser.parse_args(argv)
    return main(Settings(), args.output, args.topics)


if __name__ == "__main__":
    sys.exit(_submit_main())
