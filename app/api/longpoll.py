"""The long poll of a receive, and the waits of long-polling receives on the ASGI front.

``long_poll`` is the one loop: look; while nothing is deliverable and time is left, wait
for the topic's signal and look again. How it waits is the front's to say
(``Call.wait``): on the ASGI front, ``Waits.wait`` below; under Flask, a plain wait on
the signal that looks again at least every ``RECHECK_SECONDS``.

A waiting receive is a coroutine parked on its topic's signal (``app.domain.wakeups``).
Commits set it: this process's at once, other processes' (another ``txmsg serve`` or web
worker, the checker) through a PostgreSQL notification this process listens for
(``app.storage.notices``). What no commit signals (delayed messages coming due, leases
running out, messages due for the dead-letter topic) and any notification lost a probe
finds: one per subscription that has receives waiting, not one per receive, which asks
the database every ``RECHECK_SECONDS`` whether anything is due (a read of two index
probes) and sets the signal when it is. A thousand receives waiting on one subscription
cost one small query a second.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import Executor
from typing import Any

from app import tracing
from app.api.call import Call
from app.domain import spans, subscriptions
from app.domain.wakeups import PROBED, RECHECK_SECONDS, TopicSignal
from app.errors import ApiError

log = logging.getLogger(__name__)
Key = tuple[str, str]  # (topic, subscription)


async def long_poll(call: Call, topic: str, name: str, max_messages: int,
                    wait_ms: int, consumer: str | None = None) -> dict[str, Any]:
    """A receive's answer: what it leased, once something was or ``wait_ms`` ran out."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_ms / 1000
    app_state = call.state
    signal = app_state.signal
    while True:
        seen = signal.version(topic)
        received: subscriptions.Received = await call.run(_look, app_state, topic, name,
                                                          max_messages, consumer)
        left = deadline - loop.time()
        if received.messages or left <= 0 or call.wait is None:
            return {"messages": received.messages}
        await call.wait(topic, name, seen, left)


def _look(app_state: Any, topic: str, name: str, max_messages: int,
          consumer: str | None) -> subscriptions.Received:
    """One look at the database: what it leased (a span for it, when tracing)."""
    started = spans.now_ns() if tracing.TRACER is not None else 0
    received: subscriptions.Received = app_state.subscriptions.receive(
        topic, name, max_messages, consumer)
    if started and received.messages:
        spans.received(topic, name, received.messages, started)
    return received


class Waits:
    def __init__(self, engine: Any, signal: TopicSignal, pool: Executor) -> None:
        self._engine = engine
        self._signal = signal
        self._pool = pool
        self._waiting: dict[Key, int] = {}
        self._probes: dict[Key, asyncio.Task[None]] = {}

    async def wait(self, topic: str, name: str, seen: int, timeout: float) -> None:
        """Until the topic's version moves past ``seen`` (a commit, here or notified from
        another process, or the probe found something due) or ``timeout``."""
        key = (topic, name)
        self._waiting[key] = self._waiting.get(key, 0) + 1
        if key not in self._probes:
            self._probes[key] = asyncio.get_running_loop().create_task(self._probe(key))
        try:
            await self._signal.wait_async(topic, seen, timeout)
        finally:
            self._waiting[key] -= 1
            if not self._waiting[key]:
                del self._waiting[key]
                probe = self._probes.pop(key, None)
                if probe is not None:
                    probe.cancel()

    def waiting(self, topic: str, name: str) -> int:
        return self._waiting.get((topic, name), 0)

    @property
    def probes(self) -> int:
        """Probes running: one per subscription with receives waiting."""
        return len(self._probes)

    async def _probe(self, key: Key) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._waiting.get(key):
                await asyncio.sleep(RECHECK_SECONDS)
                if not self._waiting.get(key):
                    break
                try:
                    due = await loop.run_in_executor(
                        self._pool, subscriptions.anything_due, self._engine, *key)
                except ApiError:  # the database is away: the waits run out as they are
                    log.debug("probe of %s failed", key, exc_info=True)
                    continue
                if due:
                    self._signal.notify((key[0],), PROBED)
        finally:
            if self._probes.get(key) is asyncio.current_task():
                del self._probes[key]
