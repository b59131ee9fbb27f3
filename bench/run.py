"""``make bench``: txmsg against plain PostgreSQL on this machine, in one run.

Creates a dedicated database (migrated with ``txmsg migrate``, dropped at the end) and
measures, with the same N client threads throughout:

  (a) raw psycopg single-row INSERT commits/s        (c) raw 100-row INSERT rows/s
  (b) txmsg send + commit pairs/s over HTTP          (d) txmsg 100-message transactions, msgs/s
  (b) and (d) again with access control on (a second server with TXMSG_ADMIN_TOKEN, the
      producers holding a produce:<group> token), and the overhead against them off
  (e) commit latency p50/p99, open loop at half the (b) peak, with the service's RSS
  (f) the checker's due scan with 1M resolved + 1k pending vs 1k pending alone
  (g) receive + ack in batches of 100 by 4 consumer threads on one subscription, msgs/s,
      in the rounds of (a)-(d), against (d)
  (h) delivery latency p50/p99, from a commit's answer to a long-polling receive getting
      the message, at half the (b) peak; and 500 idle long polls: the service's RSS and
      CPU over 10 s with them and without
  (l) one client, one request at a time (``bench.phases.lone``, in a database of its own): each
      route's latency and the service's CPU per request, beside the floors (PostgreSQL
      alone, and a bare ASGI app on Granian)
  (o) ordered consumption (``bench.phases.ordered``), after (g), in rounds of its own:
      key_shared over 1,000 and over 10 keys and failover with one consumer, each beside a
      shared subscription on the same messages; then one key_shared receive + ack at a
      small and at a large backlog (10k, 1M)
  plus the checker's RSS working a 100k backlog, ``bench.phases.ingest``, and
  ``bench.phases.streaming`` (the streaming source's catch-up beside ingest's, and
  commit-to-lake latency under ``txmsg ingest --follow --interval 1`` at 500 messages/s);
  and retention (``bench.phases.retention``): (b) and (d) with the retention job deleting as
  fast as they write against the same runs without it, and 10M expired rows emptied
  under a paced load (time, worst commit latency).
  (p) PgQueuer (``bench.phases.pgqueuer_load``) in a database of its own on the same server, in
      the rounds of (a)-(d), (g), each beside its txmsg measure: publish one job at a
      time, publish lists of 100, consume with 4 QueueManagers at batch size 100; CPU per
      1,000 messages of client, service and PostgreSQL for each side; then publish one at
      a time by both at each of ``sweep_clients``: latency percentiles by concurrency.

Results go to bench/out/results.json with the machine's description. ``--quick`` (or
TXMSG_BENCH_QUICK=1) is a smoke run of a few seconds per phase; benchmarks measure, the
test of the quick mode only checks that every figure is there. ``--subscriptions-only``
runs (b), (d), (g), (o), (h) and the idle long polls alone; ``--ordered-only`` (o) alone;
``--pgqueuer-only`` the rounds of
(a)-(d), (g) with PgQueuer's, and the concurrency sweep. ``python -m bench.report.charts`` draws
the results into docs/images/bench-*.png.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from bench.harness import machine
from bench.harness.pgdb import admin_url, bench_database, libpq_url
from bench.harness.service import serve, serve_with_access_control
from bench.phases import consume, lone, ordered, pgqueuer_load, raw, sweep, txmsg_load
from bench.report import figures
from bench.report.figures import OUT
from bench.report.summary import brief, summary

# Why 32 clients: enough concurrent producers that group commit forms real batches and
# PostgreSQL's own WAL flushes are shared by the raw baseline too (its commits/s stop
# growing well before 32 on two cores), while staying far below max_connections and
# within one Granian worker's blocking threads.
CLIENTS = 32


@dataclass(frozen=True)
class Plan:
    clients: int = CLIENTS
    seconds: float = 15.0          # each closed-loop run, after the warm-up
    rounds: int = 3                # of (a), (b), (c), (d), interleaved; medians reported
    warmup: float = 3.0
    paced_seconds: float = 300.0   # (e) and the service's memory
    batch_rows: int = 100          # (c) and (d)
    due_resolved: int = 1_000_000
    due_pending: int = 1_000
    due_repeats: int = 50
    checker_backlog: int = 100_000
    checker_reference_backlog: int = 1_000
    checker_seconds: float = 60.0
    ingest_rows: int = 1_000_000
    ingest_rounds: int = 3         # of txmsg ingest / plain Spark job / COPY, interleaved
    retention_rounds: int = 5     # a mode varies by up to 25% from round to round here
    retention_drain_rows: int = 10_000_000
    retention_drain_rate: float = 300.0  # pairs/s while the expired rows are emptied
    consumers: int = 4             # (g) and (h)
    consume_batch: int = 100       # (g)
    latency_seconds: float = 60.0  # (h)
    idle_polls: int = 500
    idle_seconds: float = 10.0
    sweep_clients: tuple[int, ...] = (1, 4, 16, CLIENTS)  # publish one at a time, (p)
    lone_requests: int = 1_000     # (l), per route and round
    ordered_seconds: float | None = None  # (o)'s closed-loop runs (None: ``seconds``)
    ordered_warmup: float | None = None
    ordered_backlog_small: int = 10_000   # (o), one key_shared receive + ack at each
    ordered_backlog_large: int = 1_000_000
    ordered_repeats: int = 50
    retention_only: bool = False
    subscriptions_only: bool = False
    pgqueuer_only: bool = False
    ordered_only: bool = False
    quick: bool = False


QUICK = Plan(seconds=1.5, warmup=0.5, rounds=1, paced_seconds=3.0, due_resolved=20_000,
             due_pending=1_000, due_repeats=10, checker_backlog=2_000,
             checker_reference_backlog=200, checker_seconds=3.0, ingest_rows=1_000, ingest_rounds=1,
             retention_rounds=1, retention_drain_rows=20_000, latency_seconds=3.0,
             idle_polls=50, idle_seconds=2.0, sweep_clients=(1, 8), lone_requests=50,
             ordered_seconds=0.8, ordered_warmup=0.2, ordered_backlog_small=2_000,
             ordered_backlog_large=20_000, ordered_repeats=10, quick=True)


def main(argv: list[str] | None = None) -> int:
    plan, out_path = _parse(argv)
    results: dict[str, Any] = {"started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                               "plan": asdict(plan), "errors": {}}
    admin = admin_url()
    results["machine"] = machine.describe(libpq_url(admin))
    results["service_settings"] = _service_settings()
    _log(f"txmsg bench ({'quick' if plan.quick else 'full'}), {plan.clients} clients, "
         f"{results['machine']['cores']} cores")
    t0 = time.perf_counter()
    with bench_database(admin) as db, bench_database(admin, migrate=False) as pgq_db:
        _phases(plan, admin, db, pgq_db, results)
    results["total_seconds"] = round(time.perf_counter() - t0, 1)
    results["load_average_at_end"] = machine.load_average()
    results["pgqueuer_comparison"] = figures.comparison(results)
    results["ratios"] = figures.ratios(results)
    results["goals"] = figures.goals(results["ratios"])
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(results, indent=2, default=str))
    summary(results, out_path)
    return 1 if results["errors"] else 0


def _parse(argv: list[str] | None) -> tuple[Plan, Path]:
    p = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   default=os.environ.get("TXMSG_BENCH_QUICK", "") not in ("", "0"),
                   help="a smoke run of a few seconds per phase (env TXMSG_BENCH_QUICK=1)")
    p.add_argument("--clients", type=int, help=f"client threads (default {CLIENTS})")
    p.add_argument("--seconds", type=float, help="length of each closed-loop run")
    p.add_argument("--rounds", type=int, help="interleaved rounds of (a)-(d) (default 3)")
    p.add_argument("--paced-seconds", type=float,
                   help="length of the half-peak run (latency and memory); default 300")
    p.add_argument("--checker-seconds", type=float, help="length of each checker memory run")
    p.add_argument("--retention-only", action="store_true",
                   help="only the retention phases (and the (b) run that paces them)")
    p.add_argument("--subscriptions-only", action="store_true",
                   help="only (b), (d), (g) in rounds, then (h) and the idle long polls")
    p.add_argument("--pgqueuer-only", action="store_true",
                   help="only txmsg against PgQueuer: (a)-(d), (g) and PgQueuer's measures "
                        "in rounds, then publish one at a time by both at several client "
                        "counts")
    p.add_argument("--ordered-only", action="store_true",
                   help="only (o): key_shared and failover beside shared, in rounds, and "
                        "one key_shared receive at a small and a large backlog")
    p.add_argument("--ordered-backlog", type=int,
                   help="(o)'s large backlog, keyed messages (default 1M, quick 20k)")
    p.add_argument("--drain-rows", type=int,
                   help="expired rows to empty in the retention drain (default 10M)")
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    plan = QUICK if args.quick else Plan()
    overrides = {"clients": args.clients, "seconds": args.seconds, "rounds": args.rounds,
                 "paced_seconds": args.paced_seconds, "checker_seconds": args.checker_seconds}
    overrides["retention_drain_rows"] = args.drain_rows
    overrides["ordered_backlog_large"] = args.ordered_backlog
    if args.seconds is not None:  # (o) too
        overrides["ordered_seconds"] = args.seconds
    plan = replace(plan, **{k: v for k, v in overrides.items() if v is not None},
                   retention_only=args.retention_only,
                   subscriptions_only=args.subscriptions_only,
                   pgqueuer_only=args.pgqueuer_only, ordered_only=args.ordered_only)
    return plan, args.out


def _phases(plan: Plan, admin: str, db: str, pgq_db: str, results: dict[str, Any]) -> None:
    n, secs, warm = plan.clients, plan.seconds, plan.warmup

    def phase(name: str, fn: Callable[[], Any]) -> Any:
        _log(f"-- {name}")
        t = time.perf_counter()
        try:
            results[name] = fn()
        except Exception as exc:  # noqa: BLE001 - one failed phase must not hide the others
            results["errors"][name] = f"{type(exc).__name__}: {exc}"
            _log(traceback.format_exc())
            return None
        if isinstance(results[name], dict):
            results[name].setdefault("load_average", machine.load_average())
        _log(f"   {brief(results[name])} ({time.perf_counter() - t:.0f}s)")
        return results[name]

    try:
        server = serve(db)
    except Exception as exc:  # noqa: BLE001
        results["errors"]["serve"] = f"{type(exc).__name__}: {exc}"
        server = None
    secured = None
    pgq = phase("pgqueuer", lambda: {"version": pgqueuer_load.install(pgq_db)}) \
        if not (plan.subscriptions_only or plan.retention_only or plan.ordered_only) else None
    try:
        if not (plan.subscriptions_only or plan.pgqueuer_only or plan.ordered_only):
            secured = serve_with_access_control(db)
    except Exception as exc:  # noqa: BLE001
        results["errors"]["serve_with_access_control"] = f"{type(exc).__name__}: {exc}"
    rates: dict[str, float] = {}  # the last round's (d), (g), PgQueuer's consume: the backlogs

    def measured(key: str, fn: Callable[[], dict[str, Any]]) -> Callable[[], dict[str, Any]]:
        def run() -> dict[str, Any]:
            out = fn()
            rates[key] = out["messages_per_second"]
            return out
        return run

    backlog = consume.Backlog(server, db) if server is not None else None
    throughput: dict[str, tuple[str, Callable[[], Any]]] = {
        "a_raw_single_insert": ("per_second", lambda: raw.single_inserts(db, n, secs, warm)),
        "b_txmsg_send_commit": ("per_second",
                                lambda: txmsg_load.pairs(server, n, secs, warm)),
        "p_pgqueuer_publish_single": ("messages_per_second", lambda: pgqueuer_load.run(
            pgq_db, "publish_single", n, secs, warm)),
        "c_raw_batch_insert": ("per_second", lambda: raw.batched_inserts(
            db, n, secs, warm, batch=plan.batch_rows)),
        "d_txmsg_batch_send_commit": ("messages_per_second", measured(
            "d", lambda: txmsg_load.pairs(server, n, secs, warm, messages=plan.batch_rows))),
        "p_pgqueuer_publish_batched": ("messages_per_second", lambda: pgqueuer_load.run(
            pgq_db, "publish_batched", n, secs, warm, batch=plan.batch_rows)),
        "g_receive_ack": ("messages_per_second", measured(
            "g", lambda: consume.receive_ack(server, backlog, plan.consumers, secs, warm,
                                             plan.consume_batch,
                                             expected_rate=max(rates.values(), default=0)))),
        "p_pgqueuer_consume": ("messages_per_second", measured(
            "p", lambda: pgqueuer_load.run(
                pgq_db, "consume", plan.consumers, secs, warm, batch=plan.consume_batch,
                backlog=max(20 * plan.consume_batch * plan.consumers,
                            int(3 * max(rates.values(), default=0) * (secs + warm)))))),
        "b_access_control_on": ("per_second",
                                lambda: txmsg_load.pairs(secured, n, secs, warm)),
        "d_access_control_on": ("messages_per_second", lambda: txmsg_load.pairs(
            secured, n, secs, warm, messages=plan.batch_rows)),
    }
    if server is None:
        throughput = {k: v for k, v in throughput.items()
                      if k.startswith(("a_", "c_")) or k.endswith("_on")}
    if pgq is None:
        throughput = {k: v for k, v in throughput.items() if not k.startswith("p_")}
    if plan.subscriptions_only:
        throughput = {k: v for k, v in throughput.items() if k.startswith(("b_t", "d_t", "g_"))}
    if plan.pgqueuer_only:
        throughput = {k: v for k, v in throughput.items() if not k.endswith("_on")}
    if secured is None:
        throughput = {k: v for k, v in throughput.items() if not k.endswith("_on")}
    if plan.retention_only or plan.ordered_only:
        throughput = {}
    try:
        _throughput_rounds(plan, throughput, phase, results)
        if server is not None and not (plan.retention_only or plan.pgqueuer_only):
            _ordered(plan, server, db, rates.get("g", 0.0), phase, results)
        if plan.ordered_only:
            return
        if server is not None and pgq is not None:
            phase("latency_by_concurrency", lambda: sweep.run(
                server, pgq_db, plan.sweep_clients, plan.seconds, plan.warmup))
        if plan.pgqueuer_only:
            return
        if not (plan.subscriptions_only or plan.retention_only):
            phase("l_one_client", lambda: lone.run(plan.lone_requests, plan.rounds))
        b = results.get("b_txmsg_send_commit")
        if server is not None and b and not plan.subscriptions_only:
            phase("e_commit_latency_half_peak",
                  lambda: txmsg_load.paced_with_memory(server, n, 0.5 * b["per_second"],
                                             plan.paced_seconds))
        if server is not None and b and not plan.retention_only:
            phase("h_delivery_latency_half_peak", lambda: consume.delivery_latency(
                server, n, plan.consumers, 0.5 * b["per_second"], plan.latency_seconds))
        if server is not None and not plan.retention_only:
            phase("idle_long_polls", lambda: consume.idle_long_polls(
                server, plan.idle_polls, plan.idle_seconds))
        if server is not None and not plan.subscriptions_only:
            from bench.phases import retention

            phase("retention_throughput", lambda: retention.throughput(
                db, server, n, secs, warm, plan.retention_rounds, plan.batch_rows))
            phase("retention_drain", lambda: retention.drain(
                db, server, plan.retention_drain_rows, plan.retention_drain_rate, n,
                chunk_seconds=min(10.0, plan.paced_seconds)))
    finally:
        for running in (server, secured):
            if running is not None:
                running.stop()
    if plan.retention_only or plan.subscriptions_only or plan.pgqueuer_only or plan.ordered_only:
        return
    from bench.phases import due_scan

    phase("f_due_scan", lambda: due_scan.run(db, plan.due_resolved, plan.due_pending,
                                             plan.due_repeats))
    if importlib.util.find_spec("checker.service") is not None:
        from bench.phases import checker_memory

        phase("checker_memory", lambda: checker_memory.run(
            db, plan.checker_backlog, plan.checker_reference_backlog, plan.checker_seconds))
    else:
        results["checker_memory"] = {"pending": "checker.service is not there yet"}
    from bench.phases import ingest

    # it makes a database of its own on the same server
    phase("ingest", lambda: ingest.run(
        database_url=admin, rows=plan.ingest_rows, rounds=plan.ingest_rounds,
        incremental=0 if plan.quick else 1_000, quick=plan.quick))
    if not plan.quick:  # two Spark starts a round and a minute of load: not for a smoke run
        from bench.phases import streaming

        # the lake kept current: the streaming source's catch-up beside txmsg ingest's, and
        # commit-to-lake latency under `ingest --follow --interval 1` (databases of their own)
        phase("streaming", lambda: streaming.run(
            database_url=admin, rows=plan.ingest_rows, rounds=2, rate=500, seconds=60))


def _ordered(plan: Plan, server: Any, db: str, g_rate: float,
             phase: Callable[[str, Callable[[], Any]], Any], results: dict[str, Any]) -> None:
    """(o): its rounds' figures lifted to the top of the results, each with the load
    average at the end of the phase; the ratios stay under ``o_ordered``."""
    seconds = plan.seconds if plan.ordered_seconds is None else plan.ordered_seconds
    warmup = plan.warmup if plan.ordered_warmup is None else plan.ordered_warmup
    # without (g) before it, a guess above what two cores do: a first round on too small a
    # backlog runs dry and measures nothing
    rate = g_rate or 10_000.0
    done = phase("o_ordered", lambda: ordered.rounds(
        server, db, plan.rounds, seconds, warmup, plan.consume_batch, expected_rate=rate,
        least=2_000 if plan.quick else 20 * plan.consume_batch * plan.consumers,
        grow=not plan.quick))
    if done is not None:
        for name in ordered.MEASURES:
            results[name] = {**done.pop(name), "load_average": done["load_average"]}
    phase("o_receive_vs_backlog", lambda: ordered.receive_vs_backlog(
        server, db, plan.ordered_backlog_small, plan.ordered_backlog_large,
        plan.ordered_repeats, plan.consume_batch))


def _throughput_rounds(plan: Plan, throughput: dict[str, tuple[str, Callable[[], Any]]],
                       phase: Callable[[str, Callable[[], Any]], Any],
                       results: dict[str, Any]) -> None:
    """Interleaved rounds, each figure the median of its rounds: on a machine whose load
    drifts (other work on it), a ratio is skewed less than by one long run of each."""
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in throughput}
    for rnd in range(plan.rounds):
        for name, (_, fn) in throughput.items():
            label = f"{name} (round {rnd + 1}/{plan.rounds})"
            if phase(label, fn) is not None:
                runs[name].append(results.pop(label))
    for name, (key, _) in throughput.items():
        if runs[name]:
            by_rate = sorted(runs[name], key=lambda r, key=key: r[key])
            results[name] = {**by_rate[len(by_rate) // 2], "rounds": [r[key] for r in runs[name]]}
            # a failed round is reported in "rounds" by its absence, not as an error
            results["errors"] = {k: v for k, v in results["errors"].items()
                                 if not k.startswith(name)}


def _service_settings() -> dict[str, Any]:
    from app.config import Settings

    s = Settings(database_url="postgresql+psycopg://unused/unused")
    return {k: getattr(s, k) for k in ("web_workers", "web_threads", "batch_max_size",
                                       "db_pool_size", "db_max_overflow")}


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
