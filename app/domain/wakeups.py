"""Wake-ups of long-polling receives: a version number per topic, which a commit bumps,
so that a waiting receive needs neither a thread nor a database connection, only a
version number to compare.

What wakes a receive, each counted in ``txmsg_wakeups_total`` by its ``source``:

- ``local``: a commit of this process (``Lifecycle``, ``Subscriptions``), once durable.
  The process's publisher, if it has one (``relay_to``), sends the topics on to the
  other processes as a PostgreSQL notification (``app.storage.notices``).
- ``notify``: a commit of another process (another ``txmsg serve`` or web worker, the
  checker, ``txmsg commit``), from such a notification; not relayed again.
- ``local`` too: a nack's delay (or backoff) running out, by a timer of this process
  (``notify_later``), so that a waiting receive gets the message on time.
- ``probe``: what no commit signals (delayed messages coming due, leases running out)
  and any notification lost (the database restarting, a listener reconnecting), found
  by a probe per subscription with receives waiting (``app.api.longpoll``): a waiting
  receive looks again at least every ``RECHECK_SECONDS`` whatever happens.

On SQLite there are no notifications: its writers are one process.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import threading
import time
from collections.abc import Callable, Iterable

from app import metrics

RECHECK_SECONDS = 1.0
# what bumped a topic's version (the label of txmsg_wakeups_total)
LOCAL, NOTIFIED, PROBED = metrics.WAKEUP_SOURCES


class TopicSignal:
    """A version number per topic, bumped by ``notify``; waiters, on threads or on event
    loops, wait for it to move past the version they saw before they last looked."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._versions: dict[str, int] = {}
        self._sources: dict[str, str] = {}  # what bumped each version last
        self._futures: dict[str, list[tuple[asyncio.AbstractEventLoop,
                                             asyncio.Future[str]]]] = {}
        self._relay: Callable[[Iterable[str]], None] | None = None
        # notify_later's timers: (monotonic due time, tie-breaker, topics), soonest first
        self._timers: list[tuple[float, int, tuple[str, ...]]] = []
        self._timer_ids = itertools.count()
        self._timer_set = threading.Condition(self._lock)
        self._timer_thread: threading.Thread | None = None

    def relay_to(self, publish: Callable[[Iterable[str]], None]) -> None:
        """Hand the topics of this process's own notifies to ``publish`` too (for the
        other processes; it must not wait)."""
        self._relay = publish

    def version(self, topic: str) -> int:
        """The topic's version now (read it before looking, wait on it after)."""
        with self._lock:
            return self._versions.setdefault(topic, 0)

    def waiting(self, topic: str) -> int:
        """Coroutines waiting on the topic now."""
        with self._lock:
            return len(self._futures.get(topic, ()))

    def notify(self, topics: Iterable[str], source: str = LOCAL) -> None:
        """Something became deliverable on these topics (called once it is durable):
        ``LOCAL``, by this process (relayed, see ``relay_to``), ``NOTIFIED`` or ``PROBED``."""
        topics = tuple(topics)
        woken: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[str]]] = []
        with self._lock:
            moved = False
            for topic in topics:
                if topic in self._versions:  # only topics someone asked about
                    self._versions[topic] += 1
                    self._sources[topic] = source
                    moved = True
                    woken.extend(self._futures.pop(topic, ()))
            if moved:
                self._changed.notify_all()
        for loop, future in woken:
            try:
                loop.call_soon_threadsafe(_wake, future, source)
            except RuntimeError:  # that loop has closed: nobody waits there any more
                pass
        if source == LOCAL and self._relay is not None and topics:
            self._relay(topics)

    def notify_later(self, topics: Iterable[str], delay_seconds: float) -> None:
        """``notify`` (``LOCAL``) after ``delay_seconds`` (at once if not positive), from
        one timer thread per signal, started on first use."""
        topics = tuple(topics)
        if delay_seconds <= 0:
            self.notify(topics)
            return
        with self._lock:
            heapq.heappush(self._timers, (time.monotonic() + delay_seconds,
                                          next(self._timer_ids), topics))
            if self._timer_thread is None:
                self._timer_thread = threading.Thread(target=self._run_timers, daemon=True,
                                                      name="txmsg-wakeup-timers")
                self._timer_thread.start()
            self._timer_set.notify()

    def _run_timers(self) -> None:
        while True:
            with self._lock:
                while not self._timers or self._timers[0][0] > time.monotonic():
                    self._timer_set.wait(self._timers[0][0] - time.monotonic()
                                         if self._timers else None)
                _, _, topics = heapq.heappop(self._timers)
            self.notify(topics)

    def wait(self, topic: str, seen: int, timeout: float) -> None:
        """Block this thread until the topic's version moves past ``seen`` or ``timeout``."""
        with self._changed:
            if self._changed.wait_for(lambda: self._versions.get(topic, 0) != seen, timeout):
                metrics.WAKEUPS.labels(self._sources.get(topic, LOCAL)).inc()

    async def wait_async(self, topic: str, seen: int, timeout: float) -> None:
        """``wait`` for a coroutine: no thread is held."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[str] = loop.create_future()
        entry = (loop, future)
        with self._lock:
            if self._versions.setdefault(topic, 0) != seen:
                metrics.WAKEUPS.labels(self._sources.get(topic, LOCAL)).inc()
                return
            self._futures.setdefault(topic, []).append(entry)
        try:
            metrics.WAKEUPS.labels(await asyncio.wait_for(future, timeout)).inc()
        except TimeoutError:
            pass
        finally:
            with self._lock:
                waiting = self._futures.get(topic)
                if waiting is not None and entry in waiting:
                    waiting.remove(entry)
                    if not waiting:
                        del self._futures[topic]


def _wake(future: asyncio.Future[str], source: str) -> None:
    if not future.done():
        future.set_result(source)
