"""One client, one request at a time: what a lone request costs (issue #24, item 3).

Against ``txmsg serve`` on PostgreSQL (one web worker, no checker), one keep-alive
connection sends, commits and reads one message at a time: each request's latency
(p50, p99) and the service's CPU per request by route (the server's process tree's CPU
time over the phase, divided by its requests). A lone request must not wait for a batch
to form; the writers' mean batch size over the run (from /metrics) shows whether any did.
Beside them, in the same rounds, the floors: PostgreSQL alone from psycopg (a durable
one-row INSERT, a SELECT by key) and Granian alone (``bench.harness.bare_asgi``: an ASGI app that
answers at once, its latency and CPU per request).

    python -m bench.phases.lone [--requests 2000] [--rounds 3] [--tree DIR ...]

``--tree`` runs the server from another source tree (a checkout of main, say) by putting
it first on the server's PYTHONPATH; with several, the rounds interleave them, so that
each compares figures taken under the same load of the machine (``uptime`` is printed).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

from bench.harness.bare_asgi import serve_bare
from bench.harness.client import GROUP, TOPIC, Connection, Producer, batch_stats, register
from bench.harness.pgdb import bench_database, libpq_url, truncate_all
from bench.harness.procs import cpu_seconds, tree
from bench.harness.service import Server, serve

WARMUP = 200


class Reader(Connection):
    def get(self, path: str) -> None:
        self._post(path, None, 200, method="GET")

    def read_one(self, offset: int) -> None:
        self.get(f"/v1/topics/{TOPIC}/messages?from_offset={offset}&limit=1")

    def get_transaction(self, txid: str) -> None:
        self.get(f"/v1/producer-groups/{GROUP}/transactions/{txid}")


def _timed(n: int, request: Callable[[int], None]) -> dict[str, float]:
    latencies = []
    for i in range(n):
        t0 = time.perf_counter()
        request(i)
        latencies.append(time.perf_counter() - t0)
    latencies.sort()
    return {"p50_ms": latencies[n // 2] * 1000,
            "p99_ms": latencies[min(n - 1, int(n * 0.99))] * 1000,
            "mean_ms": statistics.fmean(latencies) * 1000}


def floors(url: str, n: int) -> dict[str, dict[str, float]]:
    """The database's own floor for one client: a durable one-row INSERT (a send or a
    commit is at least one), and a one-row SELECT by key (a read is at least one)."""
    with psycopg.connect(libpq_url(url)) as conn:
        conn.execute("CREATE TABLE lone_floor (id bigint PRIMARY KEY, body text)")
        conn.commit()
        body = "x" * 1024

        def insert(i: int) -> None:
            conn.execute("INSERT INTO lone_floor VALUES (%s, %s)", (i, body))
            conn.commit()

        def select(i: int) -> None:
            conn.execute("SELECT id, body FROM lone_floor WHERE id = %s", (i,)).fetchone()
            conn.commit()

        try:
            return {"INSERT + COMMIT": _timed(n, insert), "SELECT by key": _timed(n, select)}
        finally:
            conn.rollback()
            conn.execute("DROP TABLE lone_floor")
            conn.commit()


def http_floor(n: int) -> dict[str, dict[str, float]]:
    """The web server's own floor for one client: a bare ASGI app's answer
    (``bench.harness.bare_asgi``), its latency and the server's CPU per request."""
    server = serve_bare()
    try:
        client = Reader(server.port)
        for _ in range(WARMUP):
            client.get("/")
        answer = _phase(server, n, lambda i: client.get("/"))
        client.close()
        return {"bare ASGI answer": answer}
    finally:
        server.stop()


def _phase(server: Server, n: int, request: Callable[[int], None]) -> dict[str, float]:
    """``n`` requests, one at a time: p50 and p99 of their latency, the service's CPU each."""
    pids = tree(server.pid)
    cpu0 = cpu_seconds(pids)
    timed = _timed(n, request)
    return {**timed, "cpu_ms": (cpu_seconds(pids) - cpu0) / n * 1000}


