"""Validation of everything a client sends: the one place for these rules.

Pydantic models in strict mode (no silent type coercion); every failure becomes an
``InvalidRequest`` (400) with a stable ``code``, or ``PayloadTooLarge`` (413) for bodies.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
from datetime import UTC, datetime
from typing import Annotated, Any, TypeVar

import orjson
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    StrictStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from app.domain import clock
from app.domain.callback_policy import CallbackPolicy, CallbackUrlError
from app.domain.limits import (
    MAX_CHECK_IMMUNITY_SECONDS,
    MAX_CHECK_TIMEOUT_MS,
    MAX_DELAY_MS,
    MAX_INT64,
    MIN_CHECK_TIMEOUT_MS,
    latest_delivery,
)
from app.domain.names import (
    NAME_MAX_LENGTH,
    TRANSACTION_ID_RULE,
    Name,
    TopicName,
    TransactionId,
    check_name_field,
    is_internal_topic,
    is_reserved_topic,
    is_valid_name,
    is_valid_transaction_id,
)
from app.errors import ApiError, InvalidRequest, PayloadTooLarge
from app.problems import ProblemCode

MAX_MESSAGES = 1000
MAX_PROPERTIES = 128
MAX_PROPERTIES_BYTES = 16 * 1024
MAX_KEYS = 128
MAX_CHECK_URLS = 16
MAX_ACK_OFFSETS = 1000
MAX_ORDERING_KEY = 256
# a message's W3C trace context (app.domain.trace_context): not part of a send's identity
TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"

_STRICT = ConfigDict(strict=True, extra="forbid", frozen=True)
M = TypeVar("M", bound=BaseModel)

# Field types shared by the requests and the answers. ``json_schema_extra`` tells the
# OpenAPI document of rules the validators below check, each with its own error code.
Keys = Annotated[list[Annotated[StrictStr, Field(max_length=1024)]], Field(max_length=MAX_KEYS)]
Tag = Annotated[StrictStr, Field(max_length=1024)] | None
OrderingKey = Annotated[StrictStr, Field(
    min_length=1, max_length=MAX_ORDERING_KEY, description=(
        "A key_shared subscription delivers a key's messages one at a time, in offset "
        "order; 1..256 characters, no NUL (else `invalid_ordering_key`)."))] | None
Properties = Annotated[dict[StrictStr, StrictStr], Field(
    json_schema_extra={"maxProperties": MAX_PROPERTIES},
    description=f"String to string; at most {MAX_PROPERTIES} entries and "
                f"{MAX_PROPERTIES_BYTES} bytes (UTF-8 keys plus values) in all.")]
Body = Annotated[StrictStr, Field(description="UTF-8 text body.")]
BodyBase64 = Annotated[StrictStr, Field(
    json_schema_extra={"contentEncoding": "base64"},
    description="Binary body, base64 (RFC 4648, padded).")]
CallbackUrl = Annotated[StrictStr, Field(
    json_schema_extra={"format": "uri", "pattern": "^[Hh][Tt][Tt][Pp][Ss]?://[^@/?#]+([/?#]|$)"},
    description=("An absolute http(s) URL without user info (`invalid_callback_url`); an IP "
                 "literal host must be allowed by the callback address policy "
                 "(`callback_url_not_allowed`)."))]


def _custom(code: ProblemCode, message: str) -> PydanticCustomError:
    return PydanticCustomError(code, message)


def _callback_url(url: str, info: ValidationInfo) -> str:
    """A check callback URL the address policy (given in the validation context) accepts."""
    policy = (info.context or {}).get("callback_policy") or CallbackPolicy.default()
    try:
        return policy.check_url(url)
    except CallbackUrlError as exc:
        raise _custom(exc.code, str(exc)) from None


@functools.lru_cache(maxsize=1024)
def _send_topic_refusal(topic: str) -> ProblemCode | None:
    """The code refusing a send to ``topic``, or None. Cached: the messages of a send
    mostly name one topic, and each is checked (``MessageIn._topic`` looks up only names
    short enough to be valid, so that the cache holds short strings only)."""
    if not is_valid_name(topic):
        return ProblemCode.INVALID_TOPIC
    return ProblemCode.RESERVED_TOPIC if is_reserved_topic(topic) else None


class MessageIn(BaseModel):
    """Exactly one of `body` or `body_base64`; the body (after base64 decoding) is at most
    TXMSG_MAX_BODY_BYTES, else 413."""

    # a JSON null counts as absent: the body given is the one that is a string
    model_config = _STRICT | ConfigDict(json_schema_extra={"oneOf": [
        {"required": [name], "properties": {name: {"type": "string"}}}
        for name in ("body", "body_base64")]})

    topic: TopicName
    body: Body | None = None
    body_base64: BodyBase64 | None = None
    keys: Keys = Field(default_factory=list)
    tag: Tag = None
    ordering_key: OrderingKey = None
    properties: Properties = Field(default_factory=dict)
    deliver_after_ms: StrictInt | None = Field(None, ge=0, le=MAX_DELAY_MS, description=(
        "Delayed delivery: subscriptions do not deliver the message before this many "
        "milliseconds after its commit (offset reads show it at once). Not with `deliver_at`."))
    deliver_at: datetime | None = Field(None, description=(
        "Delayed delivery: subscriptions do not deliver the message before this time "
        "(RFC 3339 with an offset; offset reads show it at once), at most ten days ahead "
        "(as `deliver_after_ms`; else `out_of_range`). Not with `deliver_after_ms`."))

    @field_validator("deliver_at", mode="before")
    @classmethod
    def _deliver_at(cls, value: object) -> object:
        """An RFC 3339 string (strict mode takes no string for a datetime by itself)."""
        if value is None:
            return None
        if not isinstance(value, str):
            raise _custom(ProblemCode.INVALID_TYPE, "deliver_at must be an RFC 3339 string")
        try:
            when = datetime.fromisoformat(value)
        except ValueError:
            raise _custom(ProblemCode.INVALID_DELIVER_AT,
                          f"deliver_at {value[:64]!r} is not an RFC 3339 time") from None
        if when.tzinfo is None:
            raise _custom(ProblemCode.INVALID_DELIVER_AT, "deliver_at needs a UTC offset (or Z)")
        try:
            utc = when.astimezone(UTC)  # as it is stored
        except OverflowError:  # the year 1 or 9999 moved past the calendar's end
            raise _custom(ProblemCode.INVALID_DELIVER_AT,
                          f"deliver_at {value[:64]!r} is out of the calendar") from None
        if utc > latest_delivery(clock.utcnow()):
            raise _custom(ProblemCode.OUT_OF_RANGE,
                          f"deliver_at is at most {MAX_DELAY_MS // 86_400_000} "
                          "days ahead (as deliver_after_ms)")
        return when

    @field_validator("topic")
    @classmethod
    def _topic(cls, topic: str) -> str:
        if len(topic) <= NAME_MAX_LENGTH and _send_topic_refusal(topic) is None:
            return topic
        check_name_field("topic", topic, code=ProblemCode.INVALID_TOPIC)
        raise _custom(ProblemCode.RESERVED_TOPIC,
                      f"topic {topic!r} is reserved and cannot be sent to")

    @field_validator("tag")
    @classmethod
    def _tag(cls, tag: str | None) -> str | None:
        # stored as text: PostgreSQL text cannot hold NUL
        if tag is not None and "\x00" in tag:
            raise _custom(ProblemCode.INVALID_TAG, "tag must not contain NUL characters")
        return tag

    @field_validator("ordering_key", mode="before")
    @classmethod
    def _ordering_key(cls, key: object) -> object:
        """Every way of being wrong answers one code: a client branching on it need not
        know which of pydantic's type and length checks would have caught it first."""
        if key is None or (isinstance(key, str) and 1 <= len(key) <= MAX_ORDERING_KEY
                           and "\x00" not in key):
            return key
        raise _custom(ProblemCode.INVALID_ORDERING_KEY, f"ordering_key is a string of 1.."
                      f"{MAX_ORDERING_KEY} characters without NUL")

    @field_validator("properties")
    @classmethod
    def _properties(cls, props: dict[str, str]) -> dict[str, str]:
        if len(props) > MAX_PROPERTIES:
            raise _custom(ProblemCode.TOO_MANY_PROPERTIES,
                          f"at most {MAX_PROPERTIES} properties, got {len(props)}")
        size = sum(len(k.encode()) + len(v.encode()) for k, v in props.items())
        if size > MAX_PROPERTIES_BYTES:
            raise _custom(ProblemCode.PROPERTIES_TOO_LARGE,
                          f"properties take {size} bytes, at most {MAX_PROPERTIES_BYTES}")
        return props

    @model_validator(mode="after")
    def _one_body(self, info: ValidationInfo) -> MessageIn:
        if (self.body is None) == (self.body_base64 is None):
            raise _custom(ProblemCode.INVALID_BODY, "give exactly one of body or body_base64")
        if self.deliver_after_ms is not None and self.deliver_at is not None:
            raise _custom(ProblemCode.INVALID_DELIVER_AT, "give at most one of deliver_after_ms or "
                          "deliver_at")
        try:
            # the cache of ``raw_body``, filled here: its first read takes a lock (3.11)
            raw = self.__dict__["raw_body"] = self._decoded_body()
        except (binascii.Error, ValueError):
            if self.body_base64 is None:
                raise
            raise _custom(ProblemCode.INVALID_BASE64, "body_base64 is not valid base64") from None
        limit = (info.context or {}).get("max_body_bytes")
        if limit is not None and len(raw) > limit:
            raise _custom(ProblemCode.BODY_TOO_LARGE, f"body is {len(raw)} bytes, at most {limit}")
        return self

    @functools.cached_property
    def raw_body(self) -> bytes:
        """The body's bytes, decoded once (by the validator that checks their size).

        Cached in the instance's ``__dict__``, which pydantic leaves to such properties:
        a private attribute cost far more, as pydantic sets private attributes up for
        every instance and reads them through ``__getattr__``."""
        return self._decoded_body()

    def _decoded_body(self) -> bytes:
        if self.body is not None:
            return self.body.encode()
        assert self.body_base64 is not None  # _one_body: exactly one of the two is given
        return base64.b64decode(self.body_base64, validate=True)

    @property
    def body_is_text(self) -> bool:
        return self.body is not None


