"""Names of topics and producer groups, and which topics are reserved."""

from __future__ import annotations

import re

from app.errors import InvalidRequest

NAME_PATTERN = r"^[A-Za-z0-9_%|-]{1,127}$"
_NAME_RE = re.compile(NAME_PATTERN)
DISCARD_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
SYSTEM_TOPIC_PREFIX = "RMQ_SYS_"


def is_valid_name(name: object) -> bool:
    return isinstance(name, str) and _NAME_RE.fullmatch(name) is not None


def check_group_name(name: str) -> str:
    if not is_valid_name(name):
        raise InvalidRequest(f"producer group name {name!r} must match {NAME_PATTERN}",
                             code="invalid_producer_group")
    return name


def check_readable_topic(topic: str) -> str:
    if not is_valid_name(topic):
        raise InvalidRequest(f"topic name {topic!r} must match {NAME_PATTERN}",
                             code="invalid_topic")
    if topic.startswith(SYSTEM_TOPIC_PREFIX):
        raise InvalidRequest(f"topic {topic!r} is internal and cannot be read",
                             code="reserved_topic")
    return topic
