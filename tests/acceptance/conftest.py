"""Fixtures that run the real `txmsg` console script as a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.conftest import free_port

TXMSG = str(Path(sys.executable).parent / "txmsg")


class Served:
    def __init__(self, proc: subprocess.Popen, url: str, log: Path) -> None:
        self.proc, self.url, self.log = proc, url, log

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)


def clean_env(env: dict[str, str]) -> dict[str, str]:
    """The test's environment without any TXMSG_* setting, plus ``env``."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("TXMSG_")}
    return {**base, **env}


def run_txmsg(args: list[str], env: dict[str, str], cwd: Path,
              timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([TXMSG, *args], check=False, env=clean_env(env), cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)


def start_serve(env: dict[str, str], cwd: Path, *extra: str) -> Served:
    port = free_port()
    log = cwd / f"serve-{port}.log"
    proc = subprocess.Popen([TXMSG, "serve", "--port", str(port), *extra],
                            env=clean_env(env), cwd=cwd,
                            stdout=log.open("w"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"txmsg serve exited: {log.read_text()}")
        try:
            if requests.get(f"{url}/readyz", timeout=1).status_code == 200:
                return Served(proc, url, log)
        except requests.RequestException:
            pass
        time.sleep(0.2)
    proc.kill()
    raise AssertionError(f"txmsg serve did not become ready: {log.read_text()}")


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