class AckIn(BaseModel):
    """Offsets of a subscription that the transaction's commit acknowledges."""

    model_config = _STRICT

    topic: Annotated[Name, Field(description="The subscription's topic.")]
    subscription: Annotated[Name, Field(description="Subscription name.")]
    offsets: list[StrictInt] = Field(min_length=1, max_length=MAX_ACK_OFFSETS, description=(
        "Offsets delivered to the subscription and not acknowledged (else 409 "
        "`ack_not_pending`), held by no other unresolved transaction (else 409 "
        "`ack_conflict`)."))

    @field_validator("topic")
    @classmethod
    def _topic(cls, topic: str) -> str:
        check_name_field("topic", topic, code=ProblemCode.INVALID_TOPIC)
        if is_internal_topic(topic):
            raise _custom(ProblemCode.RESERVED_TOPIC, f"topic {topic!r} is internal")
        return topic

    @field_validator("subscription")
    @classmethod
    def _subscription(cls, name: str) -> str:
        return check_name_field("subscription", name, code=ProblemCode.INVALID_SUBSCRIPTION)

    @field_validator("offsets")
    @classmethod
    def _offsets(cls, offsets: list[int]) -> list[int]:
        if any(o < 0 or o > MAX_INT64 for o in offsets):
            raise _custom(ProblemCode.INVALID_OFFSET, f"offsets are integers 0..{MAX_INT64}")
        return offsets


