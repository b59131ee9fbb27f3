"""Retention: what expires, when, and in what order (the SQL is ``app.storage.retention``).

- A committed message expires once its topic's retention (``retention_seconds`` of the
  topic, else ``TXMSG_RETENTION_SECONDS``) has passed since its commit. A topic expires
  from its head: the first offset still retained becomes the topic's ``first_offset``,
  and offsets are never reused (the counter row is never touched).
- A transaction resolved (COMMITTED, ROLLED_BACK) longer ago than
  ``TXMSG_RETENTION_SECONDS`` goes with its half messages, op and check records once no
  committed log row refers to its messages: a topic with a longer retention, or the
  discard topic, keeps it. PREPARED and DISCARDED transactions never go. A transaction
  that goes leaves its key (producer group, transaction id) behind, for good: a send
  that uses it again is refused (409), never published a second time.

Transactions are found two ways. A walk over resolved transactions in (resolved_at, id)
order, from a cursor stored in the database, sees each one once it is old enough; the
cursor trails the walk by ``CURSOR_LAG``, so a commit that became visible late (or a
clock a little behind) is still seen. A transaction the walk passed while its messages
were still in some topic is queued again (``retention_pending``) in the very database
transaction that deletes its last log rows, and looked at after that commits.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from sqlalchemy import Engine

from app import metrics
from app.config import Settings
from app.domain import clock
from app.domain.messages import TopicRetentionIn
from app.errors import NotFound
from app.problems import ProblemCode
from app.storage import retention as store
from app.storage import subscriptions
from app.storage import topics as topic_store
from app.storage.db import commit_without_flush, write_transaction
from app.storage.dialects import dialect_of
from app.storage.schema import AnyRow

log = logging.getLogger(__name__)

CURSOR_LAG = timedelta(minutes=5)

Key = tuple[datetime, int]  # (resolved_at, txn id)

def _now() -> datetime:
    return clock.utcnow()


class Retention:
    """One process's share of the retention work; ``run()`` once per interval."""

    def __init__(self, engine: Engine, settings: Settings,
                 clock: Callable[[], datetime] | None = None) -> None:
        self.engine = engine
        self.settings = settings
        self.clock = clock if clock is not None else _now
        self._walked: Key = store.WALK_START
        self._unvacuumed: Counter[str] = Counter()  # rows deleted here, by table

    @property
    def default(self) -> timedelta:
        return timedelta(seconds=self.settings.retention_seconds)

    def run(self, stop: threading.Event | None = None) -> Counter[str]:
        """Expire what is due, batch after batch, until nothing is or ``stop`` is set; the
        rows deleted by kind. On SQLite, where a batch holds the one write lock, it rests
        between batches as long as the batch took, so writers get at least half of the
        lock whatever the backlog; on PostgreSQL it locks nothing writers wait for.

        Topics and transactions expire against the same clock reading: a transaction
        resolved before the cutoff had its messages committed before it, so its topics
        (at the default retention) have let them go when the walk reaches it. With a
        later reading for the walk, each run met the transactions resolved in between
        still referred to, and locked their log rows for nothing."""
        stop = stop or threading.Event()
        now = self.clock()
        deleted: Counter[str] = Counter()
        with write_transaction(self.engine) as conn:
            topic_store.add_missing_topics(conn)
        with self.engine.connect() as conn:
            topics = topic_store.topic_names(conn)
        for topic in topics:
            while not stop.is_set():
                started = time.monotonic()
                n, more = self.expire_topic(topic, now)
                deleted["messages"] += n
                if not more:
                    break
                self._rest(stop, started)
        self._walked = store.WALK_START
        while not stop.is_set():
            started = time.monotonic()
            counts, more = self.expire_transactions(now)
            deleted.update(counts)
            if not more:
                break
            self._rest(stop, started)
        self._vacuum(deleted)
        return +deleted  # without the kinds at 0

    def _vacuum(self, deleted: Counter[str]) -> None:
        """On a PostgreSQL server without autovacuum, VACUUM each table once
        ``retention_vacuum_rows`` of its rows were deleted here since its last one: a
        table emptied as fast as it fills and never vacuumed grows on disk forever while
        its row count stays flat. Where autovacuum runs, the vacuuming is left to it (the
        job would only do its work twice)."""
        every = self.settings.retention_vacuum_rows
        if not every or not dialect_of(self.engine).vacuums:
            return
        for kind, n in deleted.items():
            self._unvacuumed[store.TABLE_OF_KIND[kind]] += n
        due = sorted(t for t, n in self._unvacuumed.items() if n >= every)
        if not due:
            return
        with self.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            vacuumed = not store.autovacuum_on(conn)
            if vacuumed:
                store.vacuum(conn, due)
        for table in due:
            del self._unvacuumed[table]
        if vacuumed:
            log.info("retention: vacuumed %s", ", ".join(due))

    def _rest(self, stop: threading.Event, started: float) -> None:
        """Where writers take turns on the database, as long as the batch took: the
        writers it kept waiting get their turn."""
        if dialect_of(self.engine).one_writer:
            stop.wait(time.monotonic() - started)

    def expire_topic(self, topic: str, now: datetime) -> tuple[int, bool]:
        """One batch of ``topic``'s expired head at ``now``: (rows deleted, whether more
        may be due). Nothing when another process holds the topic this moment."""
        with write_transaction(self.engine) as conn:
            commit_without_flush(conn)
            row = store.lock_topic(conn, topic)
            if row is None:
                return 0, False
            seconds = row.retention_seconds or self.settings.retention_seconds
            head = store.expired_head(conn, topic, row.first_offset,
                                      now - timedelta(seconds=seconds),
                                      self.settings.retention_batch_size)
            if head.end <= row.first_offset:
                return 0, False
            n = store.expire_head(conn, topic, row.first_offset, head.end, head.oldest)
            skipped = subscriptions.expire_below(conn, topic, head.end, now)
        metrics.RETENTION_DELETED.labels("messages").inc(n)
        for name, count in skipped:
            metrics.SUBSCRIPTION_EXPIRED.labels(topic, name).inc(max(0, count))
        if n:
            log.info("retention: %d messages of %s expired (offsets %d..%d)", n, topic,
                     row.first_offset, head.end - 1)
        return n, head.more

    def expire_transactions(self, now: datetime) -> tuple[dict[str, int], bool]:
        """One batch of resolved transactions past the retention at ``now``: (rows deleted
        by kind, whether more may be due). Nothing when another process holds the walk."""
        cutoff = now - self.default
        batch = self.settings.retention_batch_size
        with write_transaction(self.engine) as conn:
            commit_without_flush(conn)
            cursor = store.lock_cursor(conn)
            if cursor is None:
                return {}, False
            walked = _fill(store.walk_resolved(conn, max(cursor, self._walked), cutoff, batch),
                           batch)
            pending = _fill(store.read_pending(conn, batch), batch)
            ids = [r.id for r in walked.rows] + [r.txn_id for r in pending.rows]
            store.remember_forgotten(conn, ids, cutoff, now)
        # the keys kept are committed before their transactions go (``remember_forgotten``)
        with write_transaction(self.engine) as conn:
            commit_without_flush(conn)
            cursor = store.lock_cursor(conn)
            if cursor is None:
                return {}, False
            gone = store.expire_transactions(conn, ids, cutoff)
            store.forget_pending(conn, [r.id for r in pending.rows])
            if walked.rows:
                self._walked = (walked.rows[-1].resolved_at, walked.rows[-1].id)
            # the stored cursor trails the walk (see the module docstring)
            stored = min(self._walked, (cutoff - CURSOR_LAG, 0))
            if stored > cursor:
                store.move_cursor(conn, *stored)
        counts = gone._asdict()
        for kind, n in counts.items():
            metrics.RETENTION_DELETED.labels(kind).inc(n)
        if gone.transactions:
            log.info("retention: %d transactions expired (%d half messages, %d op records, "
                     "%d check records)", *gone)
        return counts, walked.more or pending.more