def one_round(url: str, tree_dir: str | None, n: int) -> dict[str, dict[str, float]]:
    truncate_all(url)
    env = {"PYTHONPATH": tree_dir} if tree_dir else {}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        server = serve(url, web_workers=1)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    try:
        register(server.port)
        producer, reader = Producer(server.port, "lone"), Reader(server.port)
        for _ in range(WARMUP):
            txid = producer.next_id()
            producer.send(txid)
            producer.commit(txid)
            reader.read_one(0)
        ids = [producer.next_id() for _ in range(n)]
        out = {
            "send": _phase(server, n, lambda i: producer.send(ids[i])),
            "commit": _phase(server, n, lambda i: producer.commit(ids[i])),
            "read one": _phase(server, n, lambda i: reader.read_one(WARMUP + i)),
            "get transaction": _phase(server, n, lambda i: reader.get_transaction(ids[i])),
        }
        out["send + commit"] = {k: out["send"][k] + out["commit"][k]
                                for k in ("p50_ms", "mean_ms", "cpu_ms")}
        batches = batch_stats(server.get("/metrics"))
        out["mean batch"] = {w: s["mean_batch"] or 0.0 for w, s in batches.items()}
        producer.close()
        reader.close()
        return out
    finally:
        server.stop()


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


FLOORS = ("PostgreSQL alone (psycopg, the floor)", "Granian alone (a bare ASGI app, the floor)")
_FIGURES = ("p50_ms", "p99_ms", "mean_ms", "cpu_ms")


def run(requests: int, rounds: int, trees: list[str | None] | None = None,
        progress: Callable[[str], object] = lambda line: None
        ) -> dict[str, dict[str, Any]]:
    """Interleaved rounds in a database of its own: by tree (``None``: this one), then the
    two floors, each route's median of its rounds (p50, p99, mean latency; CPU per request)
    and, for a tree, its writers' mean batch in the last round."""
    trees = trees or [None]
    runs: dict[str, list[dict[str, dict[str, float]]]] = {
        name: [] for name in [t or "this tree" for t in trees] + list(FLOORS)}
    with bench_database() as url:
        for r in range(rounds):
            runs[FLOORS[0]].append(floors(url, requests))
            runs[FLOORS[1]].append(http_floor(requests))
            for t in trees:
                runs[t or "this tree"].append(one_round(url, t, requests))
                progress(f"round {r + 1} {t or 'this tree'} done")
    out: dict[str, dict[str, Any]] = {}
    for name, measured in runs.items():
        out[name] = {route: {k: statistics.median(x[route].get(k, float("nan")) for x in measured)
                             for k in _FIGURES}
                     for route in measured[0] if route != "mean batch"}
        if "mean batch" in measured[-1]:
            out[name]["mean batch"] = measured[-1]["mean batch"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tree", action="append", default=[],
                        help="a source tree to serve from (default: this one)")
    args = parser.parse_args()
    trees: list[str | None] = [str(Path(t).resolve()) for t in args.tree] or [None]
    print("uptime:", _uptime())
    results = run(args.requests, args.rounds, trees, lambda line: print(line, flush=True))
    print("uptime:", _uptime())
    for name, routes in results.items():
        print(f"\n{name}: median of {args.rounds} rounds, {args.requests} requests each, "
              "one client")
        print(f"  {'route':<18}{'p50 ms':>9}{'p99 ms':>9}{'mean ms':>9}{'CPU ms':>9}")
        for route, figures in routes.items():
            if route != "mean batch":
                print(f"  {route:<18}" + "".join(f"{figures[k]:>9.3f}" for k in _FIGURES))
        if "mean batch" in routes:
            print("  mean group-commit batch:", routes["mean batch"])


if __name__ == "__main__":
    main()
