"""Rows the revision tests write at an older revision, in SQL those revisions know."""

from __future__ import annotations

from sqlalchemy import Connection, text

NOW = "2026-01-01 00:00:00"


def insert_subscription(conn: Connection, *, ack_cursor: int, read_offset: int) -> None:
    """Subscription 1, ``s`` on topic ``t``, with the default settings."""
    conn.execute(text(
        "INSERT INTO subscription (id, topic, name, ack_timeout_ms, max_redeliveries,"
        " backoff_min_ms, backoff_max_ms, dead_letter_topic, ack_cursor, read_offset,"
        " created_at, updated_at) VALUES (1, 't', 's', 30000, 16, 1000, 60000, 't-s-DLQ',"
        " :cursor, :read, :t, :t)"), {"cursor": ack_cursor, "read": read_offset, "t": NOW})
