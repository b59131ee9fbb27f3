"""The one seam per database (app/storage/dialects.py): each database's object is found
from its engine or URL and answers every capability, and no other module of app, checker
or spark_outbox tells databases apart by name."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from sqlalchemy import create_engine
from sqlalchemy.engine import make_url

from app.storage import dialects
from app.storage.dialects import (
    POSTGRESQL,
    SQLITE,
    Dialect,
    UnknownDatabase,
    dialect_for_url,
    dialect_of,
)

ROOT = Path(__file__).resolve().parents[3]
SEAM = ROOT / "app" / "storage" / "dialects.py"
PACKAGES = ("app", "checker", "spark_outbox")

_DATABASE = r"""["'](?:postgres(?:ql)?|sqlite)["']"""
# every way this code base has told databases apart by name
_NAMING = re.compile(rf"""
    \bis_pg\(
  | \bdialect\.name\b
  | \bget_backend_name\(
  | \bget_driver_name\(
  | [=!]=\s*{_DATABASE}
  | {_DATABASE}\s*[=!]=
  | \bin\s*[(\[{{]\s*{_DATABASE}
  | \.startswith\(\s*["'](?:postgres|sqlite)
  | [=!]=\s*(?:POSTGRESQL|SQLITE)\b
  | \b(?:POSTGRESQL|SQLITE)\s*[=!]=
  | \bis\s+(?:not\s+)?(?:POSTGRESQL|SQLITE)\b
  | \bisinstance\(.*\b(?:PostgreSQL|SQLite)\b
""", re.VERBOSE)


def database_names(source: str) -> list[str]:
    """The lines of ``source`` that tell databases apart by name."""
    return [line.strip() for line in source.splitlines() if _NAMING.search(line)]


def test_no_module_but_the_seam_names_a_database() -> None:
    """A module asks ``dialect_of(...)`` for a capability; a branch on a database's name
    belongs in app/storage/dialects.py, as a capability named for what it does."""
    offenders = {str(path.relative_to(ROOT)): found
                 for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))
                 if path != SEAM and (found := database_names(path.read_text()))}
    assert offenders == {}


@pytest.mark.parametrize("line", [
    "    if is_pg(conn):",
    '    if conn.dialect.name == "postgresql":',
    '    stmt = A if engine.dialect.name != "sqlite" else B',
    '    if url.get_backend_name() == "sqlite":',
    '    if url.get_driver_name() in ("", "psycopg2"):',
    '    return dialect_name == "postgresql"',
    "    if 'sqlite' != kind:",
    '    if backend in ("postgresql", "postgres"):',
    '        return self.database_url.startswith("sqlite")',
    "    if source.kind == SQLITE:",
    "    if POSTGRESQL != backend:",
    "    if dialect_of(conn) is POSTGRESQL:",
    "    if dialect_of(conn) is not SQLITE:",
    "    if isinstance(dialect_of(conn), SQLite):",
])
def test_the_rule_finds_a_planted_name(line: str) -> None:
    assert database_names(f'"""A module."""\n\n\ndef f():\n{line}\n') == [line.strip()]


@pytest.mark.parametrize("line", [
    "    if dialect_of(conn).arrays:",
    "    return dialect_of(engine).one_statement_first_deliveries",
    '    """On PostgreSQL one statement; SQLite takes a statement per table."""',
    '    url = url.set(drivername="postgresql+psycopg")',
    "    return DRIVERS[self.kind]",
    '    raise IngestError(f"reads PostgreSQL or SQLite, not {exc.backend!r}")',
])
def test_the_rule_lets_capabilities_and_prose_pass(line: str) -> None:
    assert database_names(line) == []


def test_each_database_answers_every_capability() -> None:
    """A capability added to ``Dialect`` is answered by every database, not left to a
    default that one of them would get wrong silently."""
    flags = [name for name in Dialect.__annotations__ if name != "backend"]
    assert flags
    for dialect in (POSTGRESQL, SQLITE):
        unanswered = [f for f in flags if f not in type(dialect).__dict__]
        assert unanswered == [], type(dialect).__name__
    assert {f for f in flags if getattr(POSTGRESQL, f) != getattr(SQLITE, f)} == set(flags)


def test_the_dialect_is_found_from_the_engine_and_the_url() -> None:
    assert dialect_of(create_engine("sqlite://")) is SQLITE
    assert dialect_of(create_engine("postgresql+psycopg://u@h/d")) is POSTGRESQL
    assert dialect_for_url(make_url("sqlite:///var/txmsg.db")) is SQLITE
    assert dialect_for_url(make_url("postgresql://u@h/d")) is POSTGRESQL
    with pytest.raises(UnknownDatabase, match="'mysql'") as raised:
        dialect_for_url(make_url("mysql://u@h/d"))
    assert raised.value.backend == "mysql"


def test_postgresql_urls_take_psycopg_3_unless_they_name_another_driver() -> None:
    def driver(url: str) -> str:
        return dialect_for_url(make_url(url)).with_driver(make_url(url)).get_driver_name()

    assert driver("postgresql://u@h/d") == "psycopg"
    assert driver("postgresql+psycopg2://u@h/d") == "psycopg"
    assert driver("postgresql+asyncpg://u@h/d") == "asyncpg"
    assert driver("sqlite:///x.db") == "pysqlite"


def test_the_seam_is_the_module_the_rule_exempts() -> None:
    assert Path(dialects.__file__).resolve() == SEAM
