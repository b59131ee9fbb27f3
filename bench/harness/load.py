"""Load generators: closed loop (as fast as N clients go) and open loop (paced arrivals).

Each client is a Python thread with its own connection (keep-alive HTTP or a psycopg
connection). ``make_op(i)`` builds client i's operation; calling it does one unit of work
and returns how many units it did (a pair, 100 rows...) or, in the open loop, a mapping
of named latencies in seconds.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

Op = Callable[[], Any]
Probe = Callable[[], Mapping[str, float]]


class _Errors:
    def __init__(self) -> None:
        self.count = 0
        self.first: str | None = None
        self._lock = threading.Lock()

    def add(self, exc: BaseException) -> None:
        with self._lock:
            self.count += 1
            if self.first is None:
                self.first = f"{type(exc).__name__}: {exc}"


def closed_loop(clients: int, make_op: Callable[[int], Op], seconds: float,
                warmup: float, probe: Probe | None = None) -> dict[str, Any]:
    """Units per second over ``seconds`` after ``warmup``, with ``clients`` busy threads,
    and the percentiles of each call's latency in that window.

    ``probe`` (say CPU counters) is read at both ends of the measured window; the result
    carries its increase per unit of work.
    """
    counts = [0] * clients
    latencies: list[list[float]] = [[] for _ in range(clients)]
    stop, measuring = threading.Event(), threading.Event()
    errors = _Errors()
    ready = threading.Barrier(clients + 1)

    def client(i: int) -> None:
        op = make_op(i)
        ready.wait()
        while not stop.is_set():
            t = time.perf_counter()
            try:
                counts[i] += op()
            except Exception as exc:  # noqa: BLE001 - counted and reported, the run goes on
                errors.add(exc)
                if errors.count > 1000:
                    return
                continue
            if measuring.is_set():
                latencies[i].append(time.perf_counter() - t)

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    ready.wait(timeout=60)
    time.sleep(warmup)
    measuring.set()
    p0 = probe() if probe else {}
    c0, t0 = sum(counts), time.perf_counter()
    time.sleep(seconds)
    c1, t1 = sum(counts), time.perf_counter()
    measuring.clear()
    p1 = probe() if probe else {}
    stop.set()
    for t in threads:
        t.join(timeout=30)
    out = {"per_second": round((c1 - c0) / (t1 - t0), 1), "units": c1 - c0,
           "seconds": round(t1 - t0, 2), "clients": clients, "errors": errors.count,
           "first_error": errors.first,
           "latency_ms": percentiles([x for lat in latencies for x in lat])}
    if probe:
        out["cpu_ms_per_unit"] = per_unit(p0, p1, c1 - c0)
    return out


def per_unit(p0: Mapping[str, float], p1: Mapping[str, float], units: int) -> dict[str, float]:
    return {k: round(1000 * (p1[k] - p0[k]) / units, 3) if units else 0.0 for k in p0}


def open_loop(clients: int, make_op: Callable[[int], Op], rate: float,
              seconds: float, probe: Probe | None = None) -> dict[str, Any]:
    """Arrivals every 1/rate seconds, served by ``clients`` threads; latency percentiles.

    Each op returns named latencies; "queued" (start of the op minus its scheduled
    arrival) is added, so that a server too slow to keep up shows in the figures instead
    of silently lowering the rate (no coordinated omission).
    """
    ticket = itertools.count()
    samples: list[Mapping[str, float]] = []
    errors = _Errors()
    ready = threading.Barrier(clients + 1)
    start: list[float] = []

    def client(i: int) -> None:
        op = make_op(i)
        ready.wait()
        t0 = start[0]
        end = t0 + seconds
        while True:
            due = t0 + next(ticket) / rate
            if due >= end:
                return
            delay = due - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            began = time.perf_counter()
            try:
                lat = dict(op())
            except Exception as exc:  # noqa: BLE001 - counted and reported, the run goes on
                errors.add(exc)
                continue
            lat["queued"] = began - due
            lat["total"] = time.perf_counter() - due
            samples.append(lat)

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    start.append(time.perf_counter() + 0.2)
    ready.wait(timeout=60)
    p0 = probe() if probe else {}
    for t in threads:
        t.join(timeout=seconds + 60)
    elapsed = time.perf_counter() - start[0]
    p1 = probe() if probe else {}
    out: dict[str, Any] = {"target_rate": round(rate, 1), "achieved_rate":
                           round(len(samples) / elapsed, 1) if elapsed > 0 else 0.0,
                           "ops": len(samples), "seconds": round(elapsed, 2),
                           "clients": clients, "errors": errors.count,
                           "first_error": errors.first}
    if probe:
        out["cpu_ms_per_unit"] = per_unit(p0, p1, len(samples))
    for name in (samples[0].keys() if samples else ()):
        out[f"{name}_ms"] = percentiles([s[name] for s in samples])
    return out


def percentiles(values: list[float]) -> dict[str, float]:
    values = sorted(values)
    if not values:
        return {}

    def at(q: float) -> float:
        return round(values[min(len(values) - 1, int(q * len(values)))] * 1000, 3)

    return {"p50": at(0.50), "p90": at(0.90), "p99": at(0.99), "max": at(1.0)}