class _Batch(NamedTuple):
    rows: list[AnyRow]
    more: bool  # rows were left for the next batch


def _fill(rows: list[AnyRow], messages: int) -> _Batch:
    """The first of ``rows`` (read with LIMIT ``messages``) whose transactions hold
    ``messages`` messages in all, at least one row: a batch is bounded by the rows it
    deletes, not by its transactions."""
    total = 0
    for i, row in enumerate(rows):
        total += row.message_count
        if total >= messages:
            return _Batch(rows[:i + 1], True)
    return _Batch(rows, len(rows) == messages)


def _topic(state: topic_store.TopicState, default: int) -> dict[str, Any]:
    """A topic as the API shows it: ``retention_seconds`` is the retention in force,
    ``retention_default`` says whether it is TXMSG_RETENTION_SECONDS."""
    return {"topic": state.topic, "first_offset": state.first_offset,
            "next_offset": state.next_offset,
            "retention_seconds": state.retention_seconds or default,
            "retention_default": state.retention_seconds is None}


def get_topic(engine: Engine, settings: Settings, topic: str) -> dict[str, Any]:
    with engine.connect() as conn:
        state = topic_store.get_topic(conn, topic)
    if state is None:
        raise NotFound(f"no topic {topic!r}", code=ProblemCode.TOPIC_NOT_FOUND)
    return _topic(state, settings.retention_seconds)


def list_topics(engine: Engine, settings: Settings, after: str, limit: int) -> dict[str, Any]:
    """Every topic by name, as ``get_topic`` shows one; ``next_after`` pages on."""
    with engine.connect() as conn:
        states = topic_store.list_topics(conn, after, limit)
    return {"topics": [_topic(s, settings.retention_seconds) for s in states],
            "next_after": states[-1].topic if len(states) == limit else None}


def set_topic_retention(engine: Engine, settings: Settings, topic: str,
                        request: TopicRetentionIn) -> dict[str, Any]:
    with write_transaction(engine) as conn:
        topic_store.set_retention(conn, topic, request.retention_seconds)
        state = topic_store.get_topic(conn, topic)
    assert state is not None
    return _topic(state, settings.retention_seconds)


def oldest_ages(engine: Engine) -> list[tuple[str, float]]:
    """(topic, seconds since the commit of its oldest retained message), for /metrics."""
    now = clock.utcnow()
    with engine.connect() as conn:
        rows = store.oldest_retained(conn)
    return [(r.topic, max(0.0, (now - r.committed_at).total_seconds())) for r in rows]
