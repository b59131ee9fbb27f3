"""Subscriptions: (g) receive + ack throughput, (h) delivery latency, idle long polls.

(g) Consumer threads on one subscription, each receiving a batch (wait 0) and
    acknowledging it, closed loop, over a backlog made beforehand (a new subscription per
    round, from the earliest offset, so every round reads the same messages): messages/s.
(h) Producers in an open loop at a given rate (send + commit pairs) while consumer threads
    long-poll one subscription: for each message, the time from its commit's answer to a
    receive's answer holding it (negative when the receive answered first).
Idle long polls: the service's RSS and CPU over a window, with N receives waiting
    (``wait_ms`` 30000, on a topic nobody writes to) and without.
"""

from __future__ import annotations

import selectors
import socket
import threading
import time
import uuid
from typing import Any

import orjson
import psycopg

from bench.harness.client import Consumer, Producer, register
from bench.harness.load import closed_loop, open_loop, percentiles
from bench.harness.pgdb import libpq_url
from bench.harness.procs import CpuProbe, cpu_seconds, memory, postgres_pids, tree
from bench.harness.service import Server

CONSUME_TOPIC = "bench-consume"
LATENCY_TOPIC = "bench-latency"
IDLE_TOPIC = "bench-idle"


class Backlog:
    """The messages (g) reads, written once with 1000-message transactions and topped up
    when a round could read more than there are.

    The tables are analyzed once written, as autovacuum would have done by then in a
    database that grew steadily (a receive's scan of the log no longer depends on it, other
    statements may).
    """

    def __init__(self, server: Server, database_url: str, topic: str = CONSUME_TOPIC,
                 keys: int = 0) -> None:
        self.server, self.database_url, self.topic = server, database_url, topic
        self.keys = keys  # ordering keys, round-robin over each transaction's messages
        self.size = 0
        self.fill_seconds = 0.0

    def ensure(self, messages: int, threads: int = 4, batch: int = 1000) -> None:
        if messages <= self.size:
            return
        register(self.server.port, self.server.token)
        want = messages - self.size
        per_thread = -(-want // (threads * batch))
        run = uuid.uuid4().hex[:6]
        errors: list[BaseException] = []

        def fill(i: int) -> None:
            p = Producer(self.server.port, f"fill-{run}-{i}", batch, self.server.token,
                         topic=self.topic, keys=self.keys)
            try:
                for _ in range(per_thread):
                    p.pair()
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
            finally:
                p.close()

        t0 = time.perf_counter()
        workers = [threading.Thread(target=fill, args=(i,)) for i in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        if errors:
            raise RuntimeError(f"filling the backlog failed: {errors[0]}")
        self.size += per_thread * threads * batch
        with psycopg.connect(libpq_url(self.database_url), autocommit=True) as conn:
            conn.execute("ANALYZE message_log, half_message, txn")
        self.fill_seconds += time.perf_counter() - t0


def receive_ack(server: Server, backlog: Backlog, consumers: int, seconds: float,
                warmup: float, batch: int = 100, expected_rate: float = 0.0) -> dict[str, Any]:
    """(g): ``consumers`` threads receiving ``batch`` messages and acknowledging them.

    The backlog holds at least 3 × ``expected_rate`` × the round's length; ``ran_dry``
    counts receives that found nothing (the figure is then a floor, not a rate).
    """
    backlog.ensure(max(20 * batch * consumers, int(3 * expected_rate * (seconds + warmup))))
    name = f"g-{uuid.uuid4().hex[:8]}"
    first = Consumer(server.port, backlog.topic, name, server.token)
    first.subscribe(initial_position="earliest", ack_timeout_ms=600_000)
    first.close()
    result = consumers_loop(server, backlog.topic, name, consumers, seconds, warmup, batch)
    result["backlog"] = backlog.size
    result["batch"] = batch
    return result


def consumers_loop(server: Server, topic: str, name: str, consumers: int, seconds: float,
                   warmup: float, batch: int, *, named: bool = False,
                   cumulative: bool = False) -> dict[str, Any]:
    """``consumers`` threads on subscription ``name`` receiving ``batch`` messages and
    acknowledging them (``cumulative``: with one ack through the last), closed loop;
    ``named``: each sends its consumer name. The result, with ``messages_per_second`` and
    ``ran_dry`` (receives that found nothing)."""
    made: list[Consumer] = []
    dry = [0]

    def make(i: int) -> Any:
        c = Consumer(server.port, topic, name, server.token,
                     **({"consumer": f"c{i}"} if named else {}))
        made.append(c)

        def op() -> int:
            n = c.receive_ack(batch, cumulative=cumulative)
            if not n:
                dry[0] += 1
            return n
        return op

    result = closed_loop(consumers, make, seconds, warmup,
                         probe=CpuProbe(server.pid, server.database))
    for c in made:
        c.close()
    return {**result, "messages_per_second": result["per_second"], "ran_dry": dry[0]}


def delivery_latency(server: Server, producers: int, consumers: int, rate: float,
                     seconds: float, wait_ms: int = 5000) -> dict[str, Any]:
    """(h): commit answer → long-polling receive, at ``rate`` send + commit pairs/s."""
    register(server.port, server.token)
    name = f"h-{uuid.uuid4().hex[:8]}"
    setup = Consumer(server.port, LATENCY_TOPIC, name, server.token)
    setup.subscribe(initial_position="latest", ack_timeout_ms=600_000)
    setup.close()
    committed: dict[str, float] = {}
    received: dict[str, float] = {}
    stop = threading.Event()
    failures: list[str] = []

    def consume() -> None:
        c = Consumer(server.port, LATENCY_TOPIC, name, server.token)
        try:
            while not stop.is_set():
                messages = c.receive(100, wait_ms)
                now = time.perf_counter()
                for m in messages:
                    received.setdefault(m["transaction_id"], now)
                if messages:
                    c.ack([m["offset"] for m in messages])
        except Exception as exc:  # noqa: BLE001 - reported in the result
            failures.append(f"{type(exc).__name__}: {exc}")
        finally:
            c.close()

    listeners = [threading.Thread(target=consume, daemon=True) for _ in range(consumers)]
    for t in listeners:
        t.start()
    run = uuid.uuid4().hex[:6]

    def make(i: int) -> Any:
        p = Producer(server.port, f"h-{run}-{i}", 1, server.token, topic=LATENCY_TOPIC)

        def op() -> dict[str, float]:
            txid = p.next_id()
            t0 = time.perf_counter()
            p.send(txid)
            t1 = time.perf_counter()
            p.commit(txid)
            t2 = time.perf_counter()
            committed[txid] = t2
            return {"send": t1 - t0, "commit": t2 - t1}
        return op

    try:
        paced = open_loop(producers, make, rate, seconds,
                          probe=CpuProbe(server.pid, server.database))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not failures and \
                not committed.keys() <= received.keys():
            time.sleep(0.05)
    finally:
        stop.set()
        for t in listeners:
            t.join(timeout=wait_ms / 1000 + 30)
    delays = [received[t] - c for t, c in committed.items() if t in received]
    return {"target_rate": paced["target_rate"], "achieved_rate": paced["achieved_rate"],
            "producers": producers, "consumers": consumers, "wait_ms": wait_ms,
            "committed": len(committed), "delivered": len(delays),
            "not_delivered": len(committed) - len(delays),
            "before_commit_answer": sum(1 for d in delays if d < 0),
            "delivery_ms": percentiles(delays), "commit_ms": paced.get("commit_ms"),
            "errors": paced["errors"] + len(failures),
            "first_error": paced["first_error"] or (failures[0] if failures else None)}


def idle_long_polls(server: Server, polls: int, seconds: float,
                    wait_ms: int = 30_000) -> dict[str, Any]:
    """The service's RSS and CPU over ``seconds`` without, then with, ``polls`` receives
    waiting on an empty topic; the waits must outlast the window (``wait_ms``)."""
    if seconds + 5 > wait_ms / 1000:
        raise ValueError("the window must end well before the long polls do")
    name = f"idle-{uuid.uuid4().hex[:8]}"
    setup = Consumer(server.port, IDLE_TOPIC, name, server.token)
    setup.subscribe(initial_position="latest")
    setup.close()
    without = _window(server, seconds)
    head = (f"POST /v1/topics/{IDLE_TOPIC}/subscriptions/{name}/receive HTTP/1.1\r\n"
            f"Host: 127.0.0.1\r\n"
            + (f"Authorization: Bearer {server.token}\r\n" if server.token else ""))
    body = orjson.dumps({"max_messages": 10, "wait_ms": wait_ms})
    request = (head + f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
               ).encode() + body
    sockets: list[socket.socket] = []
    try:
        t0 = time.perf_counter()
        for _ in range(polls):
            s = socket.create_connection(("127.0.0.1", server.port), timeout=30)
            s.sendall(request)
            sockets.append(s)
        opened = time.perf_counter() - t0
        # each receive looks at the database once before it waits: measure from when
        # the service has gone quiet, or as late as the window still ends before the waits
        settled = _quiet(server, t0 + wait_ms / 1000 - seconds - 3)
        with_polls = _window(server, seconds)
        answered = _answered(sockets)
    finally:
        for s in sockets:
            s.close()
    return {"polls": polls, "wait_ms": wait_ms, "window_seconds": seconds,
            "opened_in_seconds": round(opened, 2),
            "quiet_after_seconds": None if settled is None else round(settled - t0, 2),
            "answered_during_window": answered,
            "without": without, "with": with_polls,
            "rss_delta_bytes": with_polls["rss_max"] - without["rss_max"],
            "rss_delta_per_poll_bytes": round((with_polls["rss_max"] - without["rss_max"])
                                              / polls),
            "service_cpu_seconds_delta": round(with_polls["service_cpu_seconds"]
                                               - without["service_cpu_seconds"], 3),
            "postgres_cpu_seconds_delta": round(with_polls["postgres_cpu_seconds"]
                                                - without["postgres_cpu_seconds"], 3)}


def _window(server: Server, seconds: float) -> dict[str, Any]:
    """The service's RSS (max of samples every 0.5 s) and the CPU seconds it and PostgreSQL
    spent over ``seconds``."""
    service0 = _cpu_by_pid(tree(server.pid))
    pg0 = _cpu_by_pid(postgres_pids(server.database))
    rss = []
    end = time.perf_counter() + seconds
    while (left := end - time.perf_counter()) > 0:
        rss.append(memory(server.pid)["rss"])
        time.sleep(min(0.5, left))
    return {"rss_max": max(rss), "rss_first": rss[0], "samples": len(rss),
            "service_cpu_seconds": _spent(service0, tree(server.pid)),
            "postgres_cpu_seconds": _spent(pg0, postgres_pids(server.database))}


def _quiet(server: Server, deadline: float, interval: float = 0.5,
           busy: float = 0.02) -> float | None:
    """When the service spent less than ``busy`` CPU seconds in ``interval`` (None: not by
    ``deadline``)."""
    before = _cpu_by_pid(tree(server.pid))
    while time.perf_counter() < deadline:
        time.sleep(interval)
        pids = tree(server.pid)
        if _spent(before, pids) < busy:
            return time.perf_counter()
        before = _cpu_by_pid(pids)
    return None


def _cpu_by_pid(pids: list[int]) -> dict[int, float]:
    return {p: cpu_seconds([p]) for p in pids}


def _spent(before: dict[int, float], pids: list[int]) -> float:
    """CPU seconds spent since ``before`` by these processes: all of it for those that
    started since, none counted for those that ended (a backend that closed)."""
    return round(sum(cpu_seconds([p]) - before.get(p, 0.0) for p in pids), 3)


def _answered(sockets: list[socket.socket]) -> int:
    """How many of these connections have an answer waiting (none should, yet)."""
    with selectors.DefaultSelector() as sel:
        for s in sockets:
            sel.register(s, selectors.EVENT_READ)
        return len(sel.select(timeout=0))

