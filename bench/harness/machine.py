"""What the figures were measured on: cores, memory, CPU model, PostgreSQL and Python."""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

import psycopg


def describe(database_url: str) -> dict[str, Any]:
    return {
        "cores": os.cpu_count(),
        "ram_bytes": _meminfo_total(),
        "cpu_model": _cpu_model(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "postgresql": _pg_version(database_url),
        "load_average_at_start": load_average(),
    }


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages: how busy the machine was beside a figure (on
    2 cores shared with other work, a figure means little without it)."""
    return [round(v, 2) for v in os.getloadavg()]


def _meminfo_total() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _pg_version(database_url: str) -> dict[str, Any]:
    settings = ("synchronous_commit", "fsync", "wal_sync_method", "shared_buffers",
                "max_connections", "commit_delay")
    with psycopg.connect(database_url) as conn:
        version = conn.execute("SELECT version()").fetchone()[0]
        rows = conn.execute("SELECT name, setting, unit FROM pg_settings WHERE name = ANY(%s)",
                            [list(settings)]).fetchall()
    return {"version": version,
            "settings": {n: f"{s}{u or ''}" if u and u not in ("8kB",) else s
                         for n, s, u in rows}}
