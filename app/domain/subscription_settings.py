"""Subscriptions administered: created, changed, described, listed, deleted; their
backlogs for the metrics."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine

from app.domain import clock
from app.domain.names import NAME_PATTERN, is_valid_name
from app.domain.subscription_models import SubscriptionIn, dead_letter_topic
from app.errors import InvalidRequest, NotFound
from app.storage import subscriptions as store
from app.storage import topics
from app.storage.db import write_transaction
from app.storage.schema import AnyRow

# -- answers ------------------------------------------------------------------------------


def _settings(row: AnyRow) -> dict[str, Any]:
    return {"topic": row.topic, "subscription": row.name,
            "ack_timeout_ms": row.ack_timeout_ms, "max_redeliveries": row.max_redeliveries,
            "redelivery_backoff": {"min_ms": row.backoff_min_ms, "max_ms": row.backoff_max_ms},
            "dead_letter_topic": row.dead_letter_topic}


def describe(conn: Connection, row: AnyRow, now: datetime) -> dict[str, Any]:
    first, nxt = topics.topic_ends(conn, row.topic)
    rows = store.counts(conn, row.id, now, first)
    backlog = max(0, nxt - max(row.read_offset, first)) + rows.open
    # the stored cursor may lag behind acks (it moves when the subscription row is free):
    # the cursor shown is where it is now
    cursor = row.read_offset if rows.lowest_open is None else rows.lowest_open
    return {**_settings(row), "backlog": backlog, "in_flight": rows.leased,
            "ack_cursor": max(cursor, row.ack_cursor, first), "created_at": row.created_at}


def found(conn: Connection, topic: str, name: str, *, lock: bool = False) -> AnyRow:
    row = store.get(conn, topic, name, lock=lock)
    if row is None:
        raise not_found(topic, name)
    return row


def not_found(topic: str, name: str) -> NotFound:
    return NotFound(f"no subscription {name!r} on topic {topic!r}",
                    code="subscription_not_found")


# -- administration -----------------------------------------------------------------------


def put(engine: Engine, topic: str, name: str, request: SubscriptionIn
        ) -> tuple[dict[str, Any], bool]:
    """Create a subscription (True) or change its settings (False); its description."""
    dead_letter = dead_letter_topic(topic, name, request)
    if request.dead_letter_topic is None and not is_valid_name(dead_letter):
        raise InvalidRequest(
            f"the default dead-letter topic {dead_letter[:200]!r} would break the name rule "
            f"{NAME_PATTERN}; give dead_letter_topic", code="invalid_dead_letter_topic")
    settings = {"ack_timeout_ms": request.ack_timeout_ms,
                "max_redeliveries": request.max_redeliveries,
                "backoff_min_ms": request.redelivery_backoff.min_ms,
                "backoff_max_ms": request.redelivery_backoff.max_ms,
                "dead_letter_topic": dead_letter}
    now = clock.utcnow()
    with write_transaction(engine) as conn:
        first, nxt = topics.topic_ends(conn, topic)
        start = first if request.initial_position == "earliest" else nxt
        created = store.create(conn, {"topic": topic, "name": name, **settings,
                                      "ack_cursor": start, "read_offset": start,
                                      "created_at": now, "updated_at": now})
        row = found(conn, topic, name, lock=True)
        if not created:
            store.change(conn, row.id, {**settings, "updated_at": now})
            row = found(conn, topic, name)
        return describe(conn, row, now), created


def get(engine: Engine, topic: str, name: str) -> dict[str, Any]:
    with engine.connect() as conn:
        return describe(conn, found(conn, topic, name), clock.utcnow())


def list_subscriptions(engine: Engine, topic: str, after: str, limit: int) -> dict[str, Any]:
    now = clock.utcnow()
    with engine.connect() as conn:
        rows = store.list_of(conn, topic, after, limit)
        items = [describe(conn, r, now) for r in rows]
    return {"topic": topic, "subscriptions": items,
            "next_after": rows[-1].name if len(rows) == limit else None}


def describe_each(engine: Engine, pairs: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
    """Each (topic, name) described as ``get`` does, on one connection; the ones that no
    longer exist are left out."""
    now = clock.utcnow()
    with engine.connect() as conn:
        rows = [store.get(conn, topic, name) for topic, name in pairs]
        return [describe(conn, row, now) for row in rows if row is not None]


def delete(engine: Engine, topic: str, name: str) -> None:
    with write_transaction(engine) as conn:
        store.remove(conn, found(conn, topic, name, lock=True).id)


def backlogs(engine: Engine) -> list[tuple[str, str, int]]:
    """(topic, subscription, backlog) of every subscription, for the metrics."""
    with engine.connect() as conn:
        return [(r.topic, r.name, max(0, int(r.backlog)))
                for r in store.backlogs(conn)]
