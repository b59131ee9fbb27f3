"""Subscriptions administered: created, changed, described, listed, deleted; their
backlogs for the metrics."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine

from app.domain import clock, leasing, tag_filters
from app.domain.limits import MAX_CONSUMER_TIMEOUT_MS
from app.domain.subscription_models import (
    KEY_SHARED,
    ONE_CONSUMER_TYPES,
    SubscriptionIn,
    backoff_refusal,
    named_settings,
)
from app.errors import Conflict, InvalidRequest, NotFound
from app.problems import ProblemCode
from app.storage import consumers, ordering, topics
from app.storage import subscriptions as store
from app.storage.db import write_transaction
from app.storage.schema import AnyRow

# -- answers ------------------------------------------------------------------------------


def _settings(row: AnyRow) -> dict[str, Any]:
    return {"topic": row.topic, "subscription": row.name, "type": row.type,
            "ack_timeout_ms": row.ack_timeout_ms, "max_redeliveries": row.max_redeliveries,
            "redelivery_backoff": {"min_ms": row.backoff_min_ms, "max_ms": row.backoff_max_ms},
            "dead_letter_topic": row.dead_letter_topic,
            "consumer_timeout_ms": row.consumer_timeout_ms, "tag_filter": row.tag_filter}


def _consumers(conn: Connection, sub: AnyRow, now: datetime) -> list[dict[str, Any]]:
    """The alive consumers: name, last seen, leases held now, whether active (on shared
    and key_shared every alive consumer is)."""
    held = consumers.in_flight(conn, sub.id, now)
    since = leasing.consumers_alive_since(sub.consumer_timeout_ms, now)
    one = sub.type in ONE_CONSUMER_TYPES
    active = sub.active_consumer
    if one and active is not None:
        last = consumers.last_seen(conn, sub.id, active)
        if last is None or last < since:
            active = None
    return [{"name": r.name, "last_seen": r.last_seen, "in_flight": held.get(r.name, 0),
             "active": (r.name == active) if one else True}
            for r in consumers.alive(conn, sub.id, since)]


def describe(conn: Connection, row: AnyRow, now: datetime) -> dict[str, Any]:
    first, nxt = topics.topic_ends(conn, row.topic)
    rows = store.counts(conn, row.id, now, first)
    unread_from = max(row.read_offset, first)
    unread, next_unread = max(0, nxt - unread_from), unread_from
    tags = tag_filters.parse(row.tag_filter)
    if tags is not None and unread:  # messages the filter leaves out count as acknowledged
        unread, lowest = store.tagged_between(conn, row.topic, unread_from, nxt, tags)
        next_unread = nxt if lowest is None else lowest
    backlog = unread + rows.open
    # the stored cursor may lag behind acks (it moves when the subscription row is free):
    # the cursor shown is where it is now
    cursor = next_unread if rows.lowest_open is None else min(rows.lowest_open, next_unread)
    return {**_settings(row), "backlog": backlog, "in_flight": rows.leased,
            "ack_cursor": max(cursor, row.ack_cursor, first), "created_at": row.created_at,
            "consumers": _consumers(conn, row, now),
            "waiting": ordering.waiting(conn, row.id) if row.type == KEY_SHARED else 0}


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
        if changes.get("type", row.type) != row.type:
            _change_type(conn, row, changes["type"], now)
            changes["active_consumer"] = None
        store.change(conn, row.id, {**changes, "updated_at": now})
        return describe(conn, found(conn, topic, name), now), False


def _change_type(conn: Connection, row: AnyRow, new: str, now: datetime) -> None:
    """Only while nothing is leased (409 ``subscription_busy``): on key_shared a key's
    rows after its lowest wait, elsewhere none does."""
    first, _ = topics.topic_ends(conn, row.topic)
    if store.counts(conn, row.id, now, first).leased:
        raise Conflict(f"subscription {row.name!r} on {row.topic!r} has messages leased: "
                       "its type changes once they are acknowledged or given back",
                       code=ProblemCode.SUBSCRIPTION_BUSY)
    if new == KEY_SHARED:
        ordering.order_by_keys(conn, row.id, row.topic, now)
    elif row.type == KEY_SHARED:
        ordering.release_waiting(conn, row.id, row.topic, now)


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
        sub_id = found(conn, topic, name, lock=True).id
        consumers.remove_all(conn, sub_id)
        store.remove(conn, sub_id)


def backlogs(engine: Engine) -> list[tuple[str, str, int]]:
    """(topic, subscription, backlog) of every subscription, for the metrics."""
    with engine.connect() as conn:
        return [(r.topic, r.name, max(0, int(r.backlog)))
                for r in store.backlogs(conn)]


def alive_consumers(engine: Engine) -> dict[tuple[str, str], int]:
    """(topic, subscription) -> consumers alive now, for the metrics; a subscription
    without any is left out."""
    now = clock.utcnow()
    counts: dict[tuple[str, str], int] = {}
    with engine.connect() as conn:
        for r in consumers.seen_since(conn, leasing.consumers_alive_since(
                MAX_CONSUMER_TIMEOUT_MS, now)):
            if r.last_seen >= leasing.consumers_alive_since(r.consumer_timeout_ms, now):
                counts[(r.topic, r.name)] = counts.get((r.topic, r.name), 0) + 1
    return counts
