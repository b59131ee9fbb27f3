"""Every problem code the service answers with (the ``code`` of its problem+json, RFC 9457).

A ``StrEnum``: a member is its string, so the JSON is the code itself. Raises name a
member (``ApiError(..., code=ProblemCode.X)``); each route of ``app.api.routes`` declares
the members it may answer; ``tests/unit/test_problems.py`` fails on a code spelled as a
string literal anywhere else in ``app``.
"""

from __future__ import annotations

from enum import StrEnum


class ProblemCode(StrEnum):
    # the ApiError family's own (app.errors)
    BAD_REQUEST = "bad_request"
    INVALID_REQUEST = "invalid_request"
    UNAUTHENTICATED = "unauthenticated"
    FORBIDDEN = "forbidden"
    NOT_FOUND = "not_found"
    CONFLICT = "conflict"
    PAYLOAD_TOO_LARGE = "payload_too_large"
    UNREGISTERED_PRODUCER_GROUP = "unregistered_producer_group"
    DATABASE_UNAVAILABLE = "database_unavailable"
    # HTTP itself (app.api.http, app.api.asgi)
    ROUTE_NOT_FOUND = "route_not_found"
    METHOD_NOT_ALLOWED = "method_not_allowed"
    UNSUPPORTED_MEDIA_TYPE = "unsupported_media_type"
    REQUEST_TIMEOUT = "request_timeout"
    URI_TOO_LONG = "uri_too_long"
    REQUEST_HEADER_FIELDS_TOO_LARGE = "request_header_fields_too_large"
    INCOMPLETE_BODY = "incomplete_body"
    INTERNAL_ERROR = "internal_error"
    # a request body (app.domain.messages)
    INVALID_JSON = "invalid_json"
    INVALID_BODY_TYPE = "invalid_body_type"
    MISSING_FIELD = "missing_field"
    UNKNOWN_FIELD = "unknown_field"
    INVALID_TYPE = "invalid_type"
    INVALID_LENGTH = "invalid_length"
    INVALID_VALUE = "invalid_value"
    OUT_OF_RANGE = "out_of_range"
    # query parameters (app.api.query)
    INVALID_QUERY_PARAMETER = "invalid_query_parameter"
    # names (app.domain.names)
    INVALID_PRODUCER_GROUP = "invalid_producer_group"
    INVALID_TOPIC = "invalid_topic"
    RESERVED_TOPIC = "reserved_topic"
    INVALID_SUBSCRIPTION = "invalid_subscription"
    INVALID_TRANSACTION_ID = "invalid_transaction_id"
    INVALID_MESSAGE_ID = "invalid_message_id"
    # a send's messages
    INVALID_BODY = "invalid_body"
    INVALID_BASE64 = "invalid_base64"
    BODY_TOO_LARGE = "body_too_large"
    TOO_MANY_PROPERTIES = "too_many_properties"
    PROPERTIES_TOO_LARGE = "properties_too_large"
    INVALID_TAG = "invalid_tag"
    INVALID_ORDERING_KEY = "invalid_ordering_key"
    INVALID_DELIVER_AT = "invalid_deliver_at"
    TOO_MANY_ACKS = "too_many_acks"
    INVALID_OFFSET = "invalid_offset"
    # check callbacks (app.domain.callback_policy)
    INVALID_CALLBACK_URL = "invalid_callback_url"
    CALLBACK_URL_NOT_ALLOWED = "callback_url_not_allowed"
    # subscriptions
    INVALID_DEAD_LETTER_TOPIC = "invalid_dead_letter_topic"
    INVALID_BACKOFF = "invalid_backoff"
    OFFSET_OUT_OF_RANGE = "offset_out_of_range"
    INVALID_TAG_FILTER = "invalid_tag_filter"
    INVALID_CONSUMER = "invalid_consumer"
    CONSUMER_REQUIRED = "consumer_required"
    CUMULATIVE_ACK_UNSUPPORTED = "cumulative_ack_unsupported"
    # tokens
    INVALID_TOKEN_NAME = "invalid_token_name"
    INVALID_SCOPE = "invalid_scope"
    INVALID_TOKEN_ID = "invalid_token_id"
    # unknown resources
    PRODUCER_GROUP_NOT_FOUND = "producer_group_not_found"
    TRANSACTION_NOT_FOUND = "transaction_not_found"
    TOPIC_NOT_FOUND = "topic_not_found"
    SUBSCRIPTION_NOT_FOUND = "subscription_not_found"
    MESSAGE_NOT_FOUND = "message_not_found"
    TOKEN_NOT_FOUND = "token_not_found"
    ROLE_NOT_FOUND = "role_not_found"
    # state conflicts
    TRANSACTION_ID_CONFLICT = "transaction_id_conflict"
    INVALID_STATE_TRANSITION = "invalid_state_transition"
    ACK_NOT_PENDING = "ack_not_pending"
    ACK_CONFLICT = "ack_conflict"
    SUBSCRIPTION_BUSY = "subscription_busy"
    NOT_ACTIVE_CONSUMER = "not_active_consumer"
    # redriving dead letters (app.domain.redrive, the CLI and dashboard)
    INVALID_OFFSETS = "invalid_offsets"
    NO_REAL_TOPIC = "no_real_topic"
    REDRIVE_RUNNING = "redrive_running"
    # readiness (/readyz)
    SCHEMA_NOT_AT_HEAD = "schema_not_at_head"
