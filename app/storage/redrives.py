"""SQL of redrives: the dead letters of a topic not yet redriven, and the claims that
record each (dead-letter topic, offset) with the transaction that republishes it and,
once committed, the new message's id."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, and_, bindparam, insert, update

from app.storage.log import BODY, as_read
from app.storage.schema import dead_letter_redrive, message_log

AnyRow = Any
_CLAIMED = and_(dead_letter_redrive.c.dlq_topic == message_log.c.topic,
                dead_letter_redrive.c.dlq_offset == message_log.c.queue_offset)


def unclaimed(conn: Connection, dlq_topic: str, first: int | None, last: int | None,
              limit: int) -> list[AnyRow]:
    """The committed messages of ``dlq_topic`` in ``[first, last]`` (an end None: open)
    that no redrive has claimed, in offset order, at most ``limit``."""
    stmt = (as_read(BODY).outerjoin(dead_letter_redrive, _CLAIMED)
            .where(message_log.c.topic == dlq_topic, dead_letter_redrive.c.dlq_topic.is_(None))
            .order_by(message_log.c.queue_offset).limit(limit))
    if first is not None:
        stmt = stmt.where(message_log.c.queue_offset >= first)
    if last is not None:
        stmt = stmt.where(message_log.c.queue_offset <= last)
    return list(conn.execute(stmt))


def claim(conn: Connection, dlq_topic: str, targets: Mapping[int, str], transaction_id: str,
          now: datetime) -> None:
    """Record these offsets of ``dlq_topic`` (with their target topics) as redriven by
    ``transaction_id``; an offset claimed meanwhile by another redrive: IntegrityError."""
    conn.execute(insert(dead_letter_redrive), [
        {"dlq_topic": dlq_topic, "dlq_offset": offset, "target_topic": target,
         "transaction_id": transaction_id, "message_id": None, "redriven_at": now}
        for offset, target in targets.items()])


def published(conn: Connection, dlq_topic: str, message_ids: Mapping[int, str]) -> None:
    """The claimed offsets' new messages are committed, with these ids."""
    conn.execute(update(dead_letter_redrive).where(
        dead_letter_redrive.c.dlq_topic == dlq_topic,
        dead_letter_redrive.c.dlq_offset == bindparam("at")).values(
        message_id=bindparam("new_id")),
        [{"at": offset, "new_id": mid} for offset, mid in message_ids.items()])


def unpublished(conn: Connection, dlq_topic: str) -> list[AnyRow]:
    """Claimed dead letters of ``dlq_topic`` whose new message is not known committed (a
    redrive stopped between its claim and its commit), with their claims' target topic and
    transaction id, in (transaction, offset) order."""
    stmt = (as_read(BODY)
            .add_columns(dead_letter_redrive.c.target_topic,
                         dead_letter_redrive.c.transaction_id.label("redrive_id"))
            .join(dead_letter_redrive, _CLAIMED)
            .where(dead_letter_redrive.c.dlq_topic == dlq_topic,
                   dead_letter_redrive.c.message_id.is_(None))
            .order_by(dead_letter_redrive.c.transaction_id, message_log.c.queue_offset))
    return list(conn.execute(stmt))

