"""The shapes of the API's answers (and of the check callback it sends), for its OpenAPI document.

The domain builds its answers as plain dicts and the hot routes write them out as they
are, so nothing validates against these at run time: they are TypedDicts, which describe
a dict exactly, keys that may be absent (``NotRequired``) included, and from which
pydantic derives the JSON Schema (``app.api.openapi``). Tests may validate answers
against them. Request bodies are the domain's models (``app.domain.messages``). A
message's shapes are the ones its shapers return (``app.domain.message_shapes``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal, NotRequired

from pydantic import ConfigDict, Field, with_config
from typing_extensions import TypedDict  # pydantic needs this one before Python 3.12

from app.domain.limits import (
    MAX_ACK_TIMEOUT_MS,
    MAX_BACKOFF_MS,
    MAX_CHECK_TIMEOUT_MS,
    MAX_CONSUMER_TIMEOUT_MS,
    MAX_REDELIVERIES,
    MIN_ACK_TIMEOUT_MS,
    MIN_CHECK_TIMEOUT_MS,
    MIN_CONSUMER_TIMEOUT_MS,
)
from app.domain.message_shapes import (
    CheckMessage,
    CommittedMessage,
    Message,
    MessageId,
    Offset,
    ReceivedMessage,
    Timestamp,
    TransactionMessage,
)
from app.domain.messages import MAX_CHECK_URLS, CallbackUrl
from app.domain.names import GroupName, Name, TopicName, TransactionId
from app.domain.tokens import Scope, TokenId
from app.vocabulary import Resolution, State

# answered by routes as they are (app.api.routes names them here)
__all__ = ["Message"]

# the API answers with exactly these fields
_CLOSED = ConfigDict(extra="forbid")

CheckUrls = Annotated[list[CallbackUrl], Field(min_length=1, max_length=MAX_CHECK_URLS)]
CheckTimeoutMs = Annotated[int, Field(ge=MIN_CHECK_TIMEOUT_MS, le=MAX_CHECK_TIMEOUT_MS)]


@with_config(_CLOSED)
class ProducerGroup(TypedDict):
    producer_group: GroupName
    check_urls: CheckUrls
    check_timeout_ms: CheckTimeoutMs
    signing_secret: Annotated[str, Field(pattern="^whsec_[A-Za-z0-9+/]+={0,2}$", description=(
        "Signs the group's check callbacks (Standard Webhooks, HMAC-SHA256); made at the "
        "first registration, kept until rotated."))]
    previous_secret_expires_at: Annotated[datetime | None, Field(description=(
        "After a rotation: until then the previous secret signs the callbacks too."))]
    created_at: Timestamp
    updated_at: Timestamp


@with_config(_CLOSED)
class SentMessage(TypedDict):
    message_id: MessageId
    topic: TopicName


@with_config(_CLOSED)
class SentTransaction(TypedDict):
    transaction_id: TransactionId
    producer_group: GroupName
    state: Annotated[State, Field(description=(
        "PREPARED when first sent (201); on a retried send (200), the state the transaction "
        "has now."))]
    created_at: Timestamp
    messages: list[SentMessage]


@with_config(_CLOSED)
class CommittedOffset(TypedDict):
    message_id: MessageId
    topic: TopicName
    offset: Offset


@with_config(_CLOSED)
class CommittedTransaction(TypedDict):
    transaction_id: TransactionId
    state: Literal[State.COMMITTED]
    messages: list[CommittedOffset]


@with_config(_CLOSED)
class RolledBackTransaction(TypedDict):
    transaction_id: TransactionId
    state: Literal[State.ROLLED_BACK]


@with_config(_CLOSED)
class ResumedTransaction(TypedDict):
    transaction_id: TransactionId
    state: Literal[State.PREPARED]


@with_config(_CLOSED)
class TransactionSummary(TypedDict):
    transaction_id: TransactionId
    producer_group: GroupName
    state: State
    check_times: Annotated[int, Field(ge=0)]
    created_at: Timestamp
    resolved_at: Annotated[datetime | None, Field(description="When committed or rolled back.")]
    check_url: str | None
    check_immunity_seconds: Annotated[int, Field(ge=0)]
    message_count: Annotated[int, Field(ge=1)]
    next_check_at: NotRequired[Annotated[Timestamp, Field(
        description="While PREPARED: the next check.")]]



@with_config(_CLOSED)
class Transaction(TransactionSummary):
    messages: list[TransactionMessage]


@with_config(_CLOSED)
class TransactionList(TypedDict):
    producer_group: GroupName
    transactions: list[TransactionSummary]
    next_after: Annotated[Annotated[str, Field(pattern="^[0-9]+$")] | None, Field(
        description="Pass as `after` for the next page; null on the last page.")]




@with_config(_CLOSED)
class TopicPage(TypedDict):
    topic: TopicName
    messages: list[CommittedMessage]
    next_offset: Annotated[Offset, Field(description="The `from_offset` of the next page.")]
    first_offset: Annotated[Offset, Field(description=(
        "The lowest offset still retained; a `from_offset` below it starts there."))]


@with_config(_CLOSED)
class Topic(TypedDict):
    topic: TopicName
    first_offset: Annotated[Offset, Field(description=(
        "The lowest offset still retained (offsets below it expired); equal to "
        "`next_offset` when nothing is."))]
    next_offset: Annotated[Offset, Field(description="The offset the next commit takes.")]
    retention_seconds: Annotated[int, Field(ge=1, description="The retention in force.")]
    retention_default: Annotated[bool, Field(description=(
        "Whether it is TXMSG_RETENTION_SECONDS (no retention set on the topic)."))]


@with_config(_CLOSED)
class TopicSummary(TypedDict):
    topic: TopicName
    next_offset: Offset


@with_config(_CLOSED)
class TopicList(TypedDict):
    topics: list[TopicSummary]
    next_after: Annotated[str | None, Field(
        description="Cursor for the next page (`after`), null at the end.")]



@with_config(_CLOSED)
class Health(TypedDict):
    status: Literal["ok"]


@with_config(_CLOSED)
class Ready(TypedDict):
    status: Literal["ready"]
    revision: str | None
    read_replica: NotRequired[Annotated[Literal["reachable", "unreachable"], Field(description=(
        "With TXMSG_READ_DATABASE_URL: whether the replica answers within 1 s; while it "
        "does not, reads go to the primary (and the process is still ready)."))]]


@with_config(_CLOSED)
class CheckRequest(TypedDict):
    producer_group: GroupName
    transaction_id: TransactionId
    check_times: Annotated[int, Field(ge=1, description=(
        "The number of this check, from 1 to TXMSG_CHECK_MAX_TIMES."))]
    created_at: Timestamp
    messages: list[CheckMessage]


@with_config(ConfigDict(extra="allow"))
class CheckResponse(TypedDict, total=False):
    """A 2xx without a resolution means UNKNOWN."""

    resolution: Resolution


@with_config(_CLOSED)
class Token(TypedDict):
    token_id: TokenId
    name: str
    scopes: list[Scope]
    created_at: Timestamp


@with_config(_CLOSED)
class NewToken(Token):
    token: Annotated[str, Field(description=(
        "The secret bearer token: in this answer only, stored only as a hash."))]


@with_config(_CLOSED)
class TokenList(TypedDict):
    tokens: list[Token]
    next_after: Annotated[Annotated[str, Field(pattern="^[0-9]+$")] | None, Field(
        description="Pass as `after` for the next page; null on the last page.")]


@with_config(_CLOSED)
class FieldError(TypedDict):
    field: str
    message: str


@with_config(ConfigDict(extra="allow"))
class Problem(TypedDict):
    """RFC 9457 problem details plus a stable snake_case `code`."""

    type: Annotated[str, Field(json_schema_extra={"format": "uri"},
                               description="`urn:txmsg:problem:<code>`.")]
    title: str
    status: Annotated[int, Field(ge=400, le=599)]
    detail: str
    code: Annotated[str, Field(pattern="^[a-z0-9]+(_[a-z0-9]+)*$")]
    instance: Annotated[str, Field(description="The request path.")]
    errors: NotRequired[Annotated[list[FieldError], Field(
        description="Every validation failure of the request body.")]]
    parameter: NotRequired[Annotated[str, Field(description="The bad query parameter.")]]
    state: NotRequired[Annotated[State, Field(description="The transaction's state (on 409).")]]
    revision: NotRequired[str | None]
    head: NotRequired[str | None]
    required_scope: NotRequired[Annotated[str, Field(
        description="The scope the token lacks (on 403).")]]


@with_config(_CLOSED)
class Backoff(TypedDict):
    min_ms: Annotated[int, Field(ge=0, le=MAX_BACKOFF_MS)]
    max_ms: Annotated[int, Field(ge=0, le=MAX_BACKOFF_MS)]


@with_config(_CLOSED)
class Consumer(TypedDict):
    name: Name
    last_seen: Timestamp
    in_flight: Annotated[int, Field(ge=0, description="Messages leased to it now.")]
    active: Annotated[bool, Field(description=(
        "Given messages: on failover and exclusive the one active consumer, on shared and "
        "key_shared every alive one."))]


@with_config(_CLOSED)
class Subscription(TypedDict):
    topic: TopicName
    subscription: Name
    type: Literal["shared", "key_shared", "failover", "exclusive"]
    ack_timeout_ms: Annotated[int, Field(ge=MIN_ACK_TIMEOUT_MS, le=MAX_ACK_TIMEOUT_MS)]
    max_redeliveries: Annotated[int, Field(ge=0, le=MAX_REDELIVERIES)]
    redelivery_backoff: Backoff
    dead_letter_topic: TopicName
    consumer_timeout_ms: Annotated[int, Field(ge=MIN_CONSUMER_TIMEOUT_MS,
                                               le=MAX_CONSUMER_TIMEOUT_MS)]
    tag_filter: Annotated[str, Field(description="`*` or tags joined by `||`.")]
    backlog: Annotated[int, Field(ge=0, description=(
        "Committed messages not yet acknowledged (leased and delayed ones included)."))]
    in_flight: Annotated[int, Field(ge=0, description="Messages leased now.")]
    ack_cursor: Annotated[Offset, Field(description=(
        "The lowest unacknowledged offset: every offset below it is acknowledged."))]
    created_at: Timestamp
    consumers: Annotated[list[Consumer], Field(description=(
        "The alive consumers (a call within `consumer_timeout_ms`), by name."))]
    waiting: Annotated[int, Field(ge=0, description=(
        "key_shared: messages read that wait for an earlier one of their key."))]


@with_config(_CLOSED)
class SubscriptionList(TypedDict):
    topic: TopicName
    subscriptions: list[Subscription]
    next_after: Annotated[str | None, Field(
        description="Cursor for the next page (`after`), null at the end.")]



@with_config(_CLOSED)
class Received(TypedDict):
    messages: Annotated[list[ReceivedMessage], Field(description="Lowest offsets first.")]


@with_config(_CLOSED)
class Acked(TypedDict):
    acked: Annotated[int, Field(ge=0, description="Offsets newly acknowledged.")]


@with_config(_CLOSED)
class Nacked(TypedDict):
    nacked: Annotated[int, Field(ge=0, description="Leased offsets given back.")]


@with_config(_CLOSED)
class Renewed(TypedDict):
    renewed: Annotated[int, Field(ge=0, description="Leases extended.")]
