"""Reading committed messages: topics, pages of a topic, single messages."""

from __future__ import annotations

from flask import Blueprint, Response, request

from app.api.access import current_principal, requires, requires_token
from app.api.http import int_arg, json_body, json_response, limit_arg, state
from app.domain import reads, retention
from app.domain.access import ADMIN, CONSUME, names_allowed
from app.domain.messages import parse_topic_retention
from app.domain.names import check_message_id, check_readable_topic, is_valid_name
from app.errors import InvalidRequest

bp = Blueprint("topics", __name__, url_prefix="/v1")


@bp.get("/topics")
@requires_token("consume:{topic} (lists only the topics the token may consume)",
                forbids=False)
def list_topics() -> Response:
    """Topics with a committed message and their next offset, by name; ``after`` pages."""
    after = request.args.get("after")
    if after is not None and not is_valid_name(after):
        raise InvalidRequest(f"query parameter after must be a topic name, got {after!r}",
                             code="invalid_query_parameter", parameter="after")
    only = names_allowed(current_principal().scopes, CONSUME)
    return json_response(reads.list_topics(state().engine, after or "", limit_arg(), only))


@bp.get("/topics/<topic>")
@requires(CONSUME, "topic")
def get_topic(topic: str) -> Response:
    """A topic's retained offsets and its retention."""
    check_readable_topic(topic)
    return json_response(retention.get_topic(state().engine, state().settings, topic))


@bp.put("/topics/<topic>")
@requires(ADMIN)
def put_topic(topic: str) -> Response:
    """Set a topic's retention (null: TXMSG_RETENTION_SECONDS); an unknown topic is created."""
    check_readable_topic(topic)
    request = parse_topic_retention(json_body())
    return json_response(retention.set_topic_retention(state().engine, state().settings,
                                                       topic, request))


@bp.get("/topics/<topic>/messages")
@requires(CONSUME, "topic")
def read_topic(topic: str) -> Response:
    """Committed messages of a topic from ``from_offset``, in offset order, at most
    ``limit`` of them and TXMSG_MAX_READ_BYTES of bodies (but at least one)."""
    check_readable_topic(topic)
    return json_response(reads.read_topic(state().reader, topic, int_arg("from_offset", 0, 0),
                                          limit_arg(), state().settings.max_read_bytes))


@bp.get("/messages/<message_id>")
@requires_token("produce:{group} of the message, or consume:{topic} once it is committed "
                "(else 404, as for an unknown id)")
def get_message(message_id: str) -> Response:
    """One message, its transaction's state and, once committed, its offset."""
    check_message_id(message_id)
    return json_response(reads.get_message(state().reader, message_id, current_principal()))
