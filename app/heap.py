"""The cyclic garbage collector, set for a process that serves requests.

CPython collects its youngest generation after every 700 net allocations of containers,
and every tenth of those collections the next, up to full passes over the whole heap.
A send of 100 messages allocates thousands of short-lived containers (its JSON, its
models, its rows), many of them alive across the awaits of the request that made them:
under load the collector ran many times per request, and its older passes walked the
long-lived heap built at startup (modules, SQLAlchemy's tables and caches, pydantic's
validators) again and again. perf put a quarter of a loaded web worker's CPU in it, all
of it holding the GIL that the writers' threads wait for (``docs/performance.md``).
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 10_000


def settle() -> None:
    """Once the app is built: what exists now is never scanned again (it lives as long as
    the process), and the youngest generation is collected every ``YOUNG_THRESHOLD``
    allocations instead of 700. The older generations keep their thresholds, so cycles
    of garbage are still found, a little later."""
    gc.collect()
    gc.freeze()
    _, middle, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, oldest)
