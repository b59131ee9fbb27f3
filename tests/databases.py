"""Scratch databases for tests: a fresh PostgreSQL database per use, dropped afterwards.

In CI (CI=true) a PostgreSQL that cannot be reached fails the tests instead of skipping them.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from sqlalchemy import create_engine, text

PG_ADMIN_URL = os.environ.get("TXMSG_TEST_PG_URL",
                              "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def pg_url(dbname: str) -> str:
    return PG_ADMIN_URL.rsplit("/", 1)[0] + "/" + dbname


@contextmanager
def scratch_pg_database(prefix: str = "txmsg_test") -> Iterator[str]:
    """An empty PostgreSQL database of its own (its URL), dropped on exit."""
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    name = f"{prefix}_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    except Exception as exc:  # noqa: BLE001 - any failure to reach PostgreSQL
        admin.dispose()
        if IN_CI:
            pytest.fail(f"PostgreSQL unreachable in CI: {exc}")
        pytest.skip(f"PostgreSQL unreachable: {exc}")
    try:
        yield pg_url(name)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
