"""The check service's memory with a large backlog: bounded by its batch, not the backlog.

A backlog of PREPARED transactions, all due, points at a local callback that answers
UNKNOWN at once; a real ``txmsg checker`` process works through it for a bounded time
while its RSS is sampled. The same run with a small backlog gives the reference.
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

from bench.harness.pgdb import clean_env, truncate_all, txmsg_command
from bench.harness.procs import Sampler
from bench.phases.due_scan import generate


class _Callback(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    answered = 0
    lock = threading.Lock()

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = b'{"resolution": "UNKNOWN"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        with _Callback.lock:
            _Callback.answered += 1

    def log_message(self, *args: object) -> None:
        pass


class CallbackServer:
    def __enter__(self) -> Self:
        _Callback.answered = 0
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _Callback)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_port}/check"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    @property
    def answered(self) -> int:
        return _Callback.answered


STARTUP_SECONDS = 120  # the measured window starts at the first answered check, not at spawn


def one_run(url: str, backlog: int, seconds: float) -> dict[str, Any]:
    truncate_all(url)
    with CallbackServer() as callback:
        generate(url, "PREPARED", backlog, "c-", check_url=callback.url)
        env = clean_env(TXMSG_DATABASE_URL=url, TXMSG_CHECK_INTERVAL_SECONDS="3600")
        proc = subprocess.Popen([*txmsg_command(), "--log-level", "WARNING", "checker"],
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                start_new_session=True)
        try:
            with Sampler(proc.pid, interval=0.5) as sampler:
                started = time.monotonic()
                startup_deadline = started + STARTUP_SECONDS
                while (callback.answered == 0 and proc.poll() is None
                       and time.monotonic() < startup_deadline):
                    time.sleep(0.05)
                startup = time.monotonic() - started
                deadline = time.monotonic() + seconds
                while time.monotonic() < deadline and proc.poll() is None:
                    time.sleep(0.2)
            checks = callback.answered
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            try:
                _, err = proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                _, err = proc.communicate(timeout=10)
        if proc.returncode not in (0, -signal.SIGTERM):
            raise RuntimeError(f"txmsg checker exited {proc.returncode}: {err[-2000:]!r}")
    truncate_all(url)
    samples = sampler.samples
    # once started (after the first quarter of the measured window) memory should stay flat
    settled = [s["rss"] for s in samples if s["t"] >= startup + seconds / 4 and s["rss"]]
    return {"backlog": backlog, "seconds": seconds, "startup_seconds": round(startup, 2),
            "checks_delivered": checks,
            "checks_per_second": round(checks / seconds, 1),
            "rss_peak": max((s["rss"] for s in samples), default=None),
            "rss_after_first_quarter": settled[0] if settled else None,
            "rss_last": samples[-1]["rss"] if samples else None,
            "pss_peak": max((s["pss"] for s in samples), default=None),
            "samples": [(s["t"], s["rss"]) for s in samples]}


def run(url: str, backlog: int, reference_backlog: int, seconds: float) -> dict[str, Any]:
    big = one_run(url, backlog, seconds)
    small = one_run(url, reference_backlog, seconds)
    return {"large": big, "reference": small,
            "peak_rss_ratio": round(big["rss_peak"] / small["rss_peak"], 3)
            if big["rss_peak"] and small["rss_peak"] else None}