class TransactionOptions(BaseModel):
    """What a send says besides its messages."""

    model_config = _STRICT

    acks: list[AckIn] | None = Field(None, max_length=MAX_ACK_OFFSETS, description=(
        "Transactional acknowledgement: held while the transaction is unresolved (not "
        "redelivered), acknowledged by its commit in the same database transaction, "
        f"released by its rollback or discard. At most {MAX_ACK_OFFSETS} offsets in all."))

    transaction_id: TransactionId | None = Field(None, description=(
        "Client id, unique per producer group; a retried send with the same id, the same "
        "messages and the same check_url and check_immunity_seconds answers 200 with the "
        "first answer; with others, or after retention forgot the transaction, 409 "
        "`transaction_id_conflict`. Generated by the server when absent."))
    check_immunity_seconds: StrictInt = Field(0, ge=0, le=MAX_CHECK_IMMUNITY_SECONDS, description=(
        "No check before max(TXMSG_TRANSACTION_TIMEOUT_SECONDS, this) seconds."))
    check_url: CallbackUrl | None = Field(None, description=(
        "The producer instance to ask first about this transaction."))

    @field_validator("transaction_id")
    @classmethod
    def _txid(cls, txid: str | None) -> str | None:
        if txid is not None and not is_valid_transaction_id(txid):
            raise _custom(ProblemCode.INVALID_TRANSACTION_ID, TRANSACTION_ID_RULE)
        return txid

    @field_validator("check_url")
    @classmethod
    def _check_url(cls, url: str | None, info: ValidationInfo) -> str | None:
        return None if url is None else _callback_url(url, info)


