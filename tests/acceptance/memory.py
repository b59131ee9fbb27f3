"""A served process's memory, from /proc (Linux): its resident set and its peak."""

from __future__ import annotations

from pathlib import Path


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (Granian's workers and their helpers)."""
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            try:
                children = [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                continue
            found += children
            todo += children
    return found


def _status(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise LookupError(field)


def rss(pid: int) -> int:
    return _status(pid, "VmRSS")


def peak(pid: int) -> int:
    """The highest resident set since the last ``reset_peak``."""
    return _status(pid, "VmHWM")


def reset_peak(pid: int) -> None:
    """Linux 4.0+: the peak (VmHWM) starts again from the current resident set."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")
