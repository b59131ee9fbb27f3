"""Names of topics, producer groups and subscriptions, which topics are reserved, and
client ids: the one home of each rule and of the words that refuse a name or an id
(``check_name``, ``name_refusal``, ``check_transaction_id``), which the models, the API,
the dashboard, the CLI and Spark ingestion ask."""

from __future__ import annotations

import os
import re
import time
from typing import Annotated, Any

from pydantic import Field, StrictStr
from pydantic_core import PydanticCustomError

from app.errors import InvalidRequest
from app.problems import ProblemCode

NAME_MAX_LENGTH = 127
# a name without its anchors, for patterns that embed one (a scope: ``produce:<name>``)
NAME_BODY = rf"[A-Za-z0-9_%|-]{{1,{NAME_MAX_LENGTH}}}"
NAME_PATTERN = rf"^{NAME_BODY}$"
_NAME_RE = re.compile(NAME_PATTERN)
DISCARD_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
SYSTEM_TOPIC_PREFIX = "RMQ_SYS_"
# ids travel in URL paths and text columns (PostgreSQL text refuses NUL)
TRANSACTION_ID_MAX_LENGTH = 128
TRANSACTION_ID_PATTERN = rf"^[^\s/?#\x00-\x1f\x7f]{{1,{TRANSACTION_ID_MAX_LENGTH}}}$"
TRANSACTION_ID_RULE = (f"transaction_id: 1..{TRANSACTION_ID_MAX_LENGTH} characters, no "
                       "whitespace, control characters, '/', '?' or '#'")
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
    "pattern": TRANSACTION_ID_PATTERN, "maxLength": TRANSACTION_ID_MAX_LENGTH})]


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


def name_refusal(what: str, name: object) -> str | None:
    """Why ``name`` is not the name of a ``what`` ("topic", "subscription", ...), or None
    when it is one: the one wording of the rule."""
    if is_valid_name(name):
        return None
    shown = name[:200] if isinstance(name, str) else name
    return f"{what} {shown!r} must match {NAME_PATTERN}"


def check_name(what: str, name: str, *, code: ProblemCode, **extra: Any) -> str:
    """``name``, if it is the name of a ``what``; else ``InvalidRequest`` with ``code``
    (and ``extra``: the query ``parameter`` it came in)."""
    refusal = name_refusal(what, name)
    if refusal is not None:
        raise InvalidRequest(refusal, code=code, **extra)
    return name


def check_name_field(what: str, name: str, *, code: ProblemCode) -> str:
    """``check_name`` for a model's field validator: the refusal as pydantic's error, so
    that the body's validation reports it with its field."""
    refusal = name_refusal(what, name)
    if refusal is not None:
        raise PydanticCustomError(code, refusal)
    return name


def check_group_name(name: str) -> str:
    return check_name("producer group name", name, code=ProblemCode.INVALID_PRODUCER_GROUP)


def check_readable_topic(topic: str) -> str:
    check_name("topic name", topic, code=ProblemCode.INVALID_TOPIC)
    if is_internal_topic(topic):
        raise InvalidRequest(f"topic {topic!r} is internal and cannot be read",
                             code=ProblemCode.RESERVED_TOPIC)
    return topic


def is_valid_transaction_id(transaction_id: object) -> bool:
    return isinstance(transaction_id, str) and _ID_RE.fullmatch(transaction_id) is not None


def check_transaction_id(transaction_id: str) -> str:
    if not is_valid_transaction_id(transaction_id):
        raise InvalidRequest(TRANSACTION_ID_RULE, code=ProblemCode.INVALID_TRANSACTION_ID)
    return transaction_id


def check_message_id(message_id: str) -> str:
    if not is_valid_transaction_id(message_id):  # same shape: no server id can fail it
        raise InvalidRequest(f"message id {message_id!r} is malformed",
                             code=ProblemCode.INVALID_MESSAGE_ID)
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
