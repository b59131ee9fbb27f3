"""What the admin commands share: settings, the engine, refusals, tables and JSON.

Every import of the application happens inside a function, as in ``app.cli``: loading
a command module must not create metrics before ``serve`` has set up their directory.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from app.config import Settings

T = TypeVar("T")

JSON_HELP = "One JSON document on stdout, for scripts."


def load_settings() -> Settings:
    """The settings; a refused one is a line on stderr and exit status 2, not a traceback."""
    from pydantic import ValidationError

    from app.config import Settings

    try:
        return Settings()
    except ValidationError as exc:
        for error in exc.errors(include_url=False, include_input=False):
            name = "TXMSG_" + "_".join(str(p) for p in error["loc"]).upper()
            click.echo(f"txmsg: {name}: {error['msg']}", err=True)
        sys.exit(2)


def make_engine(settings: Settings | None = None) -> Engine:
    """An engine without a pool: a command opens a connection or two, then exits.

    An admin command never creates a store: a SQLite file that is not there (a command
    run from another directory, a mistyped URL) is one line naming its path and exit
    status 1, not an empty database made on the spot. ``migrate`` and ``serve`` create it.
    """
    from app.storage.db import make_engine as engine_for

    settings = settings or load_settings()
    missing = missing_sqlite_file(settings.database_url)
    if missing is not None:
        click.echo(f"txmsg: database_missing: no SQLite database at {missing} "
                   "(`txmsg migrate` creates it; TXMSG_DATABASE_URL names another)", err=True)
        sys.exit(1)
    return engine_for(settings, pool=False)


def missing_sqlite_file(database_url: str) -> Path | None:
    """The absolute path of the SQLite file ``database_url`` names if it does not exist;
    None for any other database (or an in-memory one, or a ``file:`` URI)."""
    from sqlalchemy.engine import make_url

    from app.storage.dialects import dialect_for_url

    url = make_url(database_url)
    return dialect_for_url(url).missing_file(url)


def or_exit(step: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``step(*args, **kwargs)``; a refusal (bad input, not found, a state change the
    rules forbid, database down) is one line on stderr, the problem's code and detail,
    and exit status 1."""
    from app.errors import ApiError

    try:
        return step(*args, **kwargs)
    except ApiError as exc:
        click.echo(f"txmsg: {exc.code}: {exc.detail}", err=True)
        sys.exit(1)


def dump_json(value: object) -> str:
    """``value`` as the API would answer it (same encoder: datetimes in RFC 3339)."""
    from app.api.http import dump_json as encode

    return encode(value).decode()


def cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, list | tuple):
        return ",".join(map(str, value)) or "-"
    if isinstance(value, Mapping):
        return ",".join(f"{k}={v}" for k, v in value.items()) or "-"
    return value.isoformat(timespec="seconds") if hasattr(value, "isoformat") else str(value)


def table(rows: Iterable[Mapping[str, Any]], columns: Sequence[str]) -> str:
    """Rows as aligned columns under a header line."""
    cells = [list(columns)] + [[cell(row.get(c)) for c in columns] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)).rstrip()
                     for line in cells)


def fields(record: Mapping[str, Any], names: Sequence[str]) -> str:
    """One record as ``name: value`` lines, names aligned."""
    width = max(map(len, names))
    return "\n".join(f"{n + ':':<{width + 1}} {cell(record.get(n))}" for n in names)
