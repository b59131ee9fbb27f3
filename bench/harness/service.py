"""The service under test: a real ``txmsg serve`` (or another WSGI server) subprocess."""

from __future__ import annotations

import http.client
import os
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Self

from bench.harness.pgdb import clean_env, database_name, txmsg_command
from bench.harness.procs import tree


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A server subprocess on 127.0.0.1; ``stop()`` ends it and whatever it started."""

    def __init__(self, argv: list[str], env: dict[str, str], port: int, name: str,
                 database: str | None = None) -> None:
        self.port, self.name, self.database = port, name, database
        self.token: str | None = None  # the producers' bearer token, with access control on
        self.admin_token: str | None = None  # what ``get`` sends (/metrics needs it then)
        self.log = Path(tempfile.mkstemp(prefix=f"txmsg-bench-{name}-", suffix=".log")[1])
        self.proc = subprocess.Popen(argv, env=env, stdout=self.log.open("w"),
                                     stderr=subprocess.STDOUT, start_new_session=True)
        self._wait_ready()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _wait_ready(self, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited: {self.log.read_text()[-4000:]}")
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                conn.request("GET", "/readyz")
                if conn.getresponse().status == 200:
                    conn.close()
                    return
                conn.close()
            except OSError:
                pass
            time.sleep(0.2)
        output = self.log.read_text()[-4000:]
        self.stop()
        raise RuntimeError(f"{self.name} did not become ready: {output}")

    def get(self, path: str) -> bytes:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            auth = {"Authorization": f"Bearer {self.admin_token}"} if self.admin_token else {}
            conn.request("GET", path, headers=auth)
            return conn.getresponse().read()
        finally:
            conn.close()

    def stop(self) -> None:
        if self.proc.poll() is None:
            pids = tree(self.proc.pid)
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                for pid in pids:  # only the processes this server started
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                self.proc.wait(timeout=10)
        self.log.unlink(missing_ok=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve(database_url: str, *, checker: bool = False, **settings: object) -> Server:
    """``txmsg serve --no-migrate`` (with ``--no-checker`` unless ``checker``), with
    TXMSG_* overrides (web_workers=...)."""
    port = free_port()
    env = clean_env(TXMSG_DATABASE_URL=database_url,
                    **{f"TXMSG_{k.upper()}": str(v) for k, v in settings.items()})
    argv = [*txmsg_command(), "--log-level", "WARNING", "serve", "--no-migrate",
            *(() if checker else ("--no-checker",)), "--port", str(port)]
    return Server(argv, env, port, "serve", database_name(database_url))


BENCH_ADMIN_TOKEN = "bench-admin-token-0123456789abcdef"


def serve_with_access_control(database_url: str, **settings: object) -> Server:
    """``serve`` with TXMSG_ADMIN_TOKEN set; the producers use a ``produce:<group>`` token
    (checked through the token cache, as a real producer's would be, not the admin one)."""
    from bench.harness.client import GROUP, make_token

    server = serve(database_url, admin_token=BENCH_ADMIN_TOKEN, **settings)
    server.admin_token = BENCH_ADMIN_TOKEN
    try:
        server.token = make_token(server.port, BENCH_ADMIN_TOKEN, [f"produce:{GROUP}"])
    except Exception:
        server.stop()
        raise
    return server
