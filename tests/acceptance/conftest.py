"""Fixtures that run the real `txmsg` console script as a subprocess."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
import requests

from tests.callbacks import wait_until
from tests.conftest import free_port

TXMSG = str(Path(sys.executable).parent / "txmsg")


class Served:
    """A ``txmsg serve`` process, in a session of its own: Granian's workers are its
    children, and a worker outlives a main process killed alone."""

    def __init__(self, proc: subprocess.Popen, url: str, log: Path) -> None:
        self.proc, self.url, self.log = proc, url, log

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        self.kill()

    def kill(self) -> None:
        """kill -9 of the whole server (main process and workers), as a crash of its host."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=30)


def clean_env(env: dict[str, str]) -> dict[str, str]:
    """The test's environment without any TXMSG_* setting, plus ``env``."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("TXMSG_")}
    return {**base, **env}


def run_txmsg(args: list[str], env: dict[str, str], cwd: Path,
              timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([TXMSG, *args], check=False, env=clean_env(env), cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)


def start_serve(env: dict[str, str], cwd: Path, *extra: str, port: int | None = None,
                timeout: float = 60, launcher: Sequence[str] = ()) -> Served:
    """Start ``txmsg serve`` (on ``port``, else a free one) and wait until it is ready;
    a restart on the same port appends to the same log. ``launcher`` is a command that
    execs serve (``prlimit --nofile=N:N``, say)."""
    port = port or free_port()
    log = cwd / f"serve-{port}.log"
    proc = subprocess.Popen([*launcher, TXMSG, "serve", "--port", str(port), *extra],
                            env=clean_env(env), cwd=cwd, start_new_session=True,
                            stdout=log.open("a"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            Served(proc, url, log).kill()
            raise AssertionError(f"txmsg serve exited: {log.read_text()}")
        try:
            if requests.get(f"{url}/readyz", timeout=1).status_code == 200:
                return Served(proc, url, log)
        except requests.RequestException:
            pass
        time.sleep(0.2)
    Served(proc, url, log).kill()
    raise AssertionError(f"txmsg serve did not become ready: {log.read_text()}")


class Checker:
    """A ``txmsg checker`` process (the check service alone), its output in ``log``."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.log = log
        self.proc = subprocess.Popen([TXMSG, "checker"], env=clean_env(env), cwd=log.parent,
                                     stdout=log.open("a"), stderr=subprocess.STDOUT)

    def output(self) -> str:
        return self.log.read_text()

    def wait_started(self, timeout: float = 30) -> None:
        wait_until(lambda: "started" in self.output() or self.proc.poll() is not None,
                   timeout=timeout, what="the checker to start")
        assert self.proc.poll() is None, self.output()

    def terminate(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=30)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)


@pytest.fixture
def serve_factory(tmp_path: Path) -> Iterator:
    started: list[Served] = []

    def factory(env: dict[str, str], *extra: str) -> Served:
        served = start_serve(env, tmp_path, *extra)
        started.append(served)
        return served

    yield factory
    for served in started:
        served.stop()
