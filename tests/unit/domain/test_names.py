"""Names and reserved topics (``app.domain.names``): the one home of the rule that the
models, the API, the CLI and Spark ingestion all ask."""

from __future__ import annotations

import itertools
import re
import time
import uuid

import pytest

from app.domain.names import (
    DISCARD_TOPIC,
    SYSTEM_TOPIC_PREFIX,
    check_readable_topic,
    is_internal_topic,
    is_reserved_topic,
    new_message_id,
    new_message_ids,
)
from app.errors import InvalidRequest
from spark_outbox.plan import select_topics


@pytest.mark.parametrize(("topic", "internal", "reserved"), [
    ("orders", False, False),
    (f"{SYSTEM_TOPIC_PREFIX}TRACE", True, True),
    (SYSTEM_TOPIC_PREFIX, True, True),
    (DISCARD_TOPIC, False, True),
    (f"{DISCARD_TOPIC}-2", False, False),
    (f"x{SYSTEM_TOPIC_PREFIX}", False, False),
])
def test_internal_and_reserved_topics(topic: str, internal: bool, reserved: bool) -> None:
    assert is_internal_topic(topic) is internal
    assert is_reserved_topic(topic) is reserved


def test_the_discard_topic_is_readable_and_internal_ones_are_not() -> None:
    assert check_readable_topic(DISCARD_TOPIC) == DISCARD_TOPIC
    with pytest.raises(InvalidRequest) as refused:
        check_readable_topic(f"{SYSTEM_TOPIC_PREFIX}X")
    assert refused.value.code == "reserved_topic"


def test_ingestion_leaves_out_the_reserved_topics() -> None:
    known = ["b", DISCARD_TOPIC, f"{SYSTEM_TOPIC_PREFIX}X", "a"]
    assert select_topics(known, None) == ["a", "b"]


def test_server_ids_are_uuid7_and_sort_by_when_they_were_made() -> None:
    made: list[list[str]] = []
    for _ in range(20):
        made.append([*new_message_ids(4), new_message_id()])
        time.sleep(0.002)  # the next ones are of a later millisecond
    ids = [i for batch in made for i in batch]
    assert len(set(ids)) == len(ids)
    for i in ids:
        assert re.fullmatch(r"[0-9A-F]{32}", i)
        parsed = uuid.UUID(hex=i)
        assert (parsed.version, parsed.variant) == (7, uuid.RFC_4122)
        assert abs(int(i[:12], 16) - time.time() * 1000) < 60_000  # Unix milliseconds lead
    # within a millisecond the order is random; across them, it is the order they were made
    assert all(max(a) < min(b) for a, b in itertools.pairwise(made))
