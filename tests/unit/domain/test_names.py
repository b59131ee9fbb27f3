"""Names and reserved topics (``app.domain.names``): the one home of the rule that the
models, the API, the CLI and Spark ingestion all ask."""

from __future__ import annotations

import itertools
import re
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from pydantic_core import PydanticCustomError

from app.domain.names import (
    DISCARD_TOPIC,
    NAME_PATTERN,
    SYSTEM_TOPIC_PREFIX,
    check_group_name,
    check_name,
    check_name_field,
    check_readable_topic,
    is_internal_topic,
    is_reserved_topic,
    name_refusal,
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


# -- the name rule's one home -------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[3]
NAMES = ROOT / "app" / "domain" / "names.py"
# the one fast path that asks the predicate itself: a send's cached topic refusal, whose
# refusal is then worded by check_name_field
PREDICATE_CALLERS = {ROOT / "app" / "domain" / "messages.py"}
# every way the rule has been written again: its wording, its pattern, its characters
_RULE = re.compile(r"must match|NAME_PATTERN|A-Za-z0-9_%|is not a \w+ name|name rule")


def test_the_name_rule_is_written_once() -> None:
    """Modules ask ``check_name`` / ``check_name_field`` / ``name_refusal``: a module that
    words, matches or spells out the rule again is a second definition."""
    rewritten, asking = {}, {}
    for package in ("app", "checker", "spark_outbox"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if path == NAMES:
                continue
            source = path.read_text()
            if found := [line.strip() for line in source.splitlines() if _RULE.search(line)]:
                rewritten[str(path.relative_to(ROOT))] = found
            if "is_valid_name(" in source and path not in PREDICATE_CALLERS:
                asking[str(path.relative_to(ROOT))] = True
    assert rewritten == {}
    assert asking == {}


@pytest.mark.parametrize(("check", "code"), [
    (lambda name: check_name("subscription", name, code="invalid_subscription"),
     "invalid_subscription"),
    (check_group_name, "invalid_producer_group"),
    (check_readable_topic, "invalid_topic"),
])
def test_every_check_words_the_refusal_alike(check: Any, code: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        check("a/b")
    assert refused.value.code == code
    assert refused.value.detail.endswith(f"'a/b' must match {NAME_PATTERN}")
    assert check("a-b") == "a-b"


def test_a_model_field_is_refused_with_the_same_words() -> None:
    with pytest.raises(PydanticCustomError) as refused:
        check_name_field("topic", "a b", code="invalid_topic")
    assert refused.value.type == "invalid_topic"
    assert refused.value.message() == name_refusal("topic", "a b")
    assert name_refusal("topic", "ok") is None
    assert len(name_refusal("topic", "x" * 1000) or "") < 300  # a long name is cut
