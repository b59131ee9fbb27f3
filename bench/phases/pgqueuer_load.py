"""PgQueuer beside txmsg: the same measures, driven the way PgQueuer's documentation does.

PgQueuer (from PyPI, the ``bench`` extra) runs in a database of its own on the same
PostgreSQL server, on the asyncpg driver its documentation uses, with the same client
counts and the same 1 KiB body as txmsg's producers:

  publish_single   each client ``Queries.enqueue("bench", body)``: one job per transaction
  publish_batched  each client ``Queries.enqueue`` with lists of ``batch`` jobs: one
                   transaction each
  consume          ``consumers`` QueueManagers (one connection each) with an entrypoint
                   that counts its jobs, ``run(batch_size=batch)``, over a backlog made
                   beforehand (topped up to ``backlog`` queued jobs before each run)

Each run is a subprocess (``python -m bench.phases.pgqueuer_load``) that prints its result as
JSON: its own CPU is then the client's alone, measured as the CPU of this process, and
asyncio's loop does not share a process with the benchmark's threads. PostgreSQL's CPU
is that of the database's backends and the server's shared processes
(``bench.harness.procs.postgres_pids``), as on the txmsg side; PgQueuer has no service.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from bench.harness.load import per_unit, percentiles
from bench.harness.machine import load_average
from bench.harness.pgdb import database_name, libpq_url
from bench.harness.procs import CpuProbe

ENTRYPOINT = "bench"
BODY = b"x" * 1024
MEASURES = ("publish_single", "publish_batched", "consume")


def install(database_url: str) -> str:
    """PgQueuer's schema in this (empty) database; its version."""
    import pgqueuer

    async def go() -> None:
        import asyncpg
        from pgqueuer.db import AsyncpgDriver
        from pgqueuer.queries import Queries

        conn = await asyncpg.connect(libpq_url(database_url))
        try:
            await Queries(AsyncpgDriver(conn)).install()
        finally:
            await conn.close()

    asyncio.run(go())
    return str(pgqueuer.__version__)


