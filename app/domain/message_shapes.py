"""A message as the API shows it: the one home of its JSON shapes and of the functions
that build them from stored rows.

Each shape is a TypedDict: at run time the answer stays the plain dict the hot routes
write out as it is (nothing validates it), while pydantic derives the OpenAPI document's
schema from the same class (``app.api.schemas`` names them, ``app.api.openapi`` turns
them into components). The shapers all take their fields from the same pieces
(``_content``: keys, tag, ordering key, properties and the body; the time and place
fields), one per way a message is shown:

- ``as_read``: a committed message in a topic's page; ``as_received``: the same, leased
  to a receive (with its redelivery count);
- ``by_id``: ``GET /v1/messages/{message_id}``, in any state;
- ``in_transaction``: a transaction's message, without its body;
- ``in_check``: a message in a check callback's payload, as its producer sent it.
"""

from __future__ import annotations

import base64
from datetime import datetime
from typing import Annotated, Any, Literal, NotRequired

import orjson
from pydantic import ConfigDict, Field, with_config
from typing_extensions import TypedDict  # pydantic needs this one before Python 3.12

from app.domain.limits import MAX_INT64
from app.domain.messages import Body, BodyBase64, Keys, OrderingKey, Properties, Tag
from app.domain.names import DISCARD_TOPIC, GroupName, TopicName, TransactionId
from app.storage.schema import AnyRow
from app.vocabulary import State

# exactly one of body / body_base64
_ONE_BODY = ConfigDict(extra="forbid", json_schema_extra={
    "oneOf": [{"required": ["body"]}, {"required": ["body_base64"]}]})
_CLOSED = ConfigDict(extra="forbid")

Timestamp = Annotated[datetime, Field(description="RFC 3339, UTC.")]
MessageId = Annotated[str, Field(description=(
    "Server-generated, globally unique: a UUIDv7 in 32 upper-case hex digits (its first 12 "
    "are the Unix time in milliseconds it was made). Treat it as an opaque string."))]
Offset = Annotated[int, Field(ge=0, le=MAX_INT64, description="Dense per topic, from 0.")]


@with_config(_ONE_BODY)
class StoredMessage(TypedDict):
    """A message as its producer sent it."""

    message_id: MessageId
    topic: TopicName
    keys: Keys
    tag: Tag
    ordering_key: OrderingKey
    properties: Properties
    body: NotRequired[Body]
    body_base64: NotRequired[BodyBase64]


@with_config(_CLOSED)
class TransactionMessage(TypedDict):
    message_id: MessageId
    topic: TopicName
    keys: Keys
    tag: Tag
    ordering_key: OrderingKey
    properties: Properties
    offset: NotRequired[Annotated[Offset, Field(description="Once committed.")]]


@with_config(_ONE_BODY)
class CommittedMessage(TypedDict):
    """A message in a page of its topic (which the page names once)."""

    offset: Offset
    message_id: MessageId
    transaction_id: TransactionId
    producer_group: GroupName
    keys: Keys
    tag: Tag
    ordering_key: OrderingKey
    properties: Annotated[Properties, Field(description=(
        f"On {DISCARD_TOPIC}, also REAL_TOPIC, TRANSACTION_ID, PRODUCER_GROUP and "
        "CHECK_TIMES."))]
    body: NotRequired[Body]
    body_base64: NotRequired[BodyBase64]
    created_at: Timestamp
    committed_at: Timestamp


@with_config(_ONE_BODY)
class ReceivedMessage(CommittedMessage):
    """A committed message as a read shows it, leased to this receive."""

    redelivery_count: Annotated[int, Field(ge=0, description=(
        "Deliveries of this message to the subscription before this one."))]


@with_config(ConfigDict(extra="forbid", json_schema_extra={"oneOf": [
    {"required": ["body"]}, {"required": ["body_base64"]},
    {"required": ["body_omitted", "body_bytes"]}]}))
