"""Wake-ups of long-polling receives: this process's commits tell the receives waiting on
their topics, so that a waiting receive needs neither a thread nor a database connection,
only a version number to compare.

Commits of other processes (another ``txmsg serve``, the checker), delayed messages
coming due and leases running out are not signalled: a waiting receive also looks again
at least every ``RECHECK_SECONDS``.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable

RECHECK_SECONDS = 1.0


class TopicSignal:
    """A version number per topic, bumped by ``notify``; waiters, on threads or on event
    loops, wait for it to move past the version they saw before they last looked."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._versions: dict[str, int] = {}
        self._futures: dict[str, list[tuple[asyncio.AbstractEventLoop,
                                             asyncio.Future[None]]]] = {}

    def version(self, topic: str) -> int:
        """The topic's version now (read it before looking, wait on it after)."""
        with self._lock:
            return self._versions.setdefault(topic, 0)

    def waiting(self, topic: str) -> int:
        """Coroutines waiting on the topic now."""
        with self._lock:
            return len(self._futures.get(topic, ()))

    def notify(self, topics: Iterable[str]) -> None:
        """Something became deliverable on these topics (called once it is durable)."""
        woken: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        with self._lock:
            moved = False
            for topic in topics:
                if topic in self._versions:  # only topics someone asked about
                    self._versions[topic] += 1
                    moved = True
                    woken.extend(self._futures.pop(topic, ()))
            if moved:
                self._changed.notify_all()
        for loop, future in woken:
            try:
                loop.call_soon_threadsafe(_wake, future)
            except RuntimeError:  # that loop has closed: nobody waits there any more
                pass

    def wait(self, topic: str, seen: int, timeout: float) -> None:
        """Block this thread until the topic's version moves past ``seen`` or ``timeout``."""
        with self._changed:
            self._changed.wait_for(lambda: self._versions.get(topic, 0) != seen, timeout)

    async def wait_async(self, topic: str, seen: int, timeout: float) -> None:
        """``wait`` for a coroutine: no thread is held."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        entry = (loop, future)
        with self._lock:
            if self._versions.setdefault(topic, 0) != seen:
                return
            self._futures.setdefault(topic, []).append(entry)
        try:
            await asyncio.wait_for(future, timeout)
        except TimeoutError:
            pass
        finally:
            with self._lock:
                waiting = self._futures.get(topic)
                if waiting is not None and entry in waiting:
                    waiting.remove(entry)
                    if not waiting:
                        del self._futures[topic]


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