class TransactionIn(TransactionOptions):
    messages: list[MessageIn] = Field(min_length=1, max_length=MAX_MESSAGES)

    @model_validator(mode="after")
    def _ack_count(self) -> TransactionIn:
        if self.acks and sum(len(a.offsets) for a in self.acks) > MAX_ACK_OFFSETS:
            raise _custom(ProblemCode.TOO_MANY_ACKS, f"at most {MAX_ACK_OFFSETS} offsets in acks")
        return self

    def ack_set(self) -> dict[tuple[str, str], list[int]]:
        """The acks by (topic, subscription), each with its offsets sorted, once."""
        out: dict[tuple[str, str], set[int]] = {}
        for a in self.acks or ():
            out.setdefault((a.topic, a.subscription), set()).update(a.offsets)
        return {k: sorted(v) for k, v in sorted(out.items())}

    def fingerprint(self) -> str:
        """What makes a retried send "the same": its messages and acks, not its options,
        nor its trace context (a retry runs under another span)."""
        h = hashlib.sha256()
        for m in self.messages:
            props = m.properties
            if TRACEPARENT in props or TRACESTATE in props:
                props = {k: v for k, v in props.items() if k not in (TRACEPARENT, TRACESTATE)}
            h.update(orjson.dumps([m.topic, m.body_is_text, m.keys, m.tag, props],
                                  option=orjson.OPT_SORT_KEYS))
            h.update(hashlib.sha256(m.raw_body).digest())
            if m.deliver_after_ms is not None or m.deliver_at is not None:
                # only then, so that fingerprints of messages without a delay stay as they were
                h.update(orjson.dumps([m.deliver_after_ms, m.deliver_at], option=orjson.OPT_UTC_Z))
            if m.ordering_key is not None:  # likewise
                h.update(orjson.dumps(["ordering_key", m.ordering_key]))
        if self.acks:  # only then, as for delays
            h.update(orjson.dumps(["acks", [[*k, v] for k, v in self.ack_set().items()]]))
        return h.hexdigest()


# for the OpenAPI document: parse_transaction reads this form as a TransactionIn of one message
class SingleMessageTransactionIn(MessageIn, TransactionOptions):
    """One message given by its fields at the top level."""


class ProducerGroupIn(BaseModel):
    """A registration; a PUT of a registered group changes only the fields it names."""

    model_config = _STRICT

    check_urls: list[CallbackUrl] = Field(
        default_factory=list, min_length=1, max_length=MAX_CHECK_URLS, description=(
            "Asked in order during a check. Needed to register a group "
            "(else `missing_field`); left out, a registered group keeps its URLs."))
    check_timeout_ms: StrictInt = Field(3000, ge=MIN_CHECK_TIMEOUT_MS, le=MAX_CHECK_TIMEOUT_MS, description=(
        "Left out, a registered group keeps its timeout; a new one gets the default."))

    @field_validator("check_urls")
    @classmethod
    def _urls(cls, urls: list[str], info: ValidationInfo) -> list[str]:
        return [_callback_url(u, info) for u in urls]

    def named(self) -> dict[str, Any]:
        """The fields this request names."""
        return {k: getattr(self, k) for k in self.model_fields_set}


MIN_RETENTION_SECONDS = 60
MAX_RETENTION_SECONDS = 31_536_000  # a year


class TopicRetentionIn(BaseModel):
    """``PUT /v1/topics/{topic}``: the topic's retention, or None for the default."""

    model_config = _STRICT

    retention_seconds: StrictInt | None = Field(
        ge=MIN_RETENTION_SECONDS, le=MAX_RETENTION_SECONDS,
        description="Seconds a committed message stays; null: TXMSG_RETENTION_SECONDS.")


