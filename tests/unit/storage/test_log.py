"""A committed message as read (``app.storage.log.as_read_columns``): one list of its
columns, which the Core query selects and the text SQL of PostgreSQL's one-statement
receive spells from it, never from a copy."""

from __future__ import annotations

import re
from pathlib import Path

from app.storage import log
from app.storage import subscription_leases as leases

ROOT = Path(__file__).resolve().parents[3]
# a column of a message as read, written out over an alias in SQL text
_WRITTEN_OUT = re.compile(r"\bh\.(?:body_is_text|created_at|tag)\b|"
                          r"coalesce\(\s*m\.(?:properties|message_id)", re.IGNORECASE)


def test_the_columns_as_read_are_listed_once() -> None:
    found = {str(path.relative_to(ROOT)): hits
             for path in sorted((ROOT / "app" / "storage").rglob("*.py"))
             if (hits := [line.strip() for line in path.read_text().splitlines()
                          if _WRITTEN_OUT.search(line)])}
    assert found == {}


def test_the_text_receive_selects_them() -> None:
    assert [c.name for c in log.as_read(log.BODY).selected_columns] == [
        *log.AS_READ_NAMES, "body"]
    sql = str(leases._FIRST_DELIVERIES)
    assert log.AS_READ_SQL in sql
    assert ", ".join(f"p.{name}" for name in log.AS_READ_NAMES) in sql
