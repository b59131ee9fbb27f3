"""A kill -9 of `txmsg serve`'s main process takes its web workers with it."""

from __future__ import annotations

import os
import signal

import requests

from tests.callbacks import wait_until


def _answers(url: str) -> bool:
    try:
        return requests.get(f"{url}/healthz", timeout=1).status_code == 200
    except requests.RequestException:
        return False


def test_workers_die_with_the_main_process(serve_factory) -> None:  # type: ignore[no-untyped-def]
    served = serve_factory({}, "--no-checker")
    assert _answers(served.url)
    os.kill(served.proc.pid, signal.SIGKILL)  # the main process only, not its group
    served.proc.wait(timeout=10)
    wait_until(lambda: not _answers(served.url), timeout=30,
               what="the port to stop answering once serve's main process is gone")
