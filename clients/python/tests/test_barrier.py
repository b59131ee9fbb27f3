"""The barrier on the producer's own database (SQLite, PostgreSQL, MySQL): what a check
answers in each state of the local transaction."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest

sqlalchemy = pytest.importorskip("sqlalchemy")

from conftest import scratch_database, wait_until
from sqlalchemy import event, inspect, text
from sqlalchemy.dialects import mysql, postgresql, sqlite
from sqlalchemy.schema import CreateIndex, CreateTable
from txmsg_client import Resolution
from txmsg_client import _barrier_sql as sql
from txmsg_client.barrier import Barrier, RolledBackByCheck

GROUP = "orders"


def check(barrier: Barrier, txid: str) -> Resolution:
    return barrier.checker.check({"producer_group": GROUP, "transaction_id": txid})


def reasons(barrier: Barrier) -> dict[str, str]:
    with barrier.engine.connect() as conn:
        rows = conn.execute(sqlalchemy.select(barrier.table.c.transaction_id,
                                              barrier.table.c.reason)).all()
    return dict(rows)  # type: ignore[arg-type]


@pytest.fixture
def barrier(engine: Any) -> Barrier:
    made = Barrier(engine, wait_seconds=1.0)
    made.create_table()
    return made


def test_create_table_is_idempotent_and_table_is_for_alembic(engine: Any) -> None:
    metadata = sqlalchemy.MetaData()
    barrier = Barrier(engine, metadata=metadata)
    assert metadata.tables["txmsg_barrier"] is barrier.table
    barrier.create_table()
    barrier.create_table()
    assert "txmsg_barrier" in inspect(engine).get_table_names()


def test_a_committed_local_transaction_is_committed(barrier: Barrier) -> None:
    with barrier.begin(GROUP, "t1") as conn:
        conn.execute(text("SELECT 1"))
    assert check(barrier, "t1") is Resolution.COMMIT
    assert check(barrier, "t1") is Resolution.COMMIT  # a second check, the same answer
    assert reasons(barrier) == {"t1": "commit"}


def test_a_rolled_back_local_transaction_is_rolled_back_for_good(barrier: Barrier) -> None:
    with pytest.raises(ZeroDivisionError), barrier.begin(GROUP, "t2"):
        raise ZeroDivisionError
    assert check(barrier, "t2") is Resolution.ROLLBACK
    assert reasons(barrier) == {"t2": "rollback"}
    with pytest.raises(RolledBackByCheck), barrier.begin(GROUP, "t2"):
        pytest.fail("the block of a transaction the check rolled back must not run")
    assert check(barrier, "t2") is Resolution.ROLLBACK


def test_a_check_before_the_local_transaction_wins(barrier: Barrier) -> None:
    assert check(barrier, "t3") is Resolution.ROLLBACK
    with pytest.raises(RolledBackByCheck), barrier.begin(GROUP, "t3"):
        pass
    assert reasons(barrier) == {"t3": "rollback"}


def test_groups_have_their_own_transaction_ids(barrier: Barrier) -> None:
    with barrier.begin("other-group", "t4"):
        pass
    assert check(barrier, "t4") is Resolution.ROLLBACK
    assert barrier.checker.check({"producer_group": "other-group",
                                  "transaction_id": "t4"}) is Resolution.COMMIT


def lock_waiters(engine: Any) -> int:
    """Statements of this database waiting on a lock (PostgreSQL, MySQL)."""
    query = {"postgresql": "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = "
                           "'Lock' AND datname = current_database()",
             "mysql": "SELECT count(*) FROM information_schema.innodb_trx "
                      "WHERE trx_state = 'LOCK WAIT'"}[engine.dialect.name]
    with engine.connect() as conn:
        return int(conn.execute(text(query)).scalar_one())


@pytest.mark.parametrize("outcome", ["commit", "rollback"])
def test_a_check_waits_for_the_open_local_transaction(engine: Any, outcome: str) -> None:
    barrier = Barrier(engine, wait_seconds=30)  # the wait ends with the local transaction
    barrier.create_table()
    asking = threading.Event()

    @event.listens_for(engine, "before_cursor_execute")
    def _marker(conn: Any, cursor: Any, statement: str, params: Any, *rest: Any) -> None:
        if "rollback" in repr(params):
            asking.set()

    answers: list[Resolution] = []
    local = barrier.begin(GROUP, "t5")
    local.__enter__()
    checking = threading.Thread(target=lambda: answers.append(check(barrier, "t5")))
    checking.start()
    wait_until(asking.is_set, what="the check's insert")
    if engine.dialect.name != "sqlite":
        wait_until(lambda: lock_waiters(engine) == 1, what="the check to wait on the key")
    assert checking.is_alive() and answers == []
    if outcome == "commit":
        local.__exit__(None, None, None)
    else:
        local.__exit__(ZeroDivisionError, ZeroDivisionError(), None)
    checking.join(timeout=30)
    assert answers == [Resolution.COMMIT if outcome == "commit" else Resolution.ROLLBACK]


def test_a_check_answers_unknown_past_its_wait(barrier: Barrier) -> None:
    """The local transaction still open after ``wait_seconds``: asked again later."""
    barrier.wait_seconds = 0.2
    with barrier.begin(GROUP, "t6"):
        assert check(barrier, "t6") is Resolution.UNKNOWN
    assert check(barrier, "t6") is Resolution.COMMIT


def test_cleanup_deletes_old_rows_only(barrier: Barrier) -> None:
    with barrier.begin(GROUP, "old"):
        pass
    with barrier.engine.begin() as conn:
        conn.execute(barrier.table.update().values(
            created_at=sql.now() - timedelta(days=8)))
    with barrier.begin(GROUP, "new"):
        pass
    assert check(barrier, "rolled-back") is Resolution.ROLLBACK
    assert barrier.cleanup(timedelta(days=7)) == 1
    assert reasons(barrier) == {"new": "commit", "rolled-back": "rollback"}


def test_the_barrier_refuses_other_databases() -> None:
    class Other:
        name = "oracle"

    class FakeEngine:
        dialect = Other()

    with pytest.raises(ValueError, match="postgresql, sqlite, mysql, mariadb"):
        Barrier(FakeEngine())  # type: ignore[arg-type]


@pytest.mark.parametrize("dialect", [postgresql.dialect(), sqlite.dialect(), mysql.dialect()],
                         ids=["postgresql", "sqlite", "mysql"])
def test_every_statement_compiles(dialect: Any) -> None:
    """Each dialect's SQL, whether or not its server is at hand."""
    table = sql.barrier_table()
    insert_marker = str(sql.insert_rollback_if_absent(dialect, table, GROUP, "t").compile(
        dialect=dialect))
    expected = {"postgresql": "ON CONFLICT DO NOTHING", "sqlite": "ON CONFLICT DO NOTHING",
                "mysql": "INSERT IGNORE INTO"}[dialect.name]
    assert expected in insert_marker
    for statement in (sql.insert_barrier(table, GROUP, "t"), sql.select_reason(table, GROUP, "t"),
                      sql.delete_older_than(table, sql.now()),
                      sql.wait_bound(dialect, 1.5), CreateTable(table),
                      *(CreateIndex(i) for i in table.indexes)):
        assert str(statement.compile(dialect=dialect))
    assert str(sql.wait_bound(dialect, 1.5)) == {
        "postgresql": "SET LOCAL lock_timeout = 1500",
        "sqlite": "PRAGMA busy_timeout = 1500",
        "mysql": "SET SESSION innodb_lock_wait_timeout = 2"}[dialect.name]
    assert "VARCHAR(128)" in str(CreateTable(table).compile(dialect=dialect))


