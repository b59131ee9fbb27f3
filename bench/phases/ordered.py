"""(o) Ordered consumption: key_shared and failover subscriptions beside shared ones.

In each round, on backlogs of keyed messages made beforehand (ordering keys round-robin
over each 1000-message transaction, a topic per measure), one after the other, each on a
new subscription from the earliest offset, closed loop, messages/s:

  o_shared_same_messages / o_key_shared_1000_keys: 4 consumer threads receiving 100 and
      acknowledging them (an ack of their offsets), over 1,000 keys; the ratio
      key_shared/shared is held to ≥ 0.7.
  o_shared_10_keys / o_key_shared_10_keys: the same over 10 keys, where key_shared has at
      most 10 messages in flight at once (one per key): reported, no goal.
  o_shared_one_consumer / o_failover_one_consumer: one consumer thread, named (the
      ``consumer`` of its receives and acks), receiving 100 and acknowledging them with one
      cumulative ack (``{"through": last, "consumer": name}``), against a shared
      subscription with one thread acknowledging offsets; ratio held to ≥ 0.7.

Then ``o_receive_vs_backlog``: one key_shared receive (``max_messages`` 100) and its ack,
timed one at a time, the median of ~50, on a topic holding a small backlog and on one
holding a large one (10k and 1M messages in the full run): a receive that costs O(batch)
shows the same median on both.
"""

from __future__ import annotations

import statistics
import time
import uuid
from typing import Any

from bench.harness.client import Consumer
from bench.harness.load import percentiles
from bench.harness.service import Server
from bench.phases.consume import Backlog, consumers_loop

KEYS_MANY, KEYS_FEW = 1000, 10
ORDERED_TOPIC = "bench-ordered-{}"  # one topic per measure, keyed messages


def backlogs(server: Server, database_url: str) -> dict[str, Backlog]:
    """The backlogs of the measures, by name (written as the rounds need them)."""
    return {"many": Backlog(server, database_url, ORDERED_TOPIC.format("1000-keys"),
                           keys=KEYS_MANY),
            "few": Backlog(server, database_url, ORDERED_TOPIC.format("10-keys"),
                           keys=KEYS_FEW),
            "failover": Backlog(server, database_url, ORDERED_TOPIC.format("failover"),
                                keys=KEYS_MANY)}


# name: (backlog, subscription type, consumer threads, cumulative ack)
MEASURES: dict[str, tuple[str, str, int, bool]] = {
    "o_shared_same_messages": ("many", "shared", 4, False),
    "o_key_shared_1000_keys": ("many", "key_shared", 4, False),
    "o_shared_10_keys": ("few", "shared", 4, False),
    "o_key_shared_10_keys": ("few", "key_shared", 4, False),
    "o_shared_one_consumer": ("failover", "shared", 1, False),
    "o_failover_one_consumer": ("failover", "failover", 1, True),
}


