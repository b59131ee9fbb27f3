"""(b) send+commit pairs/s and (d) 100-message transactions, msgs/s: one `txmsg serve`,
then two behind HAProxy (deploy/haproxy/haproxy.cfg), on one PostgreSQL database.

    python -m bench.phases.ha [--seconds 10] [--warmup 3]

On a machine of few cores the second process mostly shows that nothing breaks: both
share the same cores and the same database, whose commits are the bound.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.harness.pgdb import bench_database
from bench.harness.service import Server, free_port, serve
from bench.phases.txmsg_load import pairs

HAPROXY_CONFIG = Path(__file__).resolve().parents[2] / "deploy" / "haproxy" / "haproxy.cfg"


@dataclass
class Balanced:
    """Two servers behind HAProxy, as ``pairs`` sees a server (CPU probed on the first)."""

    first: Server
    port: int
    token: str | None = None

    @property
    def pid(self) -> int:
        return self.first.pid

    @property
    def database(self) -> str | None:
        return self.first.database

    def get(self, path: str) -> bytes:
        return self.first.get(path)


def haproxy(api1: int, api2: int) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    env = {**os.environ, "TXMSG_HAPROXY_BIND": f"127.0.0.1:{port}",
           "TXMSG_API1": f"127.0.0.1:{api1}", "TXMSG_API2": f"127.0.0.1:{api2}"}
    proc = subprocess.Popen(["haproxy", "-db", "-f", str(HAPROXY_CONFIG)], env=env,
                            stdout=subprocess.DEVNULL, start_new_session=True)
    time.sleep(2)  # both servers pass two health checks (0.5 s apart) before the run
    return proc, port


def measure(server: Any, seconds: float, warmup: float) -> dict[str, float]:
    b = pairs(server, clients=16, seconds=seconds, warmup=warmup)
    d = pairs(server, clients=8, seconds=seconds, warmup=warmup, messages=100)
    return {"b_pairs_per_second": b["per_second"],
            "d_messages_per_second": d["messages_per_second"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--warmup", type=float, default=3)
    args = parser.parse_args()
    results: dict[str, Any] = {}
    with bench_database() as url:
        with serve(url) as one:
            results["one node"] = measure(one, args.seconds, args.warmup)
        with serve(url) as a, serve(url) as b:
            proxy, port = haproxy(a.port, b.port)
            try:
                results["two nodes behind HAProxy"] = measure(Balanced(a, port),
                                                              args.seconds, args.warmup)
            finally:
                proxy.kill()
                proxy.wait()
    print(json.dumps({"cpus": os.cpu_count(), **results}, indent=2))


if __name__ == "__main__":
    main()
