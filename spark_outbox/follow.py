"""``txmsg ingest --follow``: incremental runs one after another, until SIGTERM (or SIGINT).

Each run is a whole ``job.ingest`` (exact through a kill at any moment, as a single run is),
in the one SparkSession the process started; a signal lets the run in progress finish and
ends the loop. Runs start every ``interval`` seconds (at once when one took longer).
Nothing is kept from one run to the next but the counters ``Followed`` reports.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@dataclass
class Followed:
    runs: int = 0
    rows: int = 0
    gaps: int = 0  # ranges of offsets retention deleted before a run read them


def follow(run: Callable[[], tuple[int, int]], interval: float,
           stopping: threading.Event | None = None) -> Followed:
    """Call ``run`` (which returns the rows it wrote and the gaps it found) every
    ``interval`` seconds until a stop signal or ``stopping`` is set."""
    stopping = stopping or threading.Event()
    done = Followed()

    def stop(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    previous = {s: signal.signal(s, stop) for s in STOP_SIGNALS}
    try:
        while not stopping.is_set():
            started = time.monotonic()
            rows, gaps = run()
            done.runs += 1
            done.rows += rows
            done.gaps += gaps
            stopping.wait(max(0.0, interval - (time.monotonic() - started)))
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    return done
