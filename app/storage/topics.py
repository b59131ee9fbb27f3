"""SQL of topics: their counters (topic_offset) and retention rows (topic_retention).
One statement lists them (``list_topics``, for the API, the dashboard and retention);
``topic_watermarks`` is the view ingestion plans from."""

from __future__ import annotations

from collections.abc import Collection
from typing import NamedTuple

from sqlalchemy import Connection, Table, column, exists, func, literal, select, table, update
from sqlalchemy.dialects import postgresql, sqlite

from app.storage.bulk import dialect_insert
from app.storage.schema import AnyRow, topic_offset, topic_retention

# the view `txmsg ingest` reads (migrations define it): each topic's next offset and
# lowest retained offset, read in one statement so they are consistent with each other
topic_watermarks = table("topic_watermarks", column("topic"), column("next_offset"),
                         column("first_offset"))


def _insert_absent(conn: Connection, table: Table) -> postgresql.Insert | sqlite.Insert:
    """An INSERT of a topic's row that does nothing when the topic has one."""
    return dialect_insert(conn, table).on_conflict_do_nothing(index_elements=["topic"])


class TopicState(NamedTuple):
    topic: str
    first_offset: int
    next_offset: int
    retention_seconds: int | None


_TOPIC_STATE = (select(topic_offset.c.topic,
                       func.coalesce(topic_retention.c.first_offset, 0).label("first_offset"),
                       topic_offset.c.next_offset, topic_retention.c.retention_seconds)
                .select_from(topic_offset.outerjoin(
                    topic_retention, topic_retention.c.topic == topic_offset.c.topic)))


def get_topic(conn: Connection, topic: str) -> TopicState | None:
    """A topic's offsets and retention; None for a topic never committed to nor configured."""
    row = conn.execute(_TOPIC_STATE.where(topic_offset.c.topic == topic)).first()
    return TopicState(*row) if row is not None else None


def list_topics(conn: Connection, after: str, limit: int,
                only: Collection[str] | None = None) -> list[TopicState]:
    """Topics by name after ``after``, with their offsets and retention; only those named
    in ``only`` unless it is None."""
    stmt = _TOPIC_STATE.where(topic_offset.c.topic > after)
    if only is not None:
        if not only:
            return []
        stmt = stmt.where(topic_offset.c.topic.in_(sorted(only)))
    return [TopicState(*row)
            for row in conn.execute(stmt.order_by(topic_offset.c.topic).limit(limit))]


def first_offset(conn: Connection, topic: str) -> int:
    """The lowest offset of ``topic`` still retained (0 before anything expired)."""
    stmt = select(topic_retention.c.first_offset).where(topic_retention.c.topic == topic)
    return conn.execute(stmt).scalar_one_or_none() or 0


def set_retention(conn: Connection, topic: str, seconds: int | None) -> None:
    """Store a topic's retention (None: the default), making the topic known if it is not.

    A new topic's counter row is inserted only if missing (a conflict does not lock it).
    """
    conn.execute(_insert_absent(conn, topic_offset).values(topic=topic, next_offset=0))
    conn.execute(_insert_absent(conn, topic_retention).values(topic=topic, first_offset=0))
    conn.execute(update(topic_retention).where(topic_retention.c.topic == topic)
                 .values(retention_seconds=seconds))


def add_missing_topics(conn: Connection) -> None:
    """A ``topic_retention`` row (first offset 0) for every topic that has none yet."""
    missing = select(topic_offset.c.topic, literal(0)).where(~exists().where(
        topic_retention.c.topic == topic_offset.c.topic))
    conn.execute(_insert_absent(conn, topic_retention)
                 .from_select(["topic", "first_offset"], missing))


def topic_names(conn: Connection) -> list[str]:
    return list(conn.execute(select(topic_retention.c.topic).order_by(topic_retention.c.topic))
                .scalars())


def topic_ends(conn: Connection, topic: str) -> tuple[int, int]:
    """(first retained offset, next offset) of a topic; (0, 0) for an unknown one."""
    first = first_offset(conn, topic)
    nxt = conn.execute(select(topic_offset.c.next_offset)
                       .where(topic_offset.c.topic == topic)).scalar_one_or_none() or 0
    return first, max(first, nxt)


def watermarks(conn: Connection) -> list[AnyRow]:
    """Every topic's (topic, next_offset, first_offset), from the ``topic_watermarks`` view."""
    stmt = select(topic_watermarks.c.topic, topic_watermarks.c.next_offset,
                  topic_watermarks.c.first_offset)
    return list(conn.execute(stmt))
