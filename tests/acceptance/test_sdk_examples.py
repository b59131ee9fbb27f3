"""The SDK's examples (clients/python/examples) run as written against a real ``txmsg
serve``: the check endpoint mounted in FastAPI (asyncio) and in Flask answers the service's
checks from the barrier."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.acceptance.conftest import Served, start_serve

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "clients" / "python" / "examples"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Served:
    where = tmp_path_factory.mktemp("examples")
    made = start_serve({"TXMSG_DATABASE_URL": f"sqlite:///{where / 'txmsg.db'}",
                        "TXMSG_TRANSACTION_TIMEOUT_SECONDS": "1",
                        "TXMSG_CHECK_INTERVAL_SECONDS": "0.5"}, where)
    yield made  # type: ignore[misc]
    made.stop()


@pytest.mark.parametrize("example", ["fastapi_orders.py", "flask_orders.py"])
def test_example_runs(served: Served, example: str, tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(EXAMPLES / example)], check=False,
                          capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env={"TXMSG_URL": served.url, "PATH": "/usr/bin"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["COMMITTED", "ROLLED_BACK", "COMMITTED"]
