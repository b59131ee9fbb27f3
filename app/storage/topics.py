"""SQL that reads the committed log: topics, pages of a topic, single messages, and the
watermarks ingestion plans from."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from sqlalchemy import Connection, and_, column, func, select, table

from app.storage.reads import MESSAGE_COLUMNS
from app.storage.schema import (
    AnyRow,
    half_message,
    logged_message_id,
    message_log,
    topic_offset,
    txn,
)

# the view `txmsg ingest` reads (migrations define it): each topic's next offset and
# lowest retained offset, read in one statement so they are consistent with each other
topic_watermarks = table("topic_watermarks", column("topic"), column("next_offset"),
                         column("first_offset"))


def list_topics(conn: Connection, after: str, limit: int,
                only: Collection[str] | None = None) -> list[AnyRow]:
    """Topics by name after ``after``; only those named in ``only`` unless it is None."""
    stmt = (select(topic_offset).where(topic_offset.c.topic > after)
            .order_by(topic_offset.c.topic).limit(limit))
    if only is not None:
        if not only:
            return []
        stmt = stmt.where(topic_offset.c.topic.in_(sorted(only)))
    return list(conn.execute(stmt))


def get_message(conn: Connection, message_id: str) -> AnyRow | None:
    """A message by its id: a half message (with its place in the log once committed), or
    a dead-letter copy (``dead_letter_copy``)."""
    stmt = (
        select(*MESSAGE_COLUMNS, txn.c.transaction_id, txn.c.producer_group,
               txn.c.state, message_log.c.queue_offset, message_log.c.committed_at)
        .join(txn, txn.c.id == half_message.c.txn_id)
        .outerjoin(message_log, and_(message_log.c.half_message_id == half_message.c.id,
                                     message_log.c.topic == half_message.c.topic))
        .where(half_message.c.message_id == message_id)
    )
    return conn.execute(stmt).first() or dead_letter_copy(conn, message_id, MESSAGE_COLUMNS)


def dead_letter_copy(conn: Connection, message_id: str, columns: Sequence[Any]
                     ) -> AnyRow | None:
    """The dead-letter copy with this id, in ``columns`` of its half message but for its
    own id, topic and properties, with its transaction and its place in the log."""
    own = {"message_id": logged_message_id(), "topic": message_log.c.topic,
           "properties": func.coalesce(message_log.c.properties, half_message.c.properties)
           .label("properties")}
    stmt = (
        select(*[own.get(c.name, c) for c in columns], txn.c.transaction_id,
               txn.c.producer_group, txn.c.state, message_log.c.queue_offset,
               message_log.c.committed_at)
        .select_from(message_log)
        .join(half_message, half_message.c.id == message_log.c.half_message_id)
        .join(txn, txn.c.id == half_message.c.txn_id)
        .where(message_log.c.message_id == message_id)
    )
    return conn.execute(stmt).first()


def watermarks(conn: Connection) -> list[AnyRow]:
    """Every topic's (topic, next_offset, first_offset), from the ``topic_watermarks`` view."""
    stmt = select(topic_watermarks.c.topic, topic_watermarks.c.next_offset,
                  topic_watermarks.c.first_offset)
    return list(conn.execute(stmt))
