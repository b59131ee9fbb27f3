"""``make soak``: storage and memory stay flat under steady traffic with retention on.

Runs ``txmsg serve`` (with its check service, so the retention job) on a database of its
own, with ``TXMSG_RETENTION_SECONDS=60``; measures (b)'s peak for a few seconds, then
drives send + commit at half of it for ``--minutes`` (default 10) and prints, every 30 s,
the row counts of the tables retention empties, their size on disk and the service's
RSS. The counts level off once the first minute has expired.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from typing import Any

import psycopg

from bench.harness.pgdb import admin_url, bench_database, libpq_url
from bench.harness.procs import memory
from bench.harness.service import serve
from bench.phases import txmsg_load

TABLES = ("txn", "half_message", "op_log", "check_log", "message_log", "retention_pending")


def snapshot(db: str) -> dict[str, Any]:
    with psycopg.connect(libpq_url(db), autocommit=True) as conn:
        rows = {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in TABLES}
        size = conn.execute("SELECT " + " + ".join(
            f"pg_total_relation_size('{t}')" for t in TABLES)).fetchone()[0]
    return {"rows": rows, "bytes": size}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.phases.soak", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--retention-seconds", type=int, default=60)
    p.add_argument("--every", type=float, default=30.0, help="seconds between reports")
    p.add_argument("--clients", type=int, default=32)
    p.add_argument("--rate", type=float, help="pairs/s (default: half of a measured peak)")
    args = p.parse_args(argv)
    with bench_database(admin_url()) as db:
        server = serve(db, retention_seconds=args.retention_seconds,
                       retention_interval_seconds=5, checker=True)
        try:
            rate = args.rate or 0.5 * txmsg_load.pairs(server, args.clients, 5, 2)["per_second"]
            _say(f"soak: {args.minutes:g} min at {rate:.0f} pairs/s, retention "
                 f"{args.retention_seconds} s")
            _say(f"{'t (s)':>6} {'txn':>9} {'half_msg':>9} {'op_log':>9} {'msg_log':>9} "
                 f"{'pending':>7} {'disk MB':>8} {'RSS MB':>7}")
            done = threading.Event()
            load = threading.Thread(target=lambda: (txmsg_load.paced(
                server, args.clients, rate, args.minutes * 60), done.set()), daemon=True)
            started = time.monotonic()
            load.start()
            while not done.wait(args.every):
                s = snapshot(db)
                r = s["rows"]
                _say(f"{time.monotonic() - started:6.0f} {r['txn']:9d} {r['half_message']:9d} "
                     f"{r['op_log']:9d} {r['message_log']:9d} {r['retention_pending']:7d} "
                     f"{s['bytes'] / 2**20:8.1f} {memory(server.pid)['rss'] / 2**20:7.1f}")
            load.join()
        finally:
            server.stop()
    return 0


def _say(line: str) -> None:
    print(line, flush=True)


if __name__ == "__main__":
    sys.exit(main())
