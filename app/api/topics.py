"""Reading committed messages: topics, pages of a topic, single messages."""

from __future__ import annotations

from flask import Blueprint, Response

from app.api.http import int_arg, json_response, limit_arg, state
from app.domain import reads
from app.domain.names import check_message_id, check_readable_topic

bp = Blueprint("topics", __name__, url_prefix="/v1")


@bp.get("/topics")
def list_topics() -> Response:
    """Every topic with a committed message, and its next offset."""
    return json_response(reads.list_topics(state().engine))


@bp.get("/topics/<topic>/messages")
def read_topic(topic: str) -> Response:
    """Committed messages of a topic from ``from_offset``, in offset order."""
    check_readable_topic(topic)
    return json_response(reads.read_topic(state().engine, topic, int_arg("from_offset", 0, 0),
                                          limit_arg()))


@bp.get("/messages/<message_id>")
def get_message(message_id: str) -> Response:
    """One message, its transaction's state and, once committed, its offset."""
    check_message_id(message_id)
    return json_response(reads.get_message(state().engine, message_id))
