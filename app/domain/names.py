"""Names of topics and producer groups, which topics are reserved, and client ids."""

from __future__ import annotations

import os
import re
import time
from typing import Annotated

from pydantic import Field, StrictStr

from app.errors import InvalidRequest

NAME_MAX_LENGTH = 127
NAME_PATTERN = rf"^[A-Za-z0-9_%|-]{{1,{NAME_MAX_LENGTH}}}$"
_NAME_RE = re.compile(NAME_PATTERN)
DISCARD_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
SYSTEM_TOPIC_PREFIX = "RMQ_SYS_"
# ids travel in URL paths and text columns (PostgreSQL text refuses NUL)
TRANSACTION_ID_PATTERN = r"^[^\s/?#\x00-\x1f\x7f]{1,128}$"
_ID_RE = re.compile(TRANSACTION_ID_PATTERN)

# The names as JSON Schema (the OpenAPI document): the patterns are checked in code, by the
# functions below and the models' validators, which answer with their own error codes,
# so they are given to the schema only (json_schema_extra), never to pydantic to enforce.
Name = Annotated[StrictStr, Field(json_schema_extra={"pattern": NAME_PATTERN})]
TopicName = Annotated[Name, Field(description=(
    f"Topic name. Topics starting `{SYSTEM_TOPIC_PREFIX}` are internal (neither sendable nor "
    f"readable); `{DISCARD_TOPIC}` is readable, not sendable."))]
GroupName = Annotated[Name, Field(description="Producer group name.")]
TransactionId = Annotated[StrictStr, Field(json_schema_extra={
    "pattern": TRANSACTION_ID_PATTERN, "maxLength": 128})]


def is_valid_name(name: object) -> bool:
    return isinstance(name, str) and _NAME_RE.fullmatch(name) is not None


def is_internal_topic(topic: str) -> bool:
    """Whether ``topic`` is internal (``SYSTEM_TOPIC_PREFIX``): neither sendable, readable
    nor ingested."""
    return topic.startswith(SYSTEM_TOPIC_PREFIX)


def is_reserved_topic(topic: str) -> bool:
    """Whether ``topic`` is reserved, one no client writes to (a send, a dead letter): the
    internal topics and ``DISCARD_TOPIC`` (readable, but written by the service only)."""
    return is_internal_topic(topic) or topic == DISCARD_TOPIC


def check_group_name(name: str) -> str:
    if not is_valid_name(name):
        raise InvalidRequest(f"producer group name {name!r} must match {NAME_PATTERN}",
                             code="invalid_producer_group")
    return name


def check_readable_topic(topic: str) -> str:
    if not is_valid_name(topic):
        raise InvalidRequest(f"topic name {topic!r} must match {NAME_PATTERN}",
                             code="invalid_topic")
    if is_internal_topic(topic):
        raise InvalidRequest(f"topic {topic!r} is internal and cannot be read",
                             code="reserved_topic")
    return topic


def is_valid_transaction_id(transaction_id: object) -> bool:
    return isinstance(transaction_id, str) and _ID_RE.fullmatch(transaction_id) is not None


def check_transaction_id(transaction_id: str) -> str:
    if not is_valid_transaction_id(transaction_id):
        raise InvalidRequest("transaction_id: 1..128 characters, no whitespace, control "
                             "characters, '/', '?' or '#'", code="invalid_transaction_id")
    return transaction_id


def check_message_id(message_id: str) -> str:
    if not is_valid_transaction_id(message_id):  # same shape: no server id can fail it
        raise InvalidRequest(f"message id {message_id!r} is malformed", code="invalid_message_id")
    return message_id


def new_message_id() -> str:
    """A message's id, or a transaction's when its send gives none (``new_message_ids``)."""
    return new_message_ids(1)[0]


def new_message_ids(n: int) -> list[str]:
    """``n`` ids, each a UUIDv7 (RFC 9562) in upper-case hex, written as text directly: 48
    bits of Unix milliseconds lead, then the version, 74 random bits (unguessable) and the
    variant. Ids sort by the time they were made (at random within a millisecond), so a
    batch's ids go to the rightmost pages of the unique indexes that hold them: random
    ids touched (and, after each checkpoint, wrote whole to the WAL) a page per id."""
    prefix = f"{time.time_ns() // 1_000_000:012X}7"
    rand = os.urandom(10 * n).hex().upper()  # 20 hex digits per id, 74 bits of them used
    return [prefix + rand[i:i + 3] + _VARIANT[rand[i + 3]] + rand[i + 4:i + 19]
            for i in range(0, 20 * n, 20)]


# a hex digit's low two bits under the variant's two high ones (binary 10)
_VARIANT = {d: "89AB"[int(d, 16) & 3] for d in "0123456789ABCDEF"}
