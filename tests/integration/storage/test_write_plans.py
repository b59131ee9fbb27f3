"""PostgreSQL: a batch of commits reaches its rows by index, however the tables grew.

The writers keep their connection, so psycopg prepares their statements and PostgreSQL
may settle on one generic plan. Made while ``txn`` was nearly empty, such a plan scans the
whole table and keeps doing so as it grows, until an ANALYZE replans it: in the
benchmark a batch of commits went from 0.7 to 8 ms at 28k transactions. The test warms
the statements on a tiny table, grows it by 20k rows behind the planner's back, and
counts the sequential scans of ``txn`` in the next batch's own transaction.
"""

from __future__ import annotations

from sqlalchemy import Connection, text

from app.domain.clock import utcnow
from app.domain.lifecycle import FinishCmd, SendCmd, apply_finishes, apply_sends
from app.domain.messages import parse_transaction
from app.domain.names import new_message_id
from app.storage import groups
from app.storage.db import make_engine
from app.vocabulary import Op
from tests.conftest import make_settings

GROUP = "plans"


def _round(sender: Connection, finisher: Connection, ids: list[str]) -> int:
    """Send and commit ``ids``; the sequential scans of txn the commits' transaction made."""
    cmds = []
    for txid in ids:
        request = parse_transaction({"transaction_id": txid, "topic": "orders", "body": "x"},
                                    max_body_bytes=1024)
        # its rows not encoded ahead: the writer builds them (``encoded`` None)
        cmds.append(SendCmd(GROUP, request, txid, request.fingerprint(), 60,
                            [new_message_id()]))
    assert all(r.created for r in apply_sends(sender, cmds))  # type: ignore[union-attr]
    # the backend's counts not yet reported (this transaction's and maybe earlier ones')
    scans = text("SELECT seq_scan FROM pg_stat_xact_user_tables WHERE relname = 'txn'")
    with finisher.begin():
        before = finisher.execute(scans).scalar_one()
        results = apply_finishes(finisher, [FinishCmd(GROUP, t, Op.COMMIT) for t in ids])
        assert all(r.applied for r in results)  # type: ignore[union-attr]
        return finisher.execute(scans).scalar_one() - before


def test_commits_use_the_index_after_the_table_grew(postgres_url: str) -> None:
    engine = make_engine(make_settings(postgres_url))
    try:
        with engine.begin() as conn:
            groups.upsert(conn, GROUP, ["http://127.0.0.1:9/check"], 1000, utcnow())
        with engine.connect() as sender, engine.connect() as finisher:
            sender = sender.execution_options(isolation_level="AUTOCOMMIT")
            for n in range(12):  # past psycopg's prepare threshold and PostgreSQL's 5 custom plans
                _round(sender, finisher, [f"warm-{n}-{i}" for i in range(3)])
            with engine.begin() as conn:
                conn.execute(text(
                    "INSERT INTO txn (producer_group, transaction_id, state, fingerprint,"
                    " message_count, check_immunity_seconds, check_times, next_check_at,"
                    " created_at, resolved_at)"
                    " SELECT :g, 'bulk-' || i, 'COMMITTED', 'f', 0, 0, 0, now(), now(), now()"
                    " FROM generate_series(1, 20000) AS i"), {"g": GROUP})
            assert _round(sender, finisher, ["after-1", "after-2", "after-3"]) == 0
    finally:
        engine.dispose()
