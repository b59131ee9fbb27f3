"""Small API helpers shared by integration tests."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, event, func, select

from app.storage import checks, transactions
from app.storage.db import write_transaction
from app.storage.schema import metadata
from app.vocabulary import Op


def register(client: Any, group: str = "orders-svc",
             urls: tuple[str, ...] = ("http://127.0.0.1:9/check",)) -> None:
    r = client.put(f"/v1/producer-groups/{group}", json={"check_urls": list(urls)})
    assert r.status_code == 200, r.json


def send(client: Any, group: str = "orders-svc", **body: Any) -> Any:
    if "messages" not in body and "topic" not in body:
        body = {"topic": "orders", "body": "hello", **body}
    return client.post(f"/v1/producer-groups/{group}/transactions", json=body)


def finish(client: Any, txid: str, op: str, group: str = "orders-svc") -> Any:
    return client.post(f"/v1/producer-groups/{group}/transactions/{txid}/{op}")


@contextmanager
def statements_run(engine: Engine) -> Iterator[list[str]]:
    """The statements ``engine`` sends meanwhile, each a round trip (not SQLite's BEGIN,
    which its driver takes with the next statement)."""
    statements: list[str] = []

    def on_execute(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if not statement.startswith("BEGIN"):
            statements.append(statement)

    event.listen(engine, "before_cursor_execute", on_execute)
    try:
        yield statements
    finally:
        event.remove(engine, "before_cursor_execute", on_execute)


def row_counts(engine: Engine) -> dict[str, int]:
    with engine.connect() as conn:
        return {t.name: conn.execute(select(func.count()).select_from(t)).scalar_one()
                for t in metadata.sorted_tables}


class FakeClock:
    """A monotonic clock the test moves (``now``)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Txmsg:
    """The ``txmsg`` command on one database: in this process (``run``, click's runner) or
    as the installed console script in a child process (``script``)."""

    def __init__(self, database_url: str) -> None:
        self.database_url = database_url

    def run(self, *args: str, code: int = 0) -> Any:
        from click.testing import CliRunner

        from app.cli import main

        result = CliRunner(env={"TXMSG_DATABASE_URL": self.database_url}).invoke(main, args)
        assert result.exit_code == code, (result.output, result.exception)
        return result

    def script(self, *args: str, code: int = 0) -> subprocess.CompletedProcess[str]:
        script = Path(sys.executable).parent / "txmsg"
        env = {k: v for k, v in os.environ.items() if not k.startswith("TXMSG_")}
        done = subprocess.run([str(script), *args], capture_output=True, text=True, timeout=300,
                              env={**env, "TXMSG_DATABASE_URL": self.database_url}, check=False)
        assert done.returncode == code, (done.stdout, done.stderr)
        return done


def discard_after_one_check(app: Any, txid: str, group: str = "orders-svc") -> None:
    """What the checker does to a transaction nobody answers for: one check recorded,
    then the discard, through the same storage and lifecycle calls."""
    engine, lifecycle = app.extensions["txmsg"].engine, app.extensions["txmsg"].lifecycle
    now = datetime.now(UTC)
    with write_transaction(engine) as conn:
        row = transactions.get_txn(conn, group, txid)
        assert row is not None
        checks.take_leases(conn, "test-checker", {row.id: now + timedelta(seconds=60)})
        assert checks.record_check(conn, txn_id=row.id, owner="test-checker", check_times=1,
                                   result="TIMEOUT", url="http://127.0.0.1:9/check",
                                   detail="timed out", now=now, next_check_at=None)
    assert lifecycle.finish(group, txid, Op.DISCARD, source="check", check_times=1).applied
