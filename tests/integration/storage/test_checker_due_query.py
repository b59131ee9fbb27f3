"""The due query's cost does not grow with resolved history: both planners use the
partial index ``ix_txn_due`` (only PREPARED rows) for the checker's claim."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Engine, event, insert, text

from app.storage import checks
from app.storage.db import make_engine, write_transaction
from app.storage.schema import txn
from tests.conftest import make_settings

RESOLVED = 20_000


def _fill(engine: Engine, now: datetime) -> None:
    base = {"producer_group": "shop", "fingerprint": "f", "message_count": 1,
            "check_immunity_seconds": 0, "check_times": 0, "created_at": now}
    rows = [{**base, "transaction_id": f"old-{i}", "state": "COMMITTED" if i % 2 else
             "ROLLED_BACK", "next_check_at": now - timedelta(hours=1)} for i in range(RESOLVED)]
    rows += [{**base, "transaction_id": f"due-{i}", "state": "PREPARED",
              "next_check_at": now - timedelta(seconds=10 - i)} for i in range(3)]
    rows += [{**base, "transaction_id": "later", "state": "PREPARED",
              "next_check_at": now + timedelta(hours=1)}]
    with engine.begin() as conn:
        conn.execute(insert(txn), rows)
        conn.execute(text("ANALYZE"))


def _captured(engine: Engine, run: Any) -> list[tuple[str, Any]]:
    seen: list[tuple[str, Any]] = []

    def listener(conn, cursor, statement, parameters, context, executemany):  # type: ignore[no-untyped-def]
        if statement.lstrip().upper().startswith("SELECT"):
            seen.append((statement, parameters))

    event.listen(engine, "before_cursor_execute", listener)
    try:
        run()
    finally:
        event.remove(engine, "before_cursor_execute", listener)
    return seen


def _plan(engine: Engine, statement: str, parameters: Any) -> str:
    explain = "EXPLAIN QUERY PLAN " if engine.dialect.name == "sqlite" else "EXPLAIN "
    with engine.connect() as conn:
        rows = conn.exec_driver_sql(explain + statement, parameters).all()
    return "\n".join(" ".join(str(c) for c in r) for r in rows)


def test_claim_uses_the_partial_index_and_skips_resolved_history(database_url: str) -> None:
    engine = make_engine(make_settings(database_url))
    now = datetime.now(UTC)
    _fill(engine, now)
    claimed: list[Any] = []

    def claim() -> None:
        with engine.connect() as conn:
            assert checks.any_due(conn, now)
        with write_transaction(engine) as conn:
            claimed.extend(checks.lock_due(conn, now, 2))

    statements = _captured(engine, claim)
    assert [r.transaction_id for r in claimed] == ["due-0", "due-1"]  # oldest due first
    assert len(statements) == 2
    for statement, parameters in statements:
        plan = _plan(engine, statement, parameters)
        assert "ix_txn_due" in plan, plan
    engine.dispose()
