"""The collector as a served worker sets it: tried in a process of its own, since freezing
the test process's heap would outlive the test."""

from __future__ import annotations

import os
import subprocess
import sys

from app.heap import YOUNG_THRESHOLD

_REPORT = "print(gc.get_threshold()[0], gc.get_freeze_count() > 0, flush=True); os._exit(0)"


def _run(code: str, **env: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", code], check=True,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env})
    return done.stdout.split()


def test_settle_freezes_the_startup_heap_and_collects_the_young_less_often() -> None:
    default, frozen = _run(f"import gc, os\nfrom app import heap\n{_REPORT}")
    assert frozen == "False" and default != str(YOUNG_THRESHOLD)  # importing changes nothing
    assert _run(f"import gc, os\nfrom app import heap\nheap.settle()\n{_REPORT}") == [
        str(YOUNG_THRESHOLD), "True"]


def test_the_entry_point_settles_the_heap_once_the_app_is_built(database_url: str) -> None:
    assert _run(f"import gc, os\nfrom app import web\nweb.asgi_from_env()\n{_REPORT}",
                TXMSG_DATABASE_URL=database_url) == [str(YOUNG_THRESHOLD), "True"]
