"""The route table: every route of the API, once.

Each ``Route`` says its method and path, the access it needs (``app.api.access``), its
handler (``app.api.call``), its request and answer models, its query parameters
(``app.api.query``), the problem codes it may answer and how large a body it takes. Everything that needs the routes reads ``ROUTES``:
the ASGI front's router (``app.api.asgi``, the API's one front), the OpenAPI document
(``app.api.openapi``) and the tests that walk every route.

Adding a route: a handler in the module of its resource, its request model in the domain
(the one that validates it, as in ``app.domain.messages``), its answer's shape in
``app.api.schemas``, then one entry here. ``tests/integration/api/test_openapi.py`` and
``test_access.py`` check it is documented and guarded.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from app.api import groups, health, subscriptions, tokens, topics, transactions
from app.api.access import ADMIN_ONLY, OPEN, Access
from app.api.call import Call
from app.api.query import (
    AFTER_ID,
    AFTER_SUBSCRIPTION,
    AFTER_TOPIC,
    FROM_OFFSET,
    LIMIT,
    STATE,
    Query,
)
from app.api.schemas import (
    Acked,
    CommittedTransaction,
    Health,
    Message,
    Nacked,
    NewToken,
    ProducerGroup,
    Ready,
    Received,
    Renewed,
    ResumedTransaction,
    RolledBackTransaction,
    SentTransaction,
    Subscription,
    SubscriptionList,
    TokenList,
    Topic,
    TopicList,
    TopicPage,
    Transaction,
    TransactionList,
)
from app.domain.access import ADMIN, CONSUME, METRICS, PRODUCE
from app.domain.messages import (
    ProducerGroupIn,
    SingleMessageTransactionIn,
    TopicRetentionIn,
    TransactionIn,
)
from app.domain.subscriptions import (
    NackIn,
    OffsetsIn,
    ReceiveIn,
    SeekIn,
    SubscriptionAckIn,
    SubscriptionIn,
)
from app.domain.tokens import TokenIn
from app.problems import ProblemCode as Code

Handler = Callable[[Call], Any]  # Answer, or an awaitable of one


class Noted(NamedTuple):
    """A problem code with what the document says of it on one route."""

    code: Code
    note: str


Problems = Mapping[str, tuple[Code | Noted, ...]]
_PARAM = re.compile(r"\{([^{}]+)\}")


@dataclass(frozen=True, slots=True)
class Route:
    method: str
    path: str  # OpenAPI form: /v1/topics/{topic}
    access: Access
    handler: Handler  # async: awaited on the front's event loop; else run on its threads
    name: str  # the operationId
    tag: str
    summary: str
    # status → the answer's type, (type, description), or an OpenAPI response object
    answers: Mapping[str, Any]
    problems: Problems  # status → the problem codes this route may answer with it
    body: Any = None  # the request body's model (a tuple: one of them)
    body_required: bool = True
    query: tuple[Query, ...] = ()  # its query parameters (``app.api.query``)
    # its header parameters (``app.api.openapi``'s names for them)
    headers: tuple[str, ...] = ()
    carries_messages: bool = False  # takes a send's body limit, not a small one's
    quiet: bool = False  # a success is logged at DEBUG: the hot routes
    own_threads: bool = False  # run on threads no other route waits behind (/readyz)
    rule: str = field(init=False)  # /v1/topics/<topic>: the label of metrics and logs
    params: tuple[str, ...] = field(init=False)
    on_loop: bool = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "rule", _PARAM.sub(r"<\1>", self.path))
        object.__setattr__(self, "params", tuple(_PARAM.findall(self.path)))
        object.__setattr__(self, "on_loop", inspect.iscoroutinefunction(self.handler))


def requires(action: str, param: str | None = None) -> Access:
    return Access(action=action, param=param)


def requires_token(note: str, *, forbids: bool = True) -> Access:
    """Any valid token; the handler narrows its answer by the token's scopes (``note``
    says how, for the document), refusing it (403) unless ``forbids`` is false."""
    return Access(note=note, forbids=forbids)


_GROUP = (Code.INVALID_PRODUCER_GROUP,)
_CALLBACK_URL = (Code.INVALID_CALLBACK_URL, Code.CALLBACK_URL_NOT_ALLOWED)
_TXN_PATH = (*_GROUP, Code.INVALID_TRANSACTION_ID)
_BODY = (Code.INVALID_JSON, Code.INVALID_BODY_TYPE, Code.MISSING_FIELD, Code.UNKNOWN_FIELD,
         Code.INVALID_TYPE, Code.INVALID_LENGTH, Code.INVALID_VALUE, Code.OUT_OF_RANGE)
_DB: Problems = {"503": (Code.DATABASE_UNAVAILABLE,)}
_TOO_LARGE: Problems = {"413": (Code.PAYLOAD_TOO_LARGE,)}
_FINISH: Problems = {"400": _TXN_PATH, "404": (Code.TRANSACTION_NOT_FOUND,),
                     "409": (Code.INVALID_STATE_TRANSITION,), **_DB}
_TOPIC = (Code.INVALID_TOPIC, Code.RESERVED_TOPIC)
_NAMES = (*_TOPIC, Code.INVALID_SUBSCRIPTION)
_ACKS = (Code.ACK_NOT_PENDING, Code.ACK_CONFLICT)
_GROUP_PATH = "/v1/producer-groups/{group}"
_TXNS = f"{_GROUP_PATH}/transactions"
_TXN = f"{_TXNS}/{{transaction_id}}"
_SUBS = "/v1/topics/{topic}/subscriptions"
_SUB = f"{_SUBS}/{{subscription}}"
_PRODUCE, _CONSUME = requires(PRODUCE, "group"), requires(CONSUME, "topic")
_REMOVED = {"204": {"description": "Removed."}}


def _action(name: str, summary: str, handler: Handler, answer: Any, body: Any,
            codes: tuple[Code, ...] = (), *, body_required: bool = True,
            conflicts: tuple[Code | Noted, ...] = (), **more: Any) -> Route:
    """A POST on one subscription (by a consumer that may name itself)."""
    return Route("POST", f"{_SUB}/{name}", _CONSUME, handler, name, "subscriptions", summary,
                 {"200": answer}, {"400": (*_NAMES, *_BODY, Code.INVALID_CONSUMER, *codes),
                                   **_TOO_LARGE, "404": (Code.SUBSCRIPTION_NOT_FOUND,),
                                   **({"409": conflicts} if conflicts else {}), **_DB},
                 body=body, body_required=body_required, **more)


ROUTES: tuple[Route, ...] = (
    Route("PUT", _GROUP_PATH, _PRODUCE, groups.put_group, "putProducerGroup",
          "producer-groups",
          "Register a producer group's check callbacks, or change what is named of them",
          {"200": (ProducerGroup, "The stored registration.")},
          {"400": (*_GROUP, *_BODY, *_CALLBACK_URL), **_TOO_LARGE, **_DB},
          body=ProducerGroupIn),
    Route("GET", _GROUP_PATH, _PRODUCE, groups.get_group, "getProducerGroup",
          "producer-groups", "A producer group's registration, with its signing secret",
          {"200": ProducerGroup}, {"400": _GROUP, "404": (Code.PRODUCER_GROUP_NOT_FOUND,), **_DB}),
    Route("DELETE", _GROUP_PATH, _PRODUCE, groups.delete_group, "deleteProducerGroup",
          "producer-groups",
          "Remove a registration (its transactions stay and resolve as usual)", _REMOVED,
          {"400": _GROUP, "404": (Code.PRODUCER_GROUP_NOT_FOUND,), **_DB}),
    Route("POST", f"{_GROUP_PATH}/signing-secret/rotate", _PRODUCE,
          groups.rotate_signing_secret, "rotateSigningSecret", "producer-groups",
          "A new signing secret; the previous one signs too for "
          "TXMSG_SIGNING_SECRET_OVERLAP_SECONDS",
          {"200": (ProducerGroup, "The registration with its new signing secret.")},
          {"400": _GROUP, "404": (Code.PRODUCER_GROUP_NOT_FOUND,), **_DB}),
    Route("POST", _TXNS, _PRODUCE, transactions.send, "sendTransaction", "transactions",
          "Send the half messages of a transaction (invisible until committed)",
          {"201": (SentTransaction, "Stored, PREPARED."),
           "200": (SentTransaction, ("A retried send (same transaction_id, same messages, "
                                     "check_url and check_immunity_seconds): the first "
                                     "answer, whatever the state now."))},
          {"400": (*_GROUP, *_BODY, *_TOPIC, Code.INVALID_BODY, Code.INVALID_BASE64,
                   Code.TOO_MANY_PROPERTIES, Code.PROPERTIES_TOO_LARGE, Code.INVALID_TAG,
                   Code.INVALID_ORDERING_KEY,
                   Code.INVALID_TRANSACTION_ID, *_CALLBACK_URL, Code.INVALID_DELIVER_AT,
                   Code.INVALID_SUBSCRIPTION, Code.INVALID_OFFSET, Code.TOO_MANY_ACKS),
           "404": (Noted(Code.SUBSCRIPTION_NOT_FOUND, "an ack's subscription"),),
           "409": (Noted(Code.TRANSACTION_ID_CONFLICT, "the id was sent with other messages "
                         "or check settings, or retention forgot it"), *_ACKS),
           "413": (Code.BODY_TOO_LARGE, Code.PAYLOAD_TOO_LARGE),
           "422": (Code.UNREGISTERED_PRODUCER_GROUP,), **_DB},
          body=(TransactionIn, SingleMessageTransactionIn),
          headers=("traceparent", "tracestate"), carries_messages=True, quiet=True),
    Route("GET", _TXNS, _PRODUCE, transactions.list_transactions, "listTransactions",
          "transactions", "The group's transactions, oldest first", {"200": TransactionList},
          {"400": (*_GROUP, Code.INVALID_QUERY_PARAMETER), **_DB},
          query=(STATE, AFTER_ID, LIMIT)),
    Route("GET", _TXN, _PRODUCE, transactions.get_transaction, "getTransaction",
          "transactions", "One transaction with its state, check count and messages",
          {"200": Transaction}, {"400": _TXN_PATH, "404": (Code.TRANSACTION_NOT_FOUND,), **_DB}),
    Route("POST", f"{_TXN}/commit", _PRODUCE, transactions.commit, "commitTransaction",
          "transactions", "Make the messages visible (answered once durable; repeatable)",
          {"200": (CommittedTransaction, "Committed (now or before).")},
          # a transaction whose discard released its acks takes them again
          {**_FINISH, "409": (Code.INVALID_STATE_TRANSITION, *_ACKS)}, quiet=True),
    Route("POST", f"{_TXN}/rollback", _PRODUCE, transactions.rollback, "rollbackTransaction",
          "transactions", "Drop the messages for good (repeatable)",
          {"200": (RolledBackTransaction, "Rolled back (now or before).")}, _FINISH,
          quiet=True),
    Route("POST", f"{_TXN}/resume-check", _PRODUCE, transactions.resume_check, "resumeCheck",
          "transactions",
          "Put a DISCARDED transaction back to PREPARED with its check count at 0",
          {"200": (ResumedTransaction, ("PREPARED again; it will be checked again. Its acks "
                                        "are held again if each can be; else they stay free "
                                        "and its commit takes them or is refused."))},
          _FINISH),
    Route("GET", "/v1/topics", requires_token(
        "consume:{topic} (lists only the topics the token may consume)", forbids=False),
          topics.list_topics, "listTopics", "topics", "Topics with their next offset, by name",
          {"200": TopicList}, {"400": (Code.INVALID_QUERY_PARAMETER,), **_DB},
          query=(AFTER_TOPIC, LIMIT)),
    Route("GET", "/v1/topics/{topic}", _CONSUME, topics.get_topic, "getTopic", "topics",
          "A topic's retained offsets and its retention", {"200": Topic},
          {"400": _TOPIC, "404": (Code.TOPIC_NOT_FOUND,), **_DB}),
    Route("PUT", "/v1/topics/{topic}", ADMIN_ONLY, topics.put_topic, "putTopic", "topics",
          "Set a topic's retention (null: the default); an unknown topic is created",
          {"200": Topic}, {"400": (*_TOPIC, *_BODY), **_TOO_LARGE, **_DB}, body=TopicRetentionIn),
    Route("GET", "/v1/topics/{topic}/messages", _CONSUME, topics.read_topic, "readTopic",
          "topics", "Committed messages of a topic in offset order, at most `limit` and "
          "TXMSG_MAX_READ_BYTES of bodies but at least one; the next page starts at "
          "`next_offset` (unknown topic: empty page)", {"200": TopicPage},
          {"400": (*_TOPIC, Code.INVALID_QUERY_PARAMETER), **_DB},
          query=(FROM_OFFSET, LIMIT)),
    Route("GET", _SUBS, _CONSUME, subscriptions.list_subscriptions, "listSubscriptions",
          "subscriptions", "The topic's subscriptions by name", {"200": SubscriptionList},
          {"400": (*_TOPIC, Code.INVALID_QUERY_PARAMETER), **_DB},
          query=(AFTER_SUBSCRIPTION, LIMIT)),
    Route("PUT", _SUB, _CONSUME, subscriptions.put_subscription, "putSubscription",
          "subscriptions",
          "Create a subscription (201) or change the settings named (200; the others kept)",
          {"201": (Subscription, "Created."),
           "200": (Subscription, "Updated (initial_position ignored).")},
          {"400": (*_NAMES, *_BODY, Code.INVALID_DEAD_LETTER_TOPIC, Code.INVALID_BACKOFF,
                   Code.INVALID_TAG_FILTER),
           "409": (Noted(Code.SUBSCRIPTION_BUSY, "a change of type while messages are "
                         "leased"),), **_TOO_LARGE, **_DB}, body=SubscriptionIn,
          body_required=False),
    Route("GET", _SUB, _CONSUME, subscriptions.get_subscription, "getSubscription",
          "subscriptions", "Settings, backlog, leases in flight and ack cursor",
          {"200": Subscription}, {"400": _NAMES, "404": (Code.SUBSCRIPTION_NOT_FOUND,), **_DB}),
    Route("DELETE", _SUB, _CONSUME, subscriptions.delete_subscription, "deleteSubscription",
          "subscriptions", "Remove a subscription and its state", _REMOVED,
          {"400": _NAMES, "404": (Code.SUBSCRIPTION_NOT_FOUND,), **_DB}),
    _action("receive", "Lease deliverable messages, lowest offsets first (long polling "
            "with wait_ms)", subscriptions.receive, Received, ReceiveIn,
            (Code.CONSUMER_REQUIRED,), body_required=False,
            conflicts=(Noted(Code.SUBSCRIPTION_BUSY, "exclusive: another consumer holds "
                             "it"),), quiet=True),
    _action("ack", "Acknowledge offsets (repeating is harmless), or every offset through "
            "one (failover, exclusive)", subscriptions.ack, Acked, SubscriptionAckIn,
            (Code.INVALID_OFFSET, Code.CONSUMER_REQUIRED, Code.CUMULATIVE_ACK_UNSUPPORTED),
            conflicts=(Code.NOT_ACTIVE_CONSUMER, *_ACKS), quiet=True),
    _action("nack", "Give leased messages back: redelivered after delay_ms or the backoff",
            subscriptions.nack, Nacked, NackIn, (Code.INVALID_OFFSET,)),
    _action("renew", "Extend the leases still held on these offsets", subscriptions.renew,
            Renewed, OffsetsIn, (Code.INVALID_OFFSET,)),
    _action("seek", "Acknowledge every offset below `offset`, none from it on; leases "
            "dropped", subscriptions.seek, Subscription, SeekIn, (Code.OFFSET_OUT_OF_RANGE,)),
    Route("DELETE", f"{_SUB}/consumers/{{consumer}}", _CONSUME, subscriptions.leave,
          "leaveSubscription", "subscriptions",
          "A consumer leaves at once: its leases go back for redelivery", _REMOVED,
          {"400": (*_NAMES, Code.INVALID_CONSUMER), "404": (Code.SUBSCRIPTION_NOT_FOUND,),
           **_DB}),
    Route("GET", "/v1/messages/{message_id}",
          requires_token("produce:{group} of the message, or consume:{topic} once it is "
                         "committed (else 404, as for an unknown id)"),
          topics.get_message, "getMessage", "topics",
          "One message, its transaction's state and, once committed, its offset",
          {"200": Message}, {"400": (Code.INVALID_MESSAGE_ID,), "404": (Code.MESSAGE_NOT_FOUND,),
                             **_DB}),
    Route("POST", "/v1/tokens", requires(ADMIN), tokens.create_token, "createToken",
          "tokens", "Make a scoped bearer token (its secret shown once)",
          {"201": (NewToken, "The token, with its secret.")},
          {"400": (*_BODY, Code.INVALID_TOKEN_NAME, Code.INVALID_SCOPE), **_TOO_LARGE,
           **_DB}, body=TokenIn),
    Route("GET", "/v1/tokens", requires(ADMIN), tokens.list_tokens, "listTokens", "tokens",
          "The tokens, oldest first, without their secrets", {"200": TokenList},
          {"400": (Code.INVALID_QUERY_PARAMETER,), **_DB}, query=(AFTER_ID, LIMIT)),
    Route("DELETE", "/v1/tokens/{token_id}", requires(ADMIN), tokens.revoke_token,
          "revokeToken", "tokens", "Revoke a token (refused by every process within 5 s)",
          {"204": {"description": "Revoked."}},
          {"400": (Code.INVALID_TOKEN_ID,), "404": (Code.TOKEN_NOT_FOUND,), **_DB}),
    Route("GET", "/healthz", OPEN, health.healthz, "healthz", "health", "The process is up",
          {"200": Health}, {}),
    Route("GET", "/readyz", OPEN, health.readyz, "readyz", "health",
          "The database answers and its schema is at head", {"200": Ready},
          {"503": (Code.DATABASE_UNAVAILABLE, Code.SCHEMA_NOT_AT_HEAD)}, own_threads=True),
    Route("GET", "/metrics", requires(METRICS), health.metrics_view, "metrics", "health",
          "Prometheus text exposition (what comes from the database: computed at most "
          "once every TXMSG_METRICS_CACHE_SECONDS)",
          {"200": {"description": "Metrics.",
                   "content": {"text/plain": {"schema": {"type": "string"}}}}}, dict(_DB)),
    Route("GET", "/openapi.json", OPEN, health.openapi, "openapi", "health", "This document",
          {"200": {"description": "The OpenAPI 3.1 document.",
                   "content": {"application/json": {"schema": {"type": "object"}}}}}, {}),
)


def openapi_path(rule: str) -> str:
    """A Flask rule as an OpenAPI path: ``/v1/topics/<topic>`` → ``/v1/topics/{topic}``."""
    return re.sub(r"<(?:[^:<>]+:)?([^<>]+)>", r"{\1}", rule)


def declared_access() -> dict[tuple[str, str], Access]:
    """(method, OpenAPI path) → what the route needs."""
    return {(route.method, route.path): route.access for route in ROUTES}
