"""PostgreSQL plans of the statements a piece of code runs, with the rows each node read.

Tests of plans drop a table's statistics (as a table written faster than autovacuum
analyzes it has none) and check that a statement still reads only its rows.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection, text


def drop_statistics(conn: Connection, *tables: str) -> None:
    for table in tables:
        conn.execute(text(f"DELETE FROM pg_statistic WHERE starelid = '{table}'::regclass"))


def committed_backlog(conn: Connection, topic: str, n: int) -> None:
    """``n`` committed messages of 100 bytes at offsets 0..n-1 of ``topic`` (one
    transaction), written in SQL, in tables left without statistics."""
    drop_statistics(conn, "message_log", "half_message", "txn")
    conn.execute(text(
        "INSERT INTO txn (producer_group, transaction_id, state, fingerprint,"
        " message_count, check_immunity_seconds, check_times, next_check_at,"
        " created_at, resolved_at)"
        " VALUES ('g', 't', 'COMMITTED', 'f', :n, 0, 0, now(), now(), now())"), {"n": n})
    conn.execute(text(
        "INSERT INTO half_message (message_id, txn_id, seq, topic, keys, properties,"
        " body, body_is_text, created_at)"
        " SELECT 'm' || i, (SELECT max(id) FROM txn), i, :t, '[]', '{}',"
        " convert_to(repeat('x', 100), 'UTF8'), true, now()"
        " FROM generate_series(0, :n - 1) AS i"), {"t": topic, "n": n})
    conn.execute(text(
        "INSERT INTO message_log (topic, queue_offset, half_message_id, committed_at)"
        " SELECT topic, seq, id, now() FROM half_message WHERE topic = :t"), {"t": topic})


def most_rows(node: dict[str, Any]) -> int:
    """The most rows any node of a plan produced (over all its loops)."""
    own = int(node["Actual Rows"]) * int(node.get("Actual Loops", 1))
    return max([own, *(most_rows(child) for child in node.get("Plans", []))])


def indexes_used(node: dict[str, Any]) -> set[str]:
    own = {node["Index Name"]} if "Index Name" in node else set()
    return own.union(*(indexes_used(child) for child in node.get("Plans", [])))


def tables_scanned_whole(node: dict[str, Any]) -> set[str]:
    own = {node["Relation Name"]} if node.get("Node Type") == "Seq Scan" else set()
    return own.union(*(tables_scanned_whole(child) for child in node.get("Plans", [])))


@contextmanager
def plans(conn: Connection) -> Iterator[list[tuple[str, dict[str, Any]]]]:
    """The plan of every statement run on ``conn`` meanwhile, with its text, as executed
    (``auto_explain`` with actual rows, sent to this session as notices); the code runs
    unchanged and gets its results."""
    found: list[tuple[str, dict[str, Any]]] = []
    raw = conn.connection.driver_connection

    def keep(diag: Any) -> None:
        message = diag.message_primary or ""
        if message.startswith("duration:") and "{" in message:
            plan = json.loads(message[message.index("{"):])
            found.append((plan["Query Text"], plan["Plan"]))

    conn.execute(text("LOAD 'auto_explain'"))
    for setting, value in (("log_min_duration", "0"), ("log_analyze", "on"),
                           ("log_format", "json"), ("log_level", "notice")):
        conn.execute(text(f"SET auto_explain.{setting} = {value}"))
    raw.add_notice_handler(keep)  # type: ignore[union-attr]
    try:
        yield found
    finally:
        raw.remove_notice_handler(keep)  # type: ignore[union-attr]
        conn.execute(text("SET auto_explain.log_min_duration = -1"))


def plans_of(found: list[tuple[str, dict[str, Any]]], starts: str) -> list[dict[str, Any]]:
    """The plans among ``found`` whose statement starts with ``starts`` (at least one)."""
    chosen = [p for q, p in found if q.lstrip().startswith(starts)]
    assert chosen, [q for q, _ in found]
    return chosen
