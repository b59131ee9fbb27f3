"""Group commit: many concurrent requests share one database transaction.

A single writer thread takes the first waiting request, drains whatever else is queued
(up to ``max_batch``) and applies the whole batch in one transaction. It never waits for
more work: a batch flushes as soon as the writer is free or the batch is full. Each
caller blocks until the transaction holding its request has committed, so every answer
is sent only after its data is durable.

A deadline bounds the wait: when a batch has run longer than ``timeout`` (the database
stopped answering: a partition, a stalled proxy), a watchdog answers its requests, and
those queued behind it, with DatabaseUnavailable. The writer itself goes on waiting for
the database (the network's own timeouts, see ``app.storage.db``, end a real partition)
and serves again as soon as it answers.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from sqlalchemy import Connection, Engine
from sqlalchemy import exc as sa_exc

from app.errors import ApiError, DatabaseUnavailable
from app.storage.db import transaction_pooled, write_connection

log = logging.getLogger(__name__)

T = TypeVar("T")
_KEEP_IDLE_SECONDS = 1.0
ApplyFn = Callable[[Connection, Sequence[T]], list[Any]]


@dataclass
class WriterStats:
    transactions: int = 0
    requests: int = 0
    largest_batch: int = 0
    fallbacks: int = 0


class _Pending(Generic[T]):
    """One submitted item and its answer, handed over on a lock held until it is set.

    Lighter than a ``concurrent.futures.Future``: the waiting thread wakes once, when the
    writer releases the lock, instead of waking on a condition and then competing for
    the condition's own lock with the writer that is still setting the other answers.
    """

    __slots__ = ("_done", "_error", "_settled", "_value", "item")

    def __init__(self, item: T) -> None:
        self.item = item
        self._value: Any = None
        self._error: BaseException | None = None
        self._settled = False
        self._done = threading.Lock()
        self._done.acquire()

    def settle(self, value: Any, error: BaseException | None) -> None:
        """Answer once (the caller holds the writer's settle lock): the first answer,
        the watchdog's or the writer's, stands."""
        if self._settled:
            return
        self._settled = True
        self._value, self._error = value, error
        self._done.release()

    def result(self) -> Any:
        self._done.acquire()
        if self._error is not None:
            raise self._error
        return self._value


class _AsyncPending(Generic[T]):
    """An item submitted from an event loop: its answer is an asyncio future of that loop."""

    __slots__ = ("future", "item", "loop")

    def __init__(self, item: T, loop: asyncio.AbstractEventLoop) -> None:
        self.item = item
        self.loop = loop
        self.future: asyncio.Future[Any] = loop.create_future()


Answer = tuple[Any, BaseException | None]  # (value, error): one settles a pending item


def _settle_futures(answers: list[tuple[asyncio.Future[Any], Any, BaseException | None]]
                    ) -> None:
    for future, value, error in answers:
        if future.done():  # its request was cancelled; the write stands
            continue
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)


def _settle(batch: Sequence[_Pending[Any] | _AsyncPending[Any]], answers: Sequence[Answer],
            lock: threading.Lock) -> None:
    """Hand each answer to its waiter: a thread's lock is released at once; an event loop
    is woken once per batch, whatever number of its requests the batch carried. A waiter
    already answered (by the deadline) keeps its first answer."""
    by_loop: dict[asyncio.AbstractEventLoop, list[Any]] = {}
    with lock:
        for pending, (value, error) in zip(batch, answers, strict=True):
            if isinstance(pending, _Pending):
                pending.settle(value, error)
            else:
                by_loop.setdefault(pending.loop, []).append((pending.future, value, error))
    for loop, futures in by_loop.items():
        try:
            loop.call_soon_threadsafe(_settle_futures, futures)
        except RuntimeError:  # the loop has closed: nobody is waiting any more
            log.debug("an event loop closed before its answers were ready")


class GroupCommitWriter(Generic[T]):
    """Applies submitted items in shared transactions with ``apply(conn, items)``.

    ``apply`` returns one outcome per item: a value, or an ``ApiError`` instance that is
    raised in the submitting thread or coroutine (a per-request refusal does not abort
    the batch).
    If the batch's transaction fails as a whole, each item is retried alone, so one bad
    request (say a unique-key race with another process) cannot fail its neighbours.

    ``one_statement``: ``apply`` writes with a single statement, atomic and durable by
    itself, and only reads around it; it then runs without BEGIN and COMMIT, which saves
    two round trips per batch.

    ``timeout``: the deadline of a batch (see the module's docstring); every request is
    answered within about ``timeout`` of the start of the batch ahead of it.

    ``on_depth``: told the writer's ``depth`` about once a second, from the watchdog's
    thread (a gauge), so the request path pays nothing for it.
    """

    def __init__(self, engine: Engine, apply: ApplyFn[T], *, max_batch: int = 512,
                 name: str = "txmsg-writer", one_statement: bool = False,
                 on_batch: Callable[[int], object] | None = None,
                 on_depth: Callable[[int], object] | None = None,
                 timeout: float | None = None) -> None:
        self._engine = engine
        self._apply = apply
        self._one_statement = one_statement
        self._max_batch = max_batch
        self._on_batch = on_batch  # told each committed batch's size (a metric)
        self._on_depth = on_depth
        self._queue: queue.SimpleQueue[_Pending[T] | _AsyncPending[T] | None] = queue.SimpleQueue()
        self.stats = WriterStats()
        self._conn: Connection | None = None
        self._last_used = 0.0
        self._settle_lock = threading.Lock()
        # (start, batch) while a batch is being written: what the watchdog looks at
        self._current: tuple[float, list[_Pending[T] | _AsyncPending[T]]] | None = None
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()
        if timeout is not None or on_depth is not None:
            threading.Thread(target=self._watch, args=(timeout,), name=f"{name}-deadline",
                             daemon=True).start()

    def submit(self, item: T) -> Any:
        """Write ``item`` with the next batch; its outcome, once the batch is durable."""
        pending: _Pending[T] = _Pending(item)
        self._queue.put(pending)
        return pending.result()

    async def submit_async(self, item: T) -> Any:
        """``submit`` for a coroutine: the event loop goes on serving while it waits."""
        pending = _AsyncPending(item, asyncio.get_running_loop())
        self._queue.put(pending)
        return await pending.future

    def close(self) -> None:
        self._closed.set()
        self._queue.put(None)
        self._thread.join(timeout=10)

    @property
    def depth(self) -> int:
        """Requests submitted and not yet answered by a batch: queued, or being written."""
        current = self._current
        return self._queue.qsize() + (len(current[1]) if current is not None else 0)

    @property
    def alive(self) -> bool:
        """Whether the writer thread still runs (until ``close``)."""
        return self._thread.is_alive()

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                self._release()
                return
            batch = [first]
            while len(batch) < self._max_batch:
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    self._queue.put(None)
                    break
                batch.append(nxt)
            self._current = (time.monotonic(), batch)
            self._flush(batch)
            self._current = None

    def _watch(self, timeout: float | None) -> None:
        """Answer DatabaseUnavailable to a batch past its deadline and to whatever queues
        behind it, for as long as the writer stays stuck in that batch; report the depth."""
        expired: list[Any] | None = None
        while not self._closed.wait(1.0 if timeout is None else min(1.0, timeout / 4)):
            if self._on_depth is not None:
                self._on_depth(self.depth)
            current = self._current
            if timeout is None or current is None or time.monotonic() - current[0] < timeout:
                continue
            started, batch = current
            late = self._drain()
            if batch is not expired:
                expired = batch
                late = batch + late
                log.warning("the database has not answered a batch of %d in %.1f s; "
                            "answering 503 until it does", len(batch), time.monotonic() - started)
            if late:
                error = DatabaseUnavailable(f"the database did not answer within {timeout:g} s")
                _settle(late, [(None, error)] * len(late), self._settle_lock)

    def _drain(self) -> list[_Pending[T] | _AsyncPending[T]]:
        drained: list[_Pending[T] | _AsyncPending[T]] = []
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return drained
            if item is None:  # closing: leave the sign for the writer
                self._queue.put(None)
                return drained
            drained.append(item)

    def _flush(self, batch: list[_Pending[T] | _AsyncPending[T]], attempt: int = 0) -> None:
        try:
            outcomes = self._transact(batch)
        except (sa_exc.SQLAlchemyError, DatabaseUnavailable) as exc:
            lock_conflict = _is_lock_conflict(exc)
            if lock_conflict and attempt < 3:
                self._flush(batch, attempt + 1)
                return
            error = exc if isinstance(exc, DatabaseUnavailable) else None
            if len(batch) > 1 and (error is None or lock_conflict):
                self.stats.fallbacks += 1
                log.info("batch of %d failed (%s); retrying one by one", len(batch), exc)
                for pending in batch:
                    self._flush([pending])
                return
            _settle(batch, [(None, error or exc)] * len(batch), self._settle_lock)
            return
        except BaseException as exc:  # a bug in apply: report it to every waiter, keep serving
            log.exception("group commit batch failed")
            _settle(batch, [(None, exc)] * len(batch), self._settle_lock)
            return
        _settle(batch, [(None, o) if isinstance(o, ApiError) else (o, None) for o in outcomes],
                self._settle_lock)

    def _transact(self, batch: list[_Pending[T] | _AsyncPending[T]]) -> list[Any]:
        items = [p.item for p in batch]
        while True:
            reused = self._conn is not None
            conn = self._connection()
            trans = conn.begin()  # under one_statement, a no-op for the database
            try:
                outcomes = self._apply(conn, items)
            except BaseException as exc:
                self._release()  # never reuse a connection a batch failed on
                # A kept connection can die while idle (a database restart) and nothing
                # pings it: if it is lost before the commit, nothing of the batch was
                # written, so the batch runs again on a fresh (pinged) connection. (Under
                # one_statement the statement may have committed as the connection died:
                # apply must then be idempotent, as sends are: a stored key answers as
                # a retried send.)
                if reused and getattr(exc, "connection_invalidated", False):
                    log.info("writer connection lost (%s); retrying the batch", exc)
                    continue
                raise
            try:
                trans.commit()
            except BaseException:
                self._release()
                raise
            break
        self._last_used = time.monotonic()
        self.stats.transactions += 1
        self.stats.requests += len(batch)
        self.stats.largest_batch = max(self.stats.largest_batch, len(batch))
        if self._on_batch is not None:
            self._on_batch(len(batch))
        return outcomes

    def _connection(self) -> Connection:
        # Under load the writer keeps one connection (no pool checkout and pre-ping per
        # batch); after a pause it takes a fresh, pinged one from the pool.
        if self._conn is not None and time.monotonic() - self._last_used > _KEEP_IDLE_SECONDS:
            self._release()
        if self._conn is None:
            conn = write_connection(self._engine)
            if self._one_statement and not transaction_pooled(conn):
                conn = conn.execution_options(isolation_level="AUTOCOMMIT")
            self._conn = conn
        return self._conn

    def _release(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            try:
                conn.close()
            except (sa_exc.SQLAlchemyError, DatabaseUnavailable):
                log.debug("closing the writer's connection failed", exc_info=True)


def _is_lock_conflict(exc: BaseException) -> bool:
    """A deadlock, a serialization failure or SQLite's busy lock: the batch may run again
    (the driver's error is the cause of the DatabaseUnavailable raised for it)."""
    text = f"{exc} {exc.__cause__}".lower()
    return "deadlock" in text or "could not serialize" in text or "database is locked" in text
