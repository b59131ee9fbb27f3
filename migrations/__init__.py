"""Alembic migration history of txmsg (one history for PostgreSQL and SQLite)."""
