"""(b), (d) and (e): txmsg send + commit over HTTP against a running server."""

from __future__ import annotations

import uuid
from typing import Any

from bench.harness.client import Producer, batch_stats, register
from bench.harness.load import closed_loop, open_loop
from bench.harness.procs import CpuProbe, Sampler, summarise
from bench.harness.service import Server


def _producers(server: Server, messages: int, made: list[Producer]):  # type: ignore[no-untyped-def]
    run = uuid.uuid4().hex[:6]

    def make(i: int) -> Producer:
        p = Producer(server.port, f"{run}-{i}", messages, server.token)
        made.append(p)
        return p
    return make


def pairs(server: Server, clients: int, seconds: float, warmup: float,
          messages: int = 1) -> dict[str, Any]:
    """Closed loop: each client sends a transaction of ``messages`` messages, then commits it.

    ``per_second`` counts pairs; ``messages_per_second`` counts messages.
    """
    register(server.port, server.token)
    before = batch_stats(server.get("/metrics"))
    made: list[Producer] = []
    make = _producers(server, messages, made)
    result = closed_loop(clients, lambda i: make(i).pair, seconds, warmup,
                         probe=CpuProbe(server.pid, server.database))
    for p in made:
        p.close()
    result["messages_per_second"] = round(result["per_second"] * messages, 1)
    result["group_commit"] = _delta(before, batch_stats(server.get("/metrics")))
    return result


def paced(server: Server, clients: int, rate: float, seconds: float) -> dict[str, Any]:
    """Open loop at ``rate`` pairs/s: latency of send and of commit."""
    register(server.port, server.token)
    before = batch_stats(server.get("/metrics"))
    made: list[Producer] = []
    make = _producers(server, 1, made)
    result = open_loop(clients, lambda i: make(i).timed_pair, rate, seconds,
                       probe=CpuProbe(server.pid, server.database))
    for p in made:
        p.close()
    result["group_commit"] = _delta(before, batch_stats(server.get("/metrics")))
    return result


def paced_with_memory(server: Server, clients: int, rate: float,
                      seconds: float) -> dict[str, Any]:
    """(e): ``paced``, with the service's memory sampled throughout."""
    with Sampler(server.pid, interval=min(1.0, max(0.1, seconds / 60))) as sampler:
        result = paced(server, clients, rate, seconds)
    result["service_rss"] = summarise(sampler.samples, "rss")
    result["service_pss"] = summarise(sampler.samples, "pss")
    result["service_rss_samples"] = [(s["t"], s["rss"]) for s in sampler.samples]
    return result


def _delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for writer, a in after.items():
        b = before.get(writer, {"transactions": 0, "requests": 0})
        tx, req = a["transactions"] - b["transactions"], a["requests"] - b["requests"]
        out[writer] = {"transactions": tx, "requests": req,
                       "mean_batch": round(req / tx, 2) if tx else None}
    return out