def rounds(server: Server, database_url: str, rounds: int, seconds: float, warmup: float,
           batch: int = 100, expected_rate: float = 0.0, least: int = 8_000,
           grow: bool = True) -> dict[str, Any]:
    """The measures of ``MEASURES`` in ``rounds`` interleaved rounds: each figure is its
    median round, with every round's value in ``rounds``.

    A backlog holds at least ``least`` messages and (``grow``) 3 × the fastest rate seen
    (``expected_rate`` before the first round) × a run's length; ``ran_dry`` counts
    receives that found nothing (the figure is then a floor; on the 10-key key_shared
    subscription empty receives are expected: four consumers share ten keys).
    """
    made = backlogs(server, database_url)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in MEASURES}
    fastest = expected_rate
    for _ in range(rounds):
        for name, (which, kind, threads, cumulative) in MEASURES.items():
            backlog = made[which]
            backlog.ensure(max(least, int(3 * fastest * (seconds + warmup)) if grow else 0))
            out = receive_ack(server, backlog, kind, threads, seconds, warmup, batch,
                              cumulative)
            fastest = max(fastest, out["messages_per_second"])
            runs[name].append(out)
    result: dict[str, Any] = {}
    for name, done in runs.items():
        ordered = sorted(done, key=lambda r: r["messages_per_second"])
        result[name] = {**ordered[len(ordered) // 2],
                        "rounds": [r["messages_per_second"] for r in done],
                        "ran_dry_by_round": [r["ran_dry"] for r in done]}

    def over(x: str, y: str) -> float | None:
        a, b = (result[n]["messages_per_second"] for n in (x, y))
        return round(a / b, 3) if b else None

    result["key_shared_over_shared"] = over("o_key_shared_1000_keys", "o_shared_same_messages")
    result["key_shared_10_keys_over_shared"] = over("o_key_shared_10_keys", "o_shared_10_keys")
    result["failover_over_shared"] = over("o_failover_one_consumer", "o_shared_one_consumer")
    result["round_ratios"] = {
        "key_shared_over_shared": _by_round(runs, "o_key_shared_1000_keys",
                                            "o_shared_same_messages"),
        "failover_over_shared": _by_round(runs, "o_failover_one_consumer",
                                          "o_shared_one_consumer")}
    result["backlogs"] = {b.topic: {"messages": b.size, "keys": b.keys,
                                    "fill_seconds": round(b.fill_seconds, 1)}
                          for b in made.values()}
    return result


def _by_round(runs: dict[str, list[dict[str, Any]]], x: str, y: str) -> list[float | None]:
    return [round(a["messages_per_second"] / b["messages_per_second"], 3)
            if b["messages_per_second"] else None for a, b in zip(runs[x], runs[y], strict=True)]


def receive_ack(server: Server, backlog: Backlog, kind: str, consumers: int,
                seconds: float, warmup: float, batch: int = 100,
                cumulative: bool = False) -> dict[str, Any]:
    """``consumers`` named threads on a new ``kind`` subscription (from the earliest
    offset) receiving ``batch`` messages and acknowledging them, closed loop."""
    name = f"o-{kind}-{uuid.uuid4().hex[:8]}"
    _subscribe(server, backlog.topic, name, kind)
    result = consumers_loop(server, backlog.topic, name, consumers, seconds, warmup, batch,
                            named=True, cumulative=cumulative)
    return {**result, "type": kind, "backlog": backlog.size, "keys": backlog.keys, "batch": batch,
            "ack": "cumulative (through the batch's last offset)" if cumulative
            else "the batch's offsets"}


def receive_vs_backlog(server: Server, database_url: str, small: int, large: int,
                       repeats: int = 50, batch: int = 100) -> dict[str, Any]:
    """One key_shared receive of ``batch`` and its ack, ``repeats`` times one at a time
    after 5 unmeasured, on a new subscription of a topic holding ``small`` keyed messages
    and on one holding ``large``: the medians side by side.

    The large backlog is written last, so that the rounds before it ran on the database
    (g) ran on.
    """
    out: dict[str, Any] = {"repeats": repeats, "batch": batch, "keys": KEYS_MANY}
    for label, size in (("small", small), ("large", large)):
        backlog = Backlog(server, database_url, ORDERED_TOPIC.format(f"backlog-{size}"),
                          keys=KEYS_MANY)
        # as many threads (up to 8) as write it whole in 1000-message transactions
        threads = next((t for t in range(8, 0, -1) if size % (1000 * t) == 0), 8)
        backlog.ensure(size, threads=threads)
        name = f"o-backlog-{uuid.uuid4().hex[:8]}"
        _subscribe(server, backlog.topic, name, "key_shared")
        c = Consumer(server.port, backlog.topic, name, server.token, consumer="c0")
        times: list[float] = []
        try:
            for i in range(repeats + 5):
                t0 = time.perf_counter()
                got = c.receive_ack(batch)
                if i >= 5:
                    times.append(time.perf_counter() - t0)
                if got != batch:
                    raise RuntimeError(f"a receive on {backlog.topic} got {got} of {batch}")
        finally:
            c.close()
        out[label] = {"backlog": backlog.size, "fill_seconds": round(backlog.fill_seconds, 1),
                      "median_ms": round(statistics.median(times) * 1000, 3),
                      "receive_ack_ms": percentiles(times)}
    out["large_over_small"] = round(out["large"]["median_ms"] / out["small"]["median_ms"], 3)
    return out


def _subscribe(server: Server, topic: str, name: str, kind: str) -> None:
    setup = Consumer(server.port, topic, name, server.token)
    try:
        setup.subscribe(type=kind, initial_position="earliest", ack_timeout_ms=600_000)
    finally:
        setup.close()
