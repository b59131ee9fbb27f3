"""SQL that reads the committed log: topics, pages of a topic, single messages, and the
watermarks ingestion plans from."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from sqlalchemy import Connection, and_, column, func, or_, select, table

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


def read_topic(conn: Connection, topic: str, from_offset: int, limit: int,
               max_bytes: int) -> list[AnyRow]:
    """Committed messages from ``from_offset`` in offset order: at most ``limit`` of them
    and at most ``max_bytes`` of bodies, but never fewer than one.

    The page is cut in SQL, on body sizes summed in offset order before any body is read
    (``length`` of a PostgreSQL bytea or a SQLite blob reads its header, not its bytes),
    so the bodies a reader receives, and that this process holds, stay within the budget.
    """
    first = (
        select(message_log.c.queue_offset, message_log.c.committed_at,
               message_log.c.half_message_id, message_log.c.properties,
               message_log.c.message_id, func.length(half_message.c.body).label("size"))
        .join(half_message, half_message.c.id == message_log.c.half_message_id)
        .where(message_log.c.topic == topic, message_log.c.queue_offset >= from_offset)
        .order_by(message_log.c.queue_offset)
        .limit(limit)
        .subquery("first")
    )
    sized = select(
        *first.c, func.sum(first.c.size).over(order_by=first.c.queue_offset).label("running"),
        func.row_number().over(order_by=first.c.queue_offset).label("n"),
    ).subquery("sized")
    stmt = (
        select(sized.c.queue_offset, sized.c.committed_at,
               func.coalesce(sized.c.properties, half_message.c.properties).label("properties"),
               func.coalesce(sized.c.message_id, half_message.c.message_id).label("message_id"),
               half_message.c["keys"], half_message.c.tag,
               half_message.c.body, half_message.c.body_is_text, half_message.c.created_at,
               txn.c.transaction_id, txn.c.producer_group)
        .select_from(sized)
        .join(half_message, half_message.c.id == sized.c.half_message_id)
        .join(txn, txn.c.id == half_message.c.txn_id)
        .where(or_(sized.c.running <= max_bytes, sized.c.n == 1))
        .order_by(sized.c.queue_offset)
    )
    return list(conn.execute(stmt))


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
