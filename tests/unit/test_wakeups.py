"""The topic signal (``app.domain.wakeups``): only this process's notifies go on to the
other processes (what came from them, or from a probe, is not sent back), and each waiter
woken is counted by what woke it."""

from __future__ import annotations

import asyncio
import threading

from prometheus_client import REGISTRY

from app.domain.wakeups import LOCAL, NOTIFIED, PROBED, TopicSignal


def woken(source: str) -> float:
    return REGISTRY.get_sample_value("txmsg_wakeups_total", {"source": source}) or 0.0


def test_only_local_notifies_are_relayed() -> None:
    signal = TopicSignal()
    relayed: list[tuple[str, ...]] = []
    signal.relay_to(lambda topics: relayed.append(tuple(topics)))
    signal.notify(t for t in ("a", "b"))  # a generator: read once, bumps and relays
    signal.notify(["c"], NOTIFIED)
    signal.notify(["d"], PROBED)
    signal.notify([])
    assert relayed == [("a", "b")]


def test_a_coroutine_woken_by_a_notification_is_counted_so() -> None:
    signal = TopicSignal()
    before = {source: woken(source) for source in (LOCAL, NOTIFIED, PROBED)}

    async def wait() -> None:
        seen = signal.version("t")
        waiting = asyncio.get_running_loop().run_in_executor(None, _notify_when_waited,
                                                             signal)
        await signal.wait_async("t", seen, 30)
        await waiting

    asyncio.run(wait())
    assert woken(NOTIFIED) == before[NOTIFIED] + 1
    assert woken(LOCAL) == before[LOCAL] and woken(PROBED) == before[PROBED]


def _notify_when_waited(signal: TopicSignal) -> None:
    for _ in range(3000):
        if signal.waiting("t"):
            signal.notify(["t"], NOTIFIED)
            return
        threading.Event().wait(0.01)
    raise AssertionError("nobody waited")


def test_a_thread_woken_by_the_probe_is_counted_so() -> None:
    signal = TopicSignal()
    before = woken(PROBED)
    seen = signal.version("t")
    waiter = threading.Thread(target=signal.wait, args=("t", seen, 30))
    waiter.start()
    signal.notify(["t"], PROBED)  # before or after it waits: either way it looks again
    waiter.join(30)
    assert not waiter.is_alive()
    assert woken(PROBED) == before + 1
