"""What a client sends about subscriptions (settings, receives, acks, seeks), validated,
and the rules of their names and dead-letter topics."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    StrictStr,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from app.domain import tag_filters
from app.domain.limits import (
    MAX_ACK_TIMEOUT_MS,
    MAX_BACKOFF_MS,
    MAX_CONSUMER_TIMEOUT_MS,
    MAX_DELAY_MS,
    MAX_INT64,
    MAX_REDELIVERIES,
    MIN_ACK_TIMEOUT_MS,
    MIN_CONSUMER_TIMEOUT_MS,
)
from app.domain.names import TopicName, check_name, check_name_field, is_reserved_topic
from app.errors import InvalidRequest
from app.problems import ProblemCode

MAX_RECEIVE = 1000
MAX_WAIT_MS = 30_000
MAX_OFFSETS = 1000

SubscriptionType = Literal["shared", "key_shared", "failover", "exclusive"]
SHARED: SubscriptionType = "shared"
KEY_SHARED: SubscriptionType = "key_shared"
FAILOVER: SubscriptionType = "failover"
EXCLUSIVE: SubscriptionType = "exclusive"
# one consumer served at a time, in offset order, with cumulative acks
ONE_CONSUMER_TYPES = frozenset({FAILOVER, EXCLUSIVE})

_STRICT = ConfigDict(strict=True, extra="forbid", frozen=True)
Offset = StrictInt


def _custom(code: str, message: str) -> PydanticCustomError:
    return PydanticCustomError(code, message)


class BackoffIn(BaseModel):
    """Redelivery after a nack without delay or a lease that ran out: ``min_ms × 2^r`` for
    a message delivered with ``redelivery_count`` r, at most ``max_ms``."""

    model_config = _STRICT

    min_ms: StrictInt = Field(1000, ge=0, le=MAX_BACKOFF_MS)
    max_ms: StrictInt = Field(60000, ge=0, le=MAX_BACKOFF_MS, description=(
        "At least `min_ms` (else `invalid_backoff`)."))

    @model_validator(mode="after")
    def _ordered(self) -> BackoffIn:
        # one bound alone is checked against the other's value once it is known (a
        # subscription's stored one, or the default: ``subscription_settings.put``)
        if self.model_fields_set >= {"min_ms", "max_ms"}:
            why = backoff_refusal(self.min_ms, self.max_ms)
            if why is not None:
                raise _custom(ProblemCode.INVALID_BACKOFF, why)
        return self


def backoff_refusal(min_ms: int, max_ms: int) -> str | None:
    """Why these bounds cannot make a backoff (``invalid_backoff``), or None."""
    if min_ms > max_ms:
        return f"redelivery_backoff.min_ms ({min_ms}) is more than max_ms ({max_ms})"
    return None


class SubscriptionIn(BaseModel):
    """``PUT /v1/topics/{topic}/subscriptions/{subscription}``; every field optional: a
    new subscription takes the defaults of those left out, an existing one keeps their
    values."""

    model_config = _STRICT

    initial_position: Literal["latest", "earliest"] = Field("latest", description=(
        "Where a new subscription starts: at the topic's next offset, or at its first "
        "retained one. Counts only at creation."))
    ack_timeout_ms: StrictInt = Field(30000, ge=MIN_ACK_TIMEOUT_MS, le=MAX_ACK_TIMEOUT_MS, description=(
        "How long a received message stays leased to its receive."))
    max_redeliveries: StrictInt = Field(16, ge=0, le=MAX_REDELIVERIES, description=(
        "A message delivered 1 + this many times without an acknowledgement goes to the "
        "dead-letter topic."))
    redelivery_backoff: BackoffIn = Field(default_factory=BackoffIn)
    dead_letter_topic: TopicName | None = Field(None, description=(
        "Default: `<topic>-<subscription>-DLQ` (when that name is valid). Not the "
        "subscription's own topic (`invalid_dead_letter_topic`); another one than the "
        "default needs consume on it (403 `forbidden`)."))
    type: SubscriptionType = Field(SHARED, description=(
        "`shared`: any consumer gets any message; `key_shared`: one message of an "
        "ordering key in flight at a time, in offset order; `failover`: one active "
        "consumer at a time, the others standing by; `exclusive`: one consumer only. "
        "Changes only while nothing is leased (409 `subscription_busy`)."))
    consumer_timeout_ms: StrictInt = Field(
        30000, ge=MIN_CONSUMER_TIMEOUT_MS, le=MAX_CONSUMER_TIMEOUT_MS, description=(
            "A consumer is alive while its last call on the subscription is less than "
            "this long ago."))
    tag_filter: StrictStr = Field(tag_filters.EVERY_TAG, description=(
        "`*` or tags joined by `||` (RocketMQ's syntax): only messages with one of these "
        "tags are delivered; the others count as acknowledged."))

    @field_validator("tag_filter")
    @classmethod
    def _tag_filter(cls, expression: str) -> str:
        try:
            return tag_filters.normalized(expression)
        except tag_filters.MalformedTagFilter as exc:
            raise _custom(ProblemCode.INVALID_TAG_FILTER, str(exc)) from None

    @field_validator("dead_letter_topic")
    @classmethod
    def _dead_letter_topic(cls, topic: str | None) -> str | None:
        if topic is None:
            return None
        check_name_field("dead_letter_topic", topic, code=ProblemCode.INVALID_TOPIC)
        if is_reserved_topic(topic):
            raise _custom(ProblemCode.RESERVED_TOPIC,
                          f"topic {topic!r} is reserved and cannot be a "
                          "dead-letter topic")
        return topic


class ByConsumer(BaseModel):
    """A call that may name its consumer (failover and exclusive need it)."""

    model_config = _STRICT

    consumer: StrictStr | None = Field(None, description=(
        "The consumer's name (as a subscription's); needed on failover and exclusive "
        "subscriptions (`consumer_required`). Every call keeps it alive."))

    @field_validator("consumer")
    @classmethod
    def _consumer(cls, name: str | None) -> str | None:
        return None if name is None else check_name_field(
            "consumer", name, code=ProblemCode.INVALID_CONSUMER)


class ReceiveIn(ByConsumer):
    max_messages: StrictInt = Field(10, ge=1, le=MAX_RECEIVE)
    wait_ms: StrictInt = Field(0, ge=0, le=MAX_WAIT_MS, description=(
        "Wait up to this long for a deliverable message (then answer an empty list)."))


def _check_offsets(offsets: list[int]) -> list[int]:
    if any(o < 0 or o > MAX_INT64 for o in offsets):
        raise _custom(ProblemCode.INVALID_OFFSET, f"offsets are integers 0..{MAX_INT64}")
    return offsets


class OffsetsIn(ByConsumer):
    offsets: list[Offset] = Field(max_length=MAX_OFFSETS)

    _offsets = field_validator("offsets")(_check_offsets)


class SubscriptionAckIn(ByConsumer):
    """Offsets one by one, or (failover and exclusive) every offset through one."""

    offsets: list[Offset] | None = Field(None, max_length=MAX_OFFSETS)
    through: StrictInt | None = Field(None, ge=0, le=MAX_INT64, description=(
        "Cumulative: every offset up to and including it (failover and exclusive, by the "
        "active consumer). Not with `offsets`."))

    @field_validator("offsets")
    @classmethod
    def _offsets(cls, offsets: list[int] | None) -> list[int] | None:
        return None if offsets is None else _check_offsets(offsets)

    @model_validator(mode="after")
    def _one_of(self) -> SubscriptionAckIn:
        if (self.offsets is None) == (self.through is None):
            raise _custom(ProblemCode.MISSING_FIELD if self.offsets is None
                          else ProblemCode.INVALID_VALUE,
                          "an ack gives exactly one of offsets and through")
        return self


class NackIn(OffsetsIn):
    delay_ms: StrictInt | None = Field(None, ge=0, le=MAX_DELAY_MS, description=(
        "Redeliver after this long; default: the subscription's backoff."))


class SeekIn(BaseModel):
    model_config = _STRICT

    offset: StrictInt = Field(ge=0, le=MAX_INT64, description=(
        "Every offset below it is acknowledged, every one from it on is not. At most the "
        "topic's `next_offset` (else `offset_out_of_range`)."))

# -- names --------------------------------------------------------------------------------


def check_subscription_name(name: str) -> str:
    return check_name("subscription name", name, code=ProblemCode.INVALID_SUBSCRIPTION)


def check_consumer_name(name: str) -> str:
    return check_name("consumer name", name, code=ProblemCode.INVALID_CONSUMER)


def default_dead_letter_topic(topic: str, name: str) -> str:
    return f"{topic}-{name}-DLQ"


def dead_letter_topic(topic: str, name: str, request: SubscriptionIn) -> str:
    """The dead-letter topic the request names, or the default; never the subscription's
    own topic (its dead letters would come back to it)."""
    dead_letter = request.dead_letter_topic or default_dead_letter_topic(topic, name)
    if dead_letter == topic:
        raise InvalidRequest(f"dead_letter_topic {topic!r} is the subscription's own topic",
                             code=ProblemCode.INVALID_DEAD_LETTER_TOPIC)
    return dead_letter


def names_other_dead_letter_topic(topic: str, name: str, request: SubscriptionIn) -> bool:
    """Whether the request names a dead-letter topic other than the default: one the
    subscription writes into, which the caller must be allowed to consume."""
    given = request.dead_letter_topic
    return given is not None and given != default_dead_letter_topic(topic, name)


# the stored settings' columns, by the field of ``SubscriptionIn`` (and of its backoff)
# that names them
_COLUMNS = (("ack_timeout_ms", None, "ack_timeout_ms"),
            ("max_redeliveries", None, "max_redeliveries"),
            ("redelivery_backoff", "min_ms", "backoff_min_ms"),
            ("redelivery_backoff", "max_ms", "backoff_max_ms"),
            ("type", None, "type"),
            ("consumer_timeout_ms", None, "consumer_timeout_ms"),
            ("tag_filter", None, "tag_filter"))


def named_settings(topic: str, name: str, request: SubscriptionIn, *, new: bool
                   ) -> dict[str, Any]:
    """The settings to store, by column: all of them for a ``new`` subscription (the
    defaults where the request is silent), else only those the request names."""
    out: dict[str, Any] = {}
    for field, inner, column in _COLUMNS:
        value = getattr(request, field)
        if inner is not None:
            if not new and inner not in value.model_fields_set:
                continue
            value = getattr(value, inner)
        if new or field in request.model_fields_set:
            out[column] = value
    if new or "dead_letter_topic" in request.model_fields_set:
        out["dead_letter_topic"] = _dead_letter_topic_to_store(topic, name, request)
    return out


def _dead_letter_topic_to_store(topic: str, name: str, request: SubscriptionIn) -> str:
    dead_letter = dead_letter_topic(topic, name, request)
    if request.dead_letter_topic is None:
        check_name("the default dead-letter topic (give dead_letter_topic)", dead_letter,
                   code=ProblemCode.INVALID_DEAD_LETTER_TOPIC)
    return dead_letter
