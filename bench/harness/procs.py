"""Memory of a process tree, read from /proc (no extra dependency)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any, Self


def tree(pid: int) -> list[int]:
    """``pid`` and all its descendants."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def _kib(path: Path, field: str) -> int:
    try:
        for line in path.read_text().splitlines():
            if line.startswith(field):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def memory(pid: int) -> dict[str, int]:
    """RSS and PSS (proportional: shared pages split between processes) of the tree, bytes."""
    pids = tree(pid)
    rss = sum(_kib(Path(f"/proc/{p}/status"), "VmRSS:") for p in pids)
    pss = sum(_kib(Path(f"/proc/{p}/smaps_rollup"), "Pss:") for p in pids)
    return {"rss": rss * 1024, "pss": pss * 1024, "processes": len(pids)}


class Sampler:
    """Samples a process tree's memory every ``interval`` seconds in a background thread."""

    def __init__(self, pid: int, interval: float = 1.0) -> None:
        self.pid, self.interval = pid, interval
        self.samples: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="rss-sampler")
        self._t0 = time.monotonic()

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append({"t": round(time.monotonic() - self._t0, 2), **memory(self.pid)})
            self._stop.wait(self.interval)


def summarise(samples: list[dict[str, Any]], key: str = "rss") -> dict[str, Any]:
    """Baseline (median of the first tenth), min, max and the largest deviation from baseline."""
    values = [s[key] for s in samples if s[key]]
    if not values:
        return {"samples": 0}
    head = sorted(values[: max(1, len(values) // 10)])
    baseline = head[len(head) // 2]
    deviation = max(abs(v - baseline) for v in values) / baseline
    return {"samples": len(values), "baseline": baseline, "min": min(values), "max": max(values),
            "last": values[-1], "max_deviation": round(deviation, 4)}


_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU time of these processes (threads included), in seconds."""
    total = 0
    for p in pids:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / _TICK


def postgres_pids(database: str | None = None) -> list[int]:
    """PostgreSQL's processes; with ``database``, only its backends and the shared ones
    (WAL writer, checkpointer...), not other databases' (other tests may run meanwhile)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "comm").read_text().strip() not in ("postgres", "postmaster"):
                continue
            title = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        words = title.split()
        client = "(" in title or "[local]" in title
        if database is None or database in words or (not client and "worker" not in title):
            out.append(int(entry.name))
    return out


class CpuProbe:
    """CPU used by the service's process tree, PostgreSQL and this process (the clients)."""

    def __init__(self, service_pid: int | None, database: str | None = None) -> None:
        self.service_pid, self.database = service_pid, database

    def __call__(self) -> dict[str, float]:
        snap = {"clients": cpu_seconds([os.getpid()]),
                "postgres": cpu_seconds(postgres_pids(self.database)),
                "machine": _machine_busy()}
        if self.service_pid is not None:
            snap["service"] = cpu_seconds(tree(self.service_pid))
        return snap


def _machine_busy() -> float:
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    values = [int(v) for v in fields]
    idle = values[3] + values[4]  # idle + iowait
    return (sum(values[:8]) - idle) / _TICK