_SINGLE_MESSAGE_FIELDS = frozenset(MessageIn.model_fields)
_STATUS_BY_CODE: dict[str, type[ApiError]] = {ProblemCode.BODY_TOO_LARGE: PayloadTooLarge}
_CODE_BY_PYDANTIC_TYPE = {
    "missing": ProblemCode.MISSING_FIELD,
    "literal_error": ProblemCode.INVALID_VALUE,
    "extra_forbidden": ProblemCode.UNKNOWN_FIELD,
    "too_short": ProblemCode.INVALID_LENGTH,
    "too_long": ProblemCode.INVALID_LENGTH,
    "string_too_short": ProblemCode.INVALID_LENGTH,
    "string_too_long": ProblemCode.INVALID_LENGTH,
    "model_type": ProblemCode.INVALID_TYPE,
    "dict_type": ProblemCode.INVALID_TYPE,
    "list_type": ProblemCode.INVALID_TYPE,
    "string_type": ProblemCode.INVALID_TYPE,
    "int_type": ProblemCode.INVALID_TYPE,
    "greater_than_equal": ProblemCode.OUT_OF_RANGE,
    "less_than_equal": ProblemCode.OUT_OF_RANGE,
    "greater_than": ProblemCode.OUT_OF_RANGE,
    "less_than": ProblemCode.OUT_OF_RANGE,
}
_CODES = frozenset(ProblemCode)


def parse_transaction(payload: Any, *, max_body_bytes: int,
                      callback_policy: CallbackPolicy | None = None) -> TransactionIn:
    """A send request; a single message may be given by its fields at the top level.

    ``check_url`` is judged by ``callback_policy`` (None: the contract's default policy).
    """
    if isinstance(payload, dict) and "messages" not in payload and "topic" in payload:
        payload = dict(payload)
        message = {k: payload.pop(k) for k in list(payload) if k in _SINGLE_MESSAGE_FIELDS}
        payload["messages"] = [message]
    return _validate(TransactionIn, payload, {"max_body_bytes": max_body_bytes,
                                              "callback_policy": callback_policy})


def parse_producer_group(payload: Any, *,
                         callback_policy: CallbackPolicy | None = None) -> ProducerGroupIn:
    """A registration; its URLs judged by ``callback_policy`` (None: the default policy)."""
    return _validate(ProducerGroupIn, payload, {"callback_policy": callback_policy})


def parse_topic_retention(payload: Any) -> TopicRetentionIn:
    return _validate(TopicRetentionIn, payload, None)


Model = TypeVar("Model", bound=BaseModel)


def _validate(model: type[Model], payload: Any, context: dict[str, Any] | None) -> Model:
    if not isinstance(payload, dict):
        raise InvalidRequest("the request body must be a JSON object",
                             code=ProblemCode.INVALID_BODY_TYPE)
    try:
        return model.model_validate(payload, context=context)
    except ValidationError as exc:
        raise _to_api_error(exc) from None


def _to_api_error(exc: ValidationError) -> ApiError:
    errors = exc.errors(include_url=False, include_input=False, include_context=False)
    first = next((e for e in errors if e["type"] in _STATUS_BY_CODE), errors[0])
    code = _problem_code(first["type"])
    where = ".".join(str(p) for p in first["loc"]) or "body"
    details = [{"field": ".".join(str(p) for p in e["loc"]), "message": e["msg"]} for e in errors]
    cls = _STATUS_BY_CODE.get(code, InvalidRequest)
    return cls(f"{where}: {first['msg']}", code=code, errors=details)


def _problem_code(error_type: str) -> ProblemCode:
    """A validation error's code: a custom error's type is its code; pydantic's own types
    are named by what was wrong (a type, a length, a range; any other: the value)."""
    mapped = _CODE_BY_PYDANTIC_TYPE.get(error_type)
    if mapped is not None:
        return mapped
    if error_type in _CODES:
        return ProblemCode(error_type)
    if (error_type.endswith(("_parsing", "_type"))
            or error_type.startswith(("int_", "string_", "list_"))):
        return (ProblemCode.INVALID_TYPE if "type" in error_type or "parsing" in error_type
                else ProblemCode.INVALID_VALUE)
    return ProblemCode.INVALID_VALUE


def parse_body(model: type[M], payload: Any) -> M:
    """A JSON request body as ``model`` (another domain's), refused with the codes above."""
    return _validate(model, payload, None)
