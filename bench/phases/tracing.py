"""What OpenTelemetry tracing costs a send + commit pair (``python -m bench.phases.tracing``).

Two ``txmsg serve`` on one fresh PostgreSQL database: one without OTEL_* settings
(tracing off), one exporting its spans over OTLP/HTTP to a local sink (a thread of this
process that answers POST /v1/traces and counts what it got). Every producer sends a
``traceparent``, so the stored context and the send span's parent are paid for too.
Rounds alternate between the two (off first, then on first), from one client and from
32, so that drift on the shared machine falls on both alike; the medians are reported
with ``uptime``'s load averages before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from bench.harness.client import Producer, register
from bench.harness.load import closed_loop
from bench.harness.pgdb import bench_database
from bench.harness.procs import CpuProbe
from bench.harness.service import Server, serve

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


class Sink:
    """An OTLP/HTTP trace endpoint that accepts everything and counts it."""

    def __init__(self) -> None:
        self.requests = 0
        self.bytes = 0
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                size = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(size)
                sink.requests += 1
                sink.bytes += size
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_port}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class TracedProducer(Producer):
    """A bench producer whose requests carry a W3C ``traceparent``."""

    def __init__(self, port: int, name: str) -> None:
        super().__init__(port, name)
        self._auth += f"traceparent: {TRACEPARENT}\r\n"


@contextmanager
def _environment(**variables: str) -> Iterator[None]:
    """``os.environ`` with ``variables`` (which ``serve`` hands to its subprocess)."""
    before = {k: os.environ.get(k) for k in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


def _round(server: Server, clients: int, seconds: float, warmup: float) -> dict[str, Any]:
    run = uuid.uuid4().hex[:6]
    made: list[Producer] = []

    def make(i: int) -> Any:
        p = TracedProducer(server.port, f"{run}-{i}")
        made.append(p)
        return p.pair

    result = closed_loop(clients, make, seconds, warmup,
                         probe=CpuProbe(server.pid, server.database))
    for p in made:
        p.close()
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.phases.tracing", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=4, help="rounds per mode and client count")
    p.add_argument("--seconds", type=float, default=8.0)
    p.add_argument("--warmup", type=float, default=2.0)
    p.add_argument("--clients", default="1,32")
    args = p.parse_args(argv)
    for k in [k for k in os.environ if k.startswith("OTEL_")]:
        del os.environ[k]  # tracing off unless this benchmark turns it on
    out: dict[str, Any] = {"uptime_at_start": _uptime(), "rounds": []}
    sink = Sink()
    try:
        with bench_database() as url, serve(url) as off, \
                _environment(OTEL_EXPORTER_OTLP_ENDPOINT=sink.url), serve(url) as on:
            servers = {"off": off, "on": on}
            for server in servers.values():
                register(server.port)
            for n in range(args.rounds):
                for clients in (int(c) for c in args.clients.split(",")):
                    order = ("off", "on") if n % 2 == 0 else ("on", "off")
                    for mode in order:
                        r = _round(servers[mode], clients, args.seconds, args.warmup)
                        out["rounds"].append({"mode": mode, "clients": clients, **r})
                        print(json.dumps(out["rounds"][-1]), flush=True)
    finally:
        sink.close()
    out["uptime_at_end"] = _uptime()
    out["spans_exported"] = {"requests": sink.requests, "bytes": sink.bytes}
    out["median"] = _medians(out["rounds"])
    print(json.dumps({k: v for k, v in out.items() if k != "rounds"}, indent=2))
    return 0


def _medians(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Per client count: the median pairs/s and service CPU ms per pair, off and on."""
    out: dict[str, Any] = {}
    for clients in sorted({r["clients"] for r in rounds}):
        row: dict[str, Any] = {}
        for mode in ("off", "on"):
            mine = [r for r in rounds if r["clients"] == clients and r["mode"] == mode]
            row[mode] = {
                "pairs_per_second": statistics.median(r["per_second"] for r in mine),
                "service_cpu_ms_per_pair": statistics.median(
                    r["cpu_ms_per_unit"]["service"] for r in mine)}
        row["cpu_ms_per_pair_added"] = round(row["on"]["service_cpu_ms_per_pair"]
                                             - row["off"]["service_cpu_ms_per_pair"], 3)
        out[f"{clients}_clients"] = row
    return out


if __name__ == "__main__":
    raise SystemExit(main())
