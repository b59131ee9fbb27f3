"""The admin commands never create a store: on a SQLite file that is not there (the
default ``var/txmsg.db`` run from another directory, a mistyped path), one line naming
the path and exit status 1; ``migrate`` is what creates it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

TXMSG = str(Path(sys.executable).parent / "txmsg")

ADMIN_COMMANDS = [
    ["tokens", "list"],
    ["tokens", "create", "--name", "ci", "--scope", "admin"],
    ["topics", "list"],
    ["topics", "retention", "orders", "3600"],
    ["transactions", "list"],
    ["transactions", "show", "shop", "t-1"],
    ["subscriptions", "list"],
]


def txmsg(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("TXMSG_")}
    return subprocess.run([TXMSG, *args], cwd=cwd, env={**base, **env}, capture_output=True,
                          text=True, timeout=120, check=False)


@pytest.mark.parametrize("args", ADMIN_COMMANDS, ids=" ".join)
def test_the_default_store_is_not_created_from_another_directory(tmp_path: Path,
                                                                 args: list[str]) -> None:
    done = txmsg(args, tmp_path, {})
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert done.stdout == ""
    assert done.stderr.splitlines() == [done.stderr.strip()]
    assert str(tmp_path / "var" / "txmsg.db") in done.stderr
    assert "database_unavailable" not in done.stderr
    assert list(tmp_path.iterdir()) == []  # no var/, no empty database


def test_a_mistyped_path_is_named_and_migrate_creates_it(tmp_path: Path) -> None:
    path = tmp_path / "data" / "txmsg.db"
    env = {"TXMSG_DATABASE_URL": f"sqlite:///{path}"}
    done = txmsg(["topics", "list"], tmp_path, env)
    assert done.returncode == 1
    assert done.stderr.strip() == (f"txmsg: database_missing: no SQLite database at {path} "
                                   "(`txmsg migrate` creates it; TXMSG_DATABASE_URL names "
                                   "another)")
    assert not path.parent.exists()

    assert txmsg(["migrate"], tmp_path, env).returncode == 0
    listed = txmsg(["topics", "list"], tmp_path, env)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.split() == ["topic", "first_offset", "next_offset",
                                     "retention_seconds"]
