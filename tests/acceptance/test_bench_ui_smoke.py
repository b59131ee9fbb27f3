"""`python -m bench.phases.ui` on a small history: it generates consistent rows and loads every
dashboard page (the figures are the benchmark's; nothing here is about speed)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench.phases.ui import pages
from tests.databases import PG_ADMIN_URL

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.postgres
def test_the_dashboard_bench_loads_every_page(pg_database: str) -> None:
    # pg_database: PostgreSQL is reachable (else skipped, or failed in CI)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TXMSG_")}
    env["TXMSG_BENCH_PG_URL"] = PG_ADMIN_URL
    done = subprocess.run([sys.executable, "-m", "bench.phases.ui", "--transactions", "3000",
                           "--loads", "1"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=280, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "txn 3,000, half_message 30,000, message_log 28,500" in done.stdout
    for name, _ in pages(3000):
        assert re.search(rf"^{re.escape(name)} +[0-9.]+ +[0-9.]+$", done.stdout, re.MULTILINE), name
