"""Named consumers of a subscription: liveness (a consumer is alive while its last call
is less than ``consumer_timeout_ms`` ago), the active one of a failover or exclusive
subscription and its takeover, leaving.

A call records its consumer as seen, at most every ``_SEEN_EVERY`` seconds per consumer
in this process: liveness counts in whole timeouts of at least a second, and a receive
loop calls many times a second. A failover or exclusive receive, which decides who is
active, records it every time."""

from __future__ import annotations

import threading
import weakref
from datetime import datetime

from sqlalchemy import Connection, Engine

from app.domain import clock, leasing
from app.domain.subscription_models import EXCLUSIVE
from app.domain.subscription_settings import found
from app.errors import Conflict
from app.problems import ProblemCode
from app.storage import consumers as store
from app.storage import subscriptions as subs_store
from app.storage.db import write_transaction
from app.storage.schema import AnyRow

_SEEN_EVERY = 0.25
_lock = threading.Lock()
# by engine (a process may serve several stores: tests do), what was done when, by the
# service's clock: (topic, subscription, consumer) recorded as seen; (topic, subscription,
# "") looked at for consumers gone
_done_at: weakref.WeakKeyDictionary[Engine, dict[tuple[str, str, str], datetime]] = (
    weakref.WeakKeyDictionary())


def _due(engine: Engine, key: tuple[str, str, str], now: datetime) -> bool:
    """Whether ``key`` was not done in the last ``_SEEN_EVERY`` seconds (and is now)."""
    with _lock:
        done = _done_at.setdefault(engine, {})
        last = done.get(key)
        if last is not None and 0 <= (now - last).total_seconds() < _SEEN_EVERY:
            return False
        if len(done) > 100_000:
            done.clear()
        done[key] = now
        return True


def _forget_seen(engine: Engine, topic: str, name: str, consumer: str) -> None:
    with _lock:
        _done_at.get(engine, {}).pop((topic, name, consumer), None)


def seen_now_and_then(conn: Connection, topic: str, name: str, consumer: str | None) -> None:
    """Record the consumer as seen on the subscription of this name, unless this process
    did a moment ago."""
    now = clock.utcnow()
    if consumer is not None and _due(conn.engine, (topic, name, consumer), now):
        store.seen_by_name(conn, topic, name, consumer, now)


def since(sub: AnyRow, now: datetime) -> datetime:
    return leasing.consumers_alive_since(sub.consumer_timeout_ms, now)


def take_turn(conn: Connection, sub: AnyRow, consumer: str, now: datetime) -> str:
    """On a failover or exclusive subscription (its row locked): record the consumer as
    seen and answer who is active. An active consumer no longer alive gives way: its
    leases are released and it is forgotten; then an exclusive subscription goes to this
    consumer, a failover one to the alive consumer with the lowest name."""
    store.seen(conn, sub.id, consumer, now)
    _forget_seen(conn.engine, sub.topic, sub.name, consumer)
    active: str | None = sub.active_consumer
    if active is not None and active != consumer:
        last = store.last_seen(conn, sub.id, active)
        if last is None or last < since(sub, now):
            store.release(conn, sub.id, active, now)
            store.remove(conn, sub.id, active)
            active = None
    if active is None:
        active = (consumer if sub.type == EXCLUSIVE
                  else str(store.alive(conn, sub.id, since(sub, now))[0].name))
        subs_store.change(conn, sub.id, {"active_consumer": active})
    return active


def release_the_gone(conn: Connection, sub: AnyRow, now: datetime) -> None:
    """On shared and key_shared (the subscription row locked): the leases of consumers no
    longer alive go back at once, as Pulsar redelivers a disconnected consumer's messages,
    and the consumers are forgotten. Looked at most every ``_SEEN_EVERY`` seconds per
    subscription in this process (by the service's clock)."""
    if not _due(conn.engine, (sub.topic, sub.name, ""), now):
        return
    for name in store.gone(conn, sub.id, since(sub, now)):
        store.release(conn, sub.id, name, now)
        store.remove(conn, sub.id, name)


def refuse_unless_holder(sub: AnyRow, consumer: str, active: str) -> None:
    if sub.type == EXCLUSIVE and consumer != active:
        raise Conflict(f"subscription {sub.name!r} on {sub.topic!r} is held by another "
                       "consumer", code=ProblemCode.SUBSCRIPTION_BUSY, consumer=consumer)


def leave(engine: Engine, topic: str, name: str, consumer: str) -> None:
    """The consumer leaves at once: its leases released for redelivery, and on a
    failover or exclusive subscription, if it was active, the next one takes over."""
    _forget_seen(engine, topic, name, consumer)
    now = clock.utcnow()
    with write_transaction(engine) as conn:
        sub = found(conn, topic, name, lock=True)
        store.release(conn, sub.id, consumer, now)
        store.remove(conn, sub.id, consumer)
        if sub.active_consumer == consumer:
            subs_store.change(conn, sub.id, {"active_consumer": None})
