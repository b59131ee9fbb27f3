"""The SDK installs on its own: a fresh venv gets requests (and werkzeug for the callback
extra), never the server or its dependencies."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

PROJECT = Path(__file__).resolve().parents[1]
SERVER_SIDE = ["app", "checker", "spark_outbox", "flask", "sqlalchemy", "pyspark", "granian",
               "psycopg", "alembic", "pydantic"]

PROBE = """
import importlib.util, json, sys
import txmsg_client
from txmsg_client import Consumer, Producer, Resolution, TxmsgError, message
try:
    from txmsg_client.callback import CheckerServer
    callback = "ok"
except ImportError as exc:
    callback = str(exc)
print(json.dumps({
    "file": txmsg_client.__file__,
    "callback": callback,
    "found": [n for n in sys.argv[1:] if importlib.util.find_spec(n) is not None],
}))
"""

SERVE_A_CHECK = """
import requests
from txmsg_client import Resolution
from txmsg_client.callback import CheckerServer

class Paid:
    def check(self, transaction):
        return Resolution.COMMIT

with CheckerServer(Paid()) as server:
    print(requests.post(server.url, json={"transaction_id": "t"}, timeout=10).json())
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # built from a copy: the build writes build/ and *.egg-info beside its sources
    source = tmp_path_factory.mktemp("source") / "python"
    shutil.copytree(PROJECT, source, ignore=shutil.ignore_patterns(
        "build", "*.egg-info", "__pycache__", "tests"))
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out),
                    str(source)], check=True, capture_output=True, text=True)
    [built] = out.glob("txmsg_client-*.whl")
    return built


def fresh_venv(where: Path, requirement: str) -> Path:
    """A venv of its own holding ``requirement`` and its dependencies, nothing else.

    The venv has no pip of its own (ensurepip costs seconds); this pip installs into it.
    """
    venv.create(where, with_pip=False)
    python = where / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
                    requirement], check=True, capture_output=True, text=True)
    return python


def run(python: Path, script: str, cwd: Path, *args: str) -> str:
    # outside the repository and with no PYTHONPATH, so only the venv's packages import
    done = subprocess.run([str(python), "-c", script, *args], cwd=cwd, env={"PATH": "/usr/bin"},
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_producer_installs_alone(wheel: Path, tmp_path: Path) -> None:
    python = fresh_venv(tmp_path / "venv", str(wheel))
    probe = json.loads(run(python, PROBE, tmp_path, *SERVER_SIDE, "werkzeug", "requests"))
    assert probe["file"].startswith(str(tmp_path / "venv"))
    assert probe["found"] == ["requests"]
    assert "pip install 'txmsg-client[callback]'" in probe["callback"]


def test_the_callback_extra_adds_werkzeug_only(wheel: Path, tmp_path: Path) -> None:
    python = fresh_venv(tmp_path / "venv", f"{wheel}[callback]")
    probe = json.loads(run(python, PROBE, tmp_path, *SERVER_SIDE, "werkzeug"))
    assert probe["callback"] == "ok"
    assert probe["found"] == ["werkzeug"]
    assert run(python, SERVE_A_CHECK, tmp_path).strip() == "{'resolution': 'COMMIT'}"
