"""Reading committed messages: topics, pages of a topic, single messages."""

from __future__ import annotations

from app.api.call import Answer, Call
from app.api.http import parse_json
from app.domain import reads, retention
from app.domain.access import CONSUME, names_allowed
from app.domain.messages import parse_topic_retention
from app.domain.names import check_message_id, check_readable_topic


def list_topics(call: Call) -> Answer:
    """Topics with a committed message and their next offset, by name; ``after`` pages."""
    after = call.arg("after")
    only = names_allowed(call.principal.scopes, CONSUME)
    return 200, reads.list_topics(call.state.engine, after, call.arg("limit"), only)


def get_topic(call: Call) -> Answer:
    """A topic's retained offsets and its retention."""
    topic = check_readable_topic(call.params["topic"])
    return 200, retention.get_topic(call.state.engine, call.state.settings, topic)


def put_topic(call: Call) -> Answer:
    """Set a topic's retention (null: TXMSG_RETENTION_SECONDS); an unknown topic is created."""
    topic = check_readable_topic(call.params["topic"])
    request = parse_topic_retention(parse_json(call.body))
    return 200, retention.set_topic_retention(call.state.engine, call.state.settings, topic,
                                              request)


def read_topic(call: Call) -> Answer:
    """Committed messages of a topic from ``from_offset``, in offset order, at most
    ``limit`` of them and TXMSG_MAX_READ_BYTES of bodies (but at least one)."""
    topic = check_readable_topic(call.params["topic"])
    from_offset, limit = call.arg("from_offset"), call.arg("limit")
    return 200, call.state.reads.run(lambda engine: reads.read_topic(
        engine, topic, from_offset, limit, call.state.settings.max_read_bytes))


def get_message(call: Call) -> Answer:
    """One message, its transaction's state and, once committed, its offset."""
    return 200, reads.get_message(call.state.reads, check_message_id(call.params["message_id"]),
                                  call.principal)
