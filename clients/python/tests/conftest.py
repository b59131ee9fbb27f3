"""A real ``txmsg serve`` (on a SQLite file) for the tests that talk to the service.

The SDK never imports the server: it is started as a command, the ``txmsg`` next to this
Python (the development venv has both), else the one on PATH; without it these tests
skip (the SDK installed alone).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests


def txmsg_command() -> str | None:
    beside = Path(sys.executable).parent / "txmsg"
    return str(beside) if beside.exists() else shutil.which("txmsg")


@dataclass
class Service:
    url: str
    log: Path


def wait_until(condition: Callable[[], object], timeout: float = 30, what: str = "it") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.fixture(scope="session")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    command = txmsg_command()
    if command is None:
        pytest.skip("needs the txmsg server (pip install the project)")
    where = tmp_path_factory.mktemp("service")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("TXMSG_")}
    env["TXMSG_DATABASE_URL"] = f"sqlite:///{where / 'txmsg.db'}"
    log = where / "serve.log"
    proc = subprocess.Popen([command, "serve", "--port", str(port)], env=env, cwd=where,
                            stdout=log.open("w"), stderr=subprocess.STDOUT,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"txmsg serve exited: {log.read_text()}")
        try:
            return requests.get(f"{url}/readyz", timeout=1).status_code == 200
        except requests.RequestException:
            return False

    try:
        wait_until(ready, timeout=90, what="txmsg serve to be ready")
        yield Service(url, log)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            pass
        try:  # its workers too, should the main process have left them behind
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=10)


@pytest.fixture
def topic() -> str:
    """A topic of this test's own on the shared service."""
    return f"t-{uuid.uuid4().hex[:12]}"
