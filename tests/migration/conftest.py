"""Empty databases on each store, and Alembic driven the way the `alembic` command drives it:
the repository's alembic.ini, the URL from TXMSG_DATABASE_URL (read by migrations/env.py)."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from alembic.config import Config

from app.storage.db import head_revision
from tests.databases import scratch_pg_database

ROOT = Path(__file__).resolve().parents[2]
ALEMBIC_INI = ROOT / "alembic.ini"
MIGRATIONS = ROOT / "migrations"


@pytest.fixture(params=["sqlite", "postgres"])
def new_database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], str]]:
    """Makes empty databases (their URLs) on one store, dropped after the test."""
    with ExitStack() as stack:
        def make() -> str:
            if request.param == "postgres":
                return stack.enter_context(scratch_pg_database("txmsg_migration"))
            return f"sqlite:///{tmp_path / uuid.uuid4().hex[:8]}.db"

        yield make


@pytest.fixture
def database_url(new_database: Callable[[], str]) -> str:
    """An empty database, not migrated."""
    return new_database()


@pytest.fixture
def alembic_config(database_url: str, monkeypatch: pytest.MonkeyPatch) -> Config:
    monkeypatch.setenv("TXMSG_DATABASE_URL", database_url)
    return Config(str(ALEMBIC_INI))


@pytest.fixture
def scripts_with(alembic_config: Config, tmp_path: Path) -> Callable[..., Config]:
    """The same config over a copy of migrations/ with extra revisions after head.

    Each extra revision is (revision id, upgrade body), one after the other; the body is
    Python run inside ``upgrade()`` with ``op`` and ``sa`` in scope.
    """
    def make(*revisions: tuple[str, str]) -> Config:
        scripts = tmp_path / "migrations"
        shutil.copytree(MIGRATIONS, scripts, ignore=shutil.ignore_patterns("__pycache__"))
        down = head_revision()
        for rev, body in revisions:
            (scripts / "versions" / f"{rev}_extra.py").write_text(
                "import sqlalchemy as sa\nfrom alembic import op\n\n"
                f"revision = {rev!r}\ndown_revision = {down!r}\n"
                "branch_labels = None\ndepends_on = None\n\n\n"
                "def upgrade() -> None:\n"
                + "".join(f"    {line}\n" for line in body.strip().splitlines())
                + "\n\ndef downgrade() -> None:\n    pass\n")
            down = rev
        config = Config(str(ALEMBIC_INI))
        config.set_main_option("script_location", str(scripts))
        return config

    return make