class CheckMessage(StoredMessage):
    """A message in a check's payload: past the payload's budget, without its body."""

    body_omitted: NotRequired[Annotated[Literal[True], Field(description=(
        "The body is left out: the payload would be over 1 MiB with it."))]]
    body_bytes: NotRequired[Annotated[int, Field(ge=0, description=(
        "With body_omitted: the body's size."))]]


@with_config(_ONE_BODY)
class Message(StoredMessage):
    transaction_id: TransactionId
    producer_group: GroupName
    state: State
    created_at: Timestamp
    offset: NotRequired[Annotated[Offset, Field(description="Once committed.")]]
    committed_at: NotRequired[Annotated[Timestamp, Field(description="Once committed.")]]


class Content(TypedDict):
    keys: Keys
    tag: Tag
    ordering_key: OrderingKey
    properties: Properties


class BodyFields(TypedDict, total=False):
    body: Body
    body_base64: BodyBase64


def body_fields(body: bytes, is_text: bool) -> BodyFields:
    """A body as JSON: text as ``body``, anything else as ``body_base64``."""
    if is_text:
        return {"body": bytes(body).decode()}
    return {"body_base64": base64.b64encode(body).decode()}


def _content(row: AnyRow) -> Content:
    return {"keys": orjson.loads(row.keys), "tag": row.tag, "ordering_key": row.ordering_key,
            "properties": orjson.loads(row.properties)}


def _stored_json(text: str) -> Any:
    """Keys or properties as the JSON text they are stored as, written out as it is (not
    parsed to be written again): the hot reads' way."""
    return orjson.Fragment(text)


def as_read(row: AnyRow) -> CommittedMessage:
    """A committed message in a topic's page (``app.storage.log.as_read``'s columns)."""
    return {"offset": row.queue_offset, "message_id": row.message_id,
            "transaction_id": row.transaction_id, "producer_group": row.producer_group,
            "keys": _stored_json(row.keys), "tag": row.tag, "ordering_key": row.ordering_key,
            "properties": _stored_json(row.properties),
            **body_fields(row.body, row.body_is_text),
            "created_at": row.created_at, "committed_at": row.committed_at}


def as_received(row: AnyRow, redelivery_count: int) -> ReceivedMessage:
    """``as_read``, leased to a receive."""
    return {**as_read(row), "redelivery_count": redelivery_count}


def by_id(row: AnyRow) -> Message:
    """A message looked up by its id (``app.storage.log.get_message``): in any state, its
    offset and commit time once committed."""
    content = _content(row)
    out: Message = {
        "message_id": row.message_id, "transaction_id": row.transaction_id,
        "producer_group": row.producer_group, "state": row.state, "topic": row.topic,
        "keys": content["keys"], "tag": content["tag"], "ordering_key": content["ordering_key"],
        "properties": content["properties"],
        "created_at": row.created_at,
    }
    _with_body(out, row)
    if row.queue_offset is not None:
        out["offset"] = row.queue_offset
        out["committed_at"] = row.committed_at
    return out


def in_transaction(row: AnyRow, offset: int | None) -> TransactionMessage:
    """A transaction's message, without its body; its offset once committed."""
    content = _content(row)
    out: TransactionMessage = {"message_id": row.message_id, "topic": row.topic,
                               "keys": content["keys"], "tag": content["tag"],
                               "ordering_key": content["ordering_key"],
                               "properties": content["properties"]}
    if offset is not None:
        out["offset"] = offset
    return out


def in_check(row: AnyRow, with_body: bool = True) -> CheckMessage:
    """A message in a check's payload, with its body, or (``with_body`` false) its
    body's size in its stead."""
    content = _content(row)
    out: CheckMessage = {"message_id": row.message_id, "topic": row.topic,
                         "keys": content["keys"], "tag": content["tag"],
                         "ordering_key": content["ordering_key"],
                         "properties": content["properties"]}
    if with_body:
        _with_body(out, row)
    else:
        out["body_omitted"] = True
        out["body_bytes"] = len(row.body)
    return out


def _with_body(out: BodyFields, row: AnyRow) -> None:
    out.update(body_fields(row.body, row.body_is_text))
