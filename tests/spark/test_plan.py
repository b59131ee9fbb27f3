"""The parts of an ingestion run that need no Spark: planning, URLs, the output directory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spark_outbox.dataset import OutputDir
from spark_outbox.errors import EXIT_CANNOT_RUN, EXIT_FAILED, IngestError
from spark_outbox.plan import (
    TopicRange,
    check_requested,
    limit_ranges,
    partitions_for,
    plan_ranges,
    select_topics,
    split_ranges,
    split_topics,
)
from spark_outbox.progress import progress_line, rows_per_topic, topic_line
from spark_outbox.source import jdbc_source, range_predicate
from tests.conftest import make_settings


def test_default_topics_leave_out_reserved_ones_named_topics_are_kept() -> None:
    known = ["payments", "TRANS_CHECK_MAX_TIME_TOPIC", "RMQ_SYS_TRANS_HALF_TOPIC", "orders"]
    assert select_topics(known, None) == ["orders", "payments"]
    assert select_topics(known, ["TRANS_CHECK_MAX_TIME_TOPIC", "nothing-yet"]) == [
        "TRANS_CHECK_MAX_TIME_TOPIC", "nothing-yet"]


@pytest.mark.parametrize("topics, message", [
    (["RMQ_SYS_TRANS_OP_HALF_TOPIC"], "internal"),
    (["a/b"], "not a topic name"),
    ([""], "not a topic name"),
])
def test_internal_or_invalid_topic_names_are_refused(topics: list[str], message: str) -> None:
    with pytest.raises(IngestError, match=message) as err:
        check_requested(topics)
    assert err.value.exit_code == EXIT_CANNOT_RUN


def test_ranges_go_from_checkpoint_to_watermark() -> None:
    watermarks = {"orders": 10, "payments": 3, "idle": 4}
    checkpoint = {"orders": 7, "idle": 4}
    assert plan_ranges(watermarks, checkpoint, ["idle", "new", "orders", "payments"]) == [
        TopicRange("orders", 7, 10), TopicRange("payments", 0, 3)]


def test_a_checkpoint_ahead_of_the_database_stops_the_run() -> None:
    with pytest.raises(IngestError, match="another database") as err:
        plan_ranges({"orders": 2}, {"orders": 5}, ["orders"])
    assert err.value.exit_code == EXIT_FAILED


def test_partitions_per_run() -> None:
    assert [partitions_for(n, 100, 8) for n in (1, 100, 101, 250, 10_000)] == [
        1, 1, 2, 3, 100]
    # a core each once the rows make it worth a query each; no more
    assert [partitions_for(n, 1_000_000, 4) for n in (0, 9_999, 25_000, 100_000)] == [
        1, 1, 2, 4]


def test_the_topics_option_is_split_on_commas() -> None:
    assert split_topics("orders, payments,,") == ["orders", "payments"]
    assert split_topics(None) is None and split_topics("") is None and split_topics(" , ") is None


def test_ranges_are_cut_into_contiguous_pieces_of_nearly_equal_size() -> None:
    ranges = [TopicRange("a", 10, 17), TopicRange("b", 0, 2), TopicRange("c", 5, 6)]

    pieces = split_ranges(ranges, 3)

    assert pieces == [
        [TopicRange("a", 10, 13)],
        [TopicRange("a", 13, 16)],
        [TopicRange("a", 16, 17), TopicRange("b", 0, 2), TopicRange("c", 5, 6)],
    ]
    assert split_ranges(ranges, 1) == [ranges]
    # never more pieces than rows, and every offset in exactly one piece
    many = split_ranges(ranges, 50)
    assert len(many) == 10 and all(sum(r.rows for r in p) == 1 for p in many)
    assert sorted((r.topic, r.start) for p in many for r in p) == sorted(
        (r.topic, o) for r in ranges for o in range(r.start, r.end))
    assert split_ranges([], 4) == []


def test_a_piece_is_read_with_one_condition_per_range() -> None:
    assert range_predicate([TopicRange("a", 16, 17), TopicRange("it's", 0, 2)]) == (
        "(topic = 'a' AND queue_offset >= 16 AND queue_offset < 17) OR "
        "(topic = 'it''s' AND queue_offset >= 0 AND queue_offset < 2)")


def test_database_urls_become_jdbc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    lite = jdbc_source(make_settings("sqlite:///var/txmsg.db"))
    assert lite.url == f"jdbc:sqlite:{tmp_path.resolve()}/var/txmsg.db"
    assert lite.sqlite_file == tmp_path.resolve() / "var" / "txmsg.db"
    assert lite.jar == Path("/usr/share/java/sqlite-jdbc.jar")

    pg = jdbc_source(make_settings(
        "postgresql+psycopg://txmsg:s%40cret@db.example:6543/txmsg?sslmode=require"))
    assert pg.url == "jdbc:postgresql://db.example:6543/txmsg"
    assert pg.driver == "org.postgresql.Driver"
    assert pg.properties["user"] == "txmsg" and pg.properties["password"] == "s@cret"
    assert pg.properties["sslmode"] == "require"
    assert "s@cret" not in pg.display and "s%40cret" not in pg.display
    assert jdbc_source(make_settings("postgresql://u@localhost/d")).url == (
        "jdbc:postgresql://localhost:5432/d")

    for url, message in [("mysql://u@h/d", "PostgreSQL or SQLite"), ("sqlite://", "in-memory")]:
        with pytest.raises(IngestError, match=message):
            jdbc_source(make_settings(url))


def _touch(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"PAR1")
    return path


def test_recovery_removes_only_the_ranges_the_checkpoint_does_not_cover(tmp_path: Path) -> None:
    out = OutputDir(tmp_path)
    day = "commit_date=2026-11-22"
    # orders: [0, 5) committed earlier; [5, 9) written by the interrupted run, not committed
    done = _touch(tmp_path / f"topic=orders/{day}/part-{0:019d}-{5:019d}-00000.parquet")
    undone = [_touch(tmp_path / f"topic=orders/{d}/part-{5:019d}-{9:019d}-0000{k}.parquet")
              for k, d in enumerate([day, "commit_date=2026-11-23"])]
    # "a%25b" is how Spark writes the directory of topic "a%b"; its range [0, 2) did commit
    odd = _touch(tmp_path / f"topic=a%25b/{day}/part-{0:019d}-{2:019d}-00000.parquet")
    # payments has the same range numbers as orders' undone one but it is another topic
    other = _touch(tmp_path / f"topic=payments/{day}/part-{5:019d}-{9:019d}-00000.parquet")
    (tmp_path / "_checkpoint.json").write_text(json.dumps(
        {"topics": {"orders": 5, "a%b": 2, "payments": 9}}))
    (tmp_path / "_pending.json").write_text(json.dumps({"ranges": [
        {"topic": "orders", "start": 5, "end": 9}, {"topic": "a%b", "start": 0, "end": 2}]}))
    _touch(tmp_path / "_staging" / "data" / "topic=orders" / day / "part-00000-x.parquet")

    with out.locked():
        recovered = out.recover()

    assert recovered == [TopicRange("orders", 5, 9)]
    assert done.exists() and odd.exists() and other.exists()
    assert not any(f.exists() for f in undone)
    assert not (tmp_path / "topic=orders" / "commit_date=2026-11-23").exists()
    assert not (tmp_path / "_staging").exists() and out.pending() == []
    assert out.checkpoint() == {"orders": 5, "a%b": 2, "payments": 9}


def test_one_run_at_a_time_per_directory(tmp_path: Path) -> None:
    with (OutputDir(tmp_path).locked(),
          pytest.raises(IngestError, match="another txmsg ingest is running"),
          OutputDir(tmp_path).locked()):
        pass


def test_rows_read_per_piece_become_rows_read_per_topic() -> None:
    pieces = split_ranges([TopicRange("a", 0, 6), TopicRange("b", 10, 14)], 2)  # 5 and 5 rows
    assert pieces == [[TopicRange("a", 0, 5)], [TopicRange("a", 5, 6), TopicRange("b", 10, 14)]]

    assert rows_per_topic(pieces, {}) == {"a": 0, "b": 0}
    assert rows_per_topic(pieces, {0: 5}) == {"a": 5, "b": 0}
    # a piece partly read counts against its ranges in order
    assert rows_per_topic(pieces, {0: 2, 1: 3}) == {"a": 3, "b": 2}
    assert rows_per_topic(pieces, {0: 5, 1: 5}) == {"a": 6, "b": 4}


def test_progress_lines() -> None:
    assert progress_line(500, 1000, 10).split() == [
        "...", "500", "of", "1,000", "rows", "read", "and", "written", "(50%)", "in", "10", "s,",
        "50", "rows/s"]
    assert topic_line("orders", 1500, 2000).split() == [
        "...", "orders", "1,500", "of", "2,000", "rows", "read", "(75%)"]


def test_a_trigger_limit_is_shared_among_topics_in_proportion_to_their_backlog() -> None:
    ranges = [TopicRange("a", 10, 40), TopicRange("b", 0, 10), TopicRange("c", 5, 6)]
    assert limit_ranges(ranges, 100) == ranges
    assert limit_ranges(ranges, 8) == [TopicRange("a", 10, 16), TopicRange("b", 0, 2)]
    # 20 x (30, 10, 1) / 41 = (14.6, 4.9, 0.5): the 2 rows rounding leaves go to the largest
    # remainders
    assert limit_ranges(ranges, 20) == [TopicRange("a", 10, 25), TopicRange("b", 0, 5)]
    assert sum(r.rows for r in limit_ranges(ranges, 1)) == 1
    assert limit_ranges([TopicRange("a", 0, 0)], 5) == []
