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


def test_notify_later_wakes_a_waiter_when_its_time_comes() -> None:
    """A nack's delay running out is no commit: the signal's own timer wakes the receives
    waiting on the topic, not their next probe; no delay notifies at once."""
    signal = TopicSignal()
    seen = {t: signal.version(t) for t in ("soon", "later")}
    woken_topics: list[str] = []

    def waiter(topic: str) -> None:
        signal.wait(topic, seen[topic], 30)
        woken_topics.append(topic)

    threads = [threading.Thread(target=waiter, args=(t,)) for t in seen]
    for t in threads:
        t.start()
    signal.notify_later(["later"], 0.2)
    signal.notify_later(["soon"], 0.01)
    for t in threads:
        t.join()
    assert sorted(woken_topics) == ["later", "soon"]
    assert all(signal.version(t) == seen[t] + 1 for t in seen)
    now = signal.version("now")
    signal.notify_later(["now"], 0)
    assert signal.version("now") == now + 1
