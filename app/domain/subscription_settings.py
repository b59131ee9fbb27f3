"""Subscriptions administered: created, changed, described, listed, deleted; their
backlogs for the metrics."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine

from app.domain import clock
from app.domain.subscription_models import SubscriptionIn, backoff_refusal, named_settings
from app.errors import InvalidRequest, NotFound
from app.problems import ProblemCode
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
                    code=ProblemCode.SUBSCRIPTION_NOT_FOUND)


# -- administration -----------------------------------------------------------------------


def put(engine: Engine, topic: str, name: str, request: SubscriptionIn
        ) -> tuple[dict[str, Any], bool]:
    """Create a subscription (True) or change the settings the request names, the others
    keeping their values (False); its description."""
    now = clock.utcnow()
    with write_transaction(engine) as conn:
        row = store.get(conn, topic, name, lock=True)
        if row is None:
            settings = named_settings(topic, name, request, new=True)
            _check_backoff(settings)
            first, nxt = topics.topic_ends(conn, topic)
            start = first if request.initial_position == "earliest" else nxt
            if store.create(conn, {"topic": topic, "name": name, **settings,
                                   "ack_cursor": start, "read_offset": start,
                                   "created_at": now, "updated_at": now}):
                return describe(conn, found(conn, topic, name), now), True
            row = found(conn, topic, name, lock=True)  # created meanwhile elsewhere
        changes = named_settings(topic, name, request, new=False)
        _check_backoff({"backoff_min_ms": row.backoff_min_ms,
                        "backoff_max_ms": row.backoff_max_ms, **changes})
        store.change(conn, row.id, {**changes, "updated_at": now})
        return describe(conn, found(conn, topic, name), now), False


def _check_backoff(settings: dict[str, Any]) -> None:
    why = backoff_refusal(settings["backoff_min_ms"], settings["backoff_max_ms"])
    if why is not None:
        raise InvalidRequest(why, code=ProblemCode.INVALID_BACKOFF)


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
