"""Retention's batches (bounded by the messages they delete) and a topic as shown."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from app.domain.retention import _fill, _topic
from app.storage.topics import TopicState


def txns(*message_counts: int) -> list[Any]:
    return [SimpleNamespace(id=i, message_count=n) for i, n in enumerate(message_counts)]


def ids(batch: object) -> list[int]:
    return [r.id for r in batch.rows]  # type: ignore[attr-defined]


def test_a_batch_stops_at_the_transaction_that_reaches_the_message_bound() -> None:
    batch = _fill(txns(3, 4, 5, 1), 7)
    assert ids(batch) == [0, 1] and batch.more


def test_a_batch_holds_at_least_one_transaction_however_large() -> None:
    batch = _fill(txns(50, 1), 10)
    assert ids(batch) == [0] and batch.more


def test_rows_under_the_bound_are_one_batch() -> None:
    batch = _fill(txns(1, 1), 10)
    assert ids(batch) == [0, 1] and not batch.more
    empty = _fill([], 10)
    assert empty.rows == [] and not empty.more


def test_a_full_read_means_there_may_be_more() -> None:
    # the rows were read with LIMIT 3: three rows of no messages may have more behind them
    batch = _fill(txns(0, 0, 0), 3)
    assert ids(batch) == [0, 1, 2] and batch.more


def state(retention: int | None) -> TopicState:
    return TopicState(topic="orders", first_offset=4, next_offset=9, retention_seconds=retention)


def test_a_topic_shows_the_retention_in_force_and_whether_it_is_the_default() -> None:
    assert _topic(state(None), 3600) == {"topic": "orders", "first_offset": 4, "next_offset": 9,
                                         "retention_seconds": 3600, "retention_default": True}
    shown = _topic(state(60), 3600)
    assert shown["retention_seconds"] == 60 and shown["retention_default"] is False