def run(database_url: str, measure: str, clients: int, seconds: float, warmup: float,
        batch: int = 100, backlog: int = 0, timeout: float = 600) -> dict[str, Any]:
    """One measured run in a subprocess; its result (``messages_per_second``, CPU per
    message for ``clients`` and ``postgres``, latency percentiles per call)."""
    argv = [sys.executable, "-m", "bench.phases.pgqueuer_load", measure, "--url", database_url,
            "--clients", str(clients), "--seconds", str(seconds), "--warmup", str(warmup),
            "--batch", str(batch), "--backlog", str(backlog)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"pgqueuer {measure} failed: {done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout)
    return result


async def _connect(url: str) -> Any:
    import asyncpg

    return await asyncpg.connect(libpq_url(url))


async def _closed_loop(clients: int, make_op: Callable[[int], Awaitable[Callable[[], Any]]],
                       seconds: float, warmup: float, probe: CpuProbe) -> dict[str, Any]:
    """``bench.harness.load.closed_loop`` on asyncio: units per second over ``seconds`` after
    ``warmup``, CPU per unit, and each call's latency in the measured window."""
    ops = [await make_op(i) for i in range(clients)]
    counts = [0] * clients
    latencies: list[float] = []
    errors: list[str] = []
    window = {"open": False, "stop": False}

    async def client(i: int) -> None:
        op = ops[i]
        while not window["stop"]:
            t = time.perf_counter()
            try:
                counts[i] += await op()
            except Exception as exc:  # noqa: BLE001 - counted and reported, the run goes on
                errors.append(f"{type(exc).__name__}: {exc}")
                if len(errors) > 1000:
                    return
                continue
            if window["open"]:
                latencies.append(time.perf_counter() - t)

    tasks = [asyncio.create_task(client(i)) for i in range(clients)]
    await asyncio.sleep(warmup)
    window["open"] = True
    p0, c0, t0 = probe(), sum(counts), time.perf_counter()
    await asyncio.sleep(seconds)
    c1, t1, p1 = sum(counts), time.perf_counter(), probe()
    window["stop"] = True
    await asyncio.gather(*tasks, return_exceptions=True)
    return {"per_second": round((c1 - c0) / (t1 - t0), 1), "units": c1 - c0,
            "seconds": round(t1 - t0, 2), "clients": clients, "errors": len(errors),
            "first_error": errors[0] if errors else None,
            "cpu_ms_per_unit": per_unit(p0, p1, c1 - c0), "latency_ms": percentiles(latencies)}


async def _publish(url: str, clients: int, seconds: float, warmup: float,
                   batch: int) -> dict[str, Any]:
    from pgqueuer.db import AsyncpgDriver
    from pgqueuer.queries import Queries

    conns: list[Any] = []

    async def make(_i: int) -> Callable[[], Awaitable[int]]:
        conn = await _connect(url)
        conns.append(conn)
        queries = Queries(AsyncpgDriver(conn))
        if batch == 1:
            async def single() -> int:
                await queries.enqueue(ENTRYPOINT, BODY)
                return 1
            return single
        names, bodies, priorities = [ENTRYPOINT] * batch, [BODY] * batch, [0] * batch

        async def batched() -> int:
            await queries.enqueue(names, list(bodies), priorities)
            return batch
        return batched

    try:
        return await _closed_loop(clients, make, seconds, warmup,
                                  CpuProbe(None, database_name(url)))
    finally:
        for conn in conns:
            await conn.close()
        await _clear(url)


async def _clear(url: str) -> None:
    """Empty PgQueuer's tables, so that every run starts from the same state."""
    conn = await _connect(url)
    try:
        await conn.execute("TRUNCATE pgqueuer, pgqueuer_log, pgqueuer_statistics")
        await conn.execute("VACUUM ANALYZE pgqueuer")
    finally:
        await conn.close()


async def _fill(url: str, backlog: int, threads: int = 4, batch: int = 1000) -> int:
    """Top the queue up to ``backlog`` queued jobs (batched enqueues); how many there are."""
    from pgqueuer.db import AsyncpgDriver
    from pgqueuer.queries import Queries

    conn = await _connect(url)
    try:
        queued = int(await conn.fetchval(
            "SELECT count(*) FROM pgqueuer WHERE status = 'queued'"))
    finally:
        await conn.close()
    per_thread = -(-max(0, backlog - queued) // (threads * batch))

    async def fill() -> None:
        c = await _connect(url)
        try:
            queries = Queries(AsyncpgDriver(c))
            for _ in range(per_thread):
                await queries.enqueue([ENTRYPOINT] * batch, [BODY] * batch, [0] * batch)
        finally:
            await c.close()

    await asyncio.gather(*(fill() for _ in range(threads)))
    conn = await _connect(url)
    try:
        await conn.execute("ANALYZE pgqueuer")
    finally:
        await conn.close()
    return queued + per_thread * threads * batch


async def _consume(url: str, consumers: int, seconds: float, warmup: float, batch: int,
                   backlog: int) -> dict[str, Any]:
    """QueueManagers over a backlog: jobs done per second while it lasts (``ran_dry``
    when the queue emptied in the window: the figure is then a floor)."""
    from pgqueuer.db import AsyncpgDriver
    from pgqueuer.models import Job
    from pgqueuer.qm import QueueManager
    from pgqueuer.queries import Queries

    queued = await _fill(url, backlog)
    done = [0]
    managers = []
    for _ in range(consumers):
        qm = QueueManager(Queries(AsyncpgDriver(await _connect(url))))

        @qm.entrypoint(ENTRYPOINT)
        async def handle(job: Job) -> None:
            done[0] += 1

        managers.append(qm)
    probe = CpuProbe(None, database_name(url))
    runs = [asyncio.create_task(qm.run(batch_size=batch, dequeue_timeout=timedelta(seconds=1)))
            for qm in managers]
    await asyncio.sleep(warmup)
    p0, c0, t0 = probe(), done[0], time.perf_counter()
    await asyncio.sleep(seconds)
    c1, t1, p1 = done[0], time.perf_counter(), probe()
    for qm in managers:
        qm.shutdown.set()
    outcomes = await asyncio.wait_for(asyncio.gather(*runs, return_exceptions=True), 60)
    failures = [f"{type(e).__name__}: {e}" for e in outcomes if isinstance(e, BaseException)]
    conn = await _connect(url)
    try:
        left = int(await conn.fetchval("SELECT count(*) FROM pgqueuer WHERE status = 'queued'"))
    finally:
        await conn.close()
    rate = round((c1 - c0) / (t1 - t0), 1)
    return {"per_second": rate, "messages_per_second": rate, "units": c1 - c0,
            "seconds": round(t1 - t0, 2), "clients": consumers, "batch": batch,
            "backlog": queued, "left_queued": left, "ran_dry": left == 0,
            "errors": len(failures), "first_error": failures[0] if failures else None,
            "cpu_ms_per_unit": per_unit(p0, p1, c1 - c0)}


def _measure(args: argparse.Namespace) -> dict[str, Any]:
    if args.measure == "consume":
        result = asyncio.run(_consume(args.url, args.clients, args.seconds, args.warmup,
                                      args.batch, args.backlog))
    else:
        batch = 1 if args.measure == "publish_single" else args.batch
        result = asyncio.run(_publish(args.url, args.clients, args.seconds, args.warmup, batch))
        result["messages_per_second"] = result["per_second"]
        result["batch"] = batch
    import pgqueuer

    result["pgqueuer"] = str(pgqueuer.__version__)
    result["driver"] = "asyncpg"
    result["load_average"] = load_average()
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.phases.pgqueuer_load", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("measure", choices=MEASURES)
    p.add_argument("--url", required=True, help="the database PgQueuer is installed in")
    p.add_argument("--clients", type=int, default=32)
    p.add_argument("--seconds", type=float, default=15.0)
    p.add_argument("--warmup", type=float, default=3.0)
    p.add_argument("--batch", type=int, default=100)
    p.add_argument("--backlog", type=int, default=0, help="consume: queued jobs to start with")
    print(json.dumps(_measure(p.parse_args(argv))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
