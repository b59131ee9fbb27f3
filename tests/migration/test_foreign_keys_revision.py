"""The revision that drops the transaction tables' foreign keys, on each store: gone at
head, back after a downgrade, data and views kept through both, and the foreign key it
leaves (``subscription_offset``'s) still there."""

from __future__ import annotations

from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine, inspect, text

from app.config import Settings
from app.storage.db import make_engine

REVISION = "0007_hot_path_no_foreign_keys"
DROPPED = {
    ("half_message", "fk_half_message_txn_id_txn", ("txn_id",), "txn"),
    ("op_log", "fk_op_log_txn_id_txn", ("txn_id",), "txn"),
    ("check_log", "fk_check_log_txn_id_txn", ("txn_id",), "txn"),
    ("message_log", "fk_message_log_half_message_id_half_message", ("half_message_id",),
     "half_message"),
}
KEPT = ("subscription_offset", "fk_subscription_offset_subscription_id_subscription",
        ("subscription_id",), "subscription")
INDEXES = {"half_message": "ix_half_message_txn_id_seq", "op_log": "ix_op_log_txn_id",
           "check_log": "ix_check_log_txn_id",
           "message_log": "ix_message_log_half_message_id"}
NOW = "2026-01-01 00:00:00"


def _foreign_keys(url: str) -> set[tuple[str, str | None, tuple[str, ...], str]]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            found = inspect(conn)
            return {(table, fk["name"], tuple(fk["constrained_columns"]), fk["referred_table"])
                    for table in (*INDEXES, KEPT[0])
                    for fk in found.get_foreign_keys(table)}
    finally:
        engine.dispose()


def _indexes(url: str) -> dict[str, set[str | None]]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            found = inspect(conn)
            return {t: {i["name"] for i in found.get_indexes(t)} for t in INDEXES}
    finally:
        engine.dispose()


def _committed_messages(url: str) -> list[tuple[object, ...]]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return [tuple(r) for r in conn.execute(text(
                "SELECT topic, queue_offset, message_id, transaction_id, body"
                " FROM committed_messages ORDER BY queue_offset"))]
    finally:
        engine.dispose()


def _write_a_committed_transaction(url: str) -> None:
    """Rows as 0006 has them: a transaction with a committed message, op and check."""
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO producer_group VALUES ('shop', '[]', 3000, :t, :t)"),
                     {"t": NOW})
        conn.execute(text(
            "INSERT INTO txn (id, producer_group, transaction_id, state, fingerprint,"
            " message_count, check_immunity_seconds, check_times, next_check_at, created_at,"
            " resolved_at) VALUES (1, 'shop', 'tx-1', 'COMMITTED', 'f', 1, 0, 1, :t, :t, :t)"),
            {"t": NOW})
        conn.execute(text(
            "INSERT INTO half_message (id, message_id, txn_id, seq, topic, keys, properties,"
            " body, body_is_text, created_at) VALUES (1, 'M1', 1, 0, 'orders', '[]', '{}',"
            " :body, true, :t)"), {"t": NOW, "body": b"hello"})
        conn.execute(text("INSERT INTO op_log (txn_id, op, source, check_times, created_at)"
                          " VALUES (1, 'COMMIT', 'api', 1, :t)"), {"t": NOW})
        conn.execute(text("INSERT INTO check_log (txn_id, check_times, result, created_at)"
                          " VALUES (1, 1, 'UNKNOWN', :t)"), {"t": NOW})
        conn.execute(text("INSERT INTO topic_offset VALUES ('orders', 1)"))
        conn.execute(text("INSERT INTO message_log (topic, queue_offset, half_message_id,"
                          " committed_at) VALUES ('orders', 0, 1, :t)"), {"t": NOW})
    engine.dispose()


def test_the_foreign_keys_go_at_head_and_come_back_on_downgrade(alembic_config: Config,
                                                                database_url: str) -> None:
    command.upgrade(alembic_config, f"{REVISION}-1")
    assert _foreign_keys(database_url) == DROPPED | {KEPT}
    _write_a_committed_transaction(database_url)
    before = _committed_messages(database_url)
    assert before == [("orders", 0, "M1", "tx-1", "hello")]

    command.upgrade(alembic_config, REVISION)
    assert _foreign_keys(database_url) == {KEPT}
    assert _committed_messages(database_url) == before
    assert all(INDEXES[t] in names for t, names in _indexes(database_url).items())

    command.downgrade(alembic_config, f"{REVISION}-1")
    assert _foreign_keys(database_url) == DROPPED | {KEPT}
    assert _committed_messages(database_url) == before
    assert all(INDEXES[t] in names for t, names in _indexes(database_url).items())


def test_without_them_a_row_may_name_a_missing_parent(alembic_config: Config,
                                                      database_url: str) -> None:
    """What the storage layer now answers for alone: the database accepts an orphan."""
    command.upgrade(alembic_config, REVISION)
    engine = make_engine(Settings(database_url=database_url))  # SQLite: foreign_keys=ON
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO op_log (txn_id, op, source, check_times, created_at)"
                          " VALUES (404, 'COMMIT', 'api', 0, :t)"), {"t": NOW})
        count = conn.execute(text("SELECT count(*) FROM op_log")).scalar_one()
    engine.dispose()
    assert count == 1
