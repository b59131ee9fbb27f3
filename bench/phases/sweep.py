"""Publishing one message at a time by txmsg and by PgQueuer at several client counts:
the latency by concurrency of ``make bench``'s comparison with PgQueuer."""

from __future__ import annotations

from typing import Any

from bench.harness import machine
from bench.harness.service import Server
from bench.phases import pgqueuer_load, txmsg_load


def run(server: Server, pgq_db: str, client_counts: tuple[int, ...], seconds: float,
        warmup: float) -> dict[str, Any]:
    """txmsg (a send + commit pair) and PgQueuer (one enqueue) in turn at each client
    count: throughput and each call's latency."""
    out: dict[str, dict[str, Any]] = {"txmsg": {}, "pgqueuer": {}}
    for clients in client_counts:
        runs = {"txmsg": txmsg_load.pairs(server, clients, seconds, warmup),
                "pgqueuer": pgqueuer_load.run(pgq_db, "publish_single", clients, seconds,
                                              warmup)}
        for side, r in runs.items():
            out[side][str(clients)] = {"per_second": r["per_second"], "errors": r["errors"],
                                       "latency_ms": r["latency_ms"],
                                       "load_average": machine.load_average()}
    return out