@pytest.mark.parametrize(("committed", "other"), [("order-x", "ORDER-x"), ("café", "cafe"),
                                                  ("cafe", "café")])
def test_keys_compare_byte_for_byte(barrier: Barrier, committed: str, other: str) -> None:
    """MySQL's default collations would find ``order-x``'s row for ``ORDER-x``: a check of
    a transaction with no local work answering COMMIT."""
    with barrier.begin(GROUP, committed):
        pass
    assert check(barrier, other) is Resolution.ROLLBACK
    assert check(barrier, committed) is Resolution.COMMIT
    with pytest.raises(RolledBackByCheck), barrier.begin(GROUP, other):
        pass
    assert reasons(barrier) == {committed: "commit", other: "rollback"}


def test_create_table_makes_an_earlier_tables_keys_binary(tmp_path: Any) -> None:
    """A table made by an earlier SDK on MySQL (the server's default collation) is altered
    by ``create_table``; its rows stay. (MySQL's and MariaDB's alone: the others' keys
    always compared byte for byte.)"""
    with scratch_database("mysql", tmp_path) as url:
        engine = sqlalchemy.create_engine(url)
        try:
            _convert_an_earlier_table(engine)
        finally:
            engine.dispose()


def _convert_an_earlier_table(engine: Any) -> None:
    with engine.begin() as conn:
        conn.execute(text(
            "CREATE TABLE txmsg_barrier (producer_group VARCHAR(127) NOT NULL, "
            "transaction_id VARCHAR(128) NOT NULL, reason VARCHAR(8) NOT NULL, "
            "created_at DATETIME NOT NULL, PRIMARY KEY (producer_group, transaction_id)) "
            "CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci"))
        conn.execute(text("INSERT INTO txmsg_barrier VALUES ('orders', 'order-x', 'commit', "
                          "NOW())"))
    barrier = Barrier(engine, wait_seconds=1.0)
    barrier.create_table()
    with engine.connect() as conn:
        collations = dict(conn.execute(sql.key_collations(barrier.table)).all())
    assert collations["producer_group"] == collations["transaction_id"] == "utf8mb4_bin"
    assert check(barrier, "ORDER-x") is Resolution.ROLLBACK
    assert check(barrier, "order-x") is Resolution.COMMIT
