"""A private PostgreSQL cluster for fault tests (and the backup test,
tests/acceptance/test_backup_restore.py): ``initdb`` and ``pg_ctl`` run as the
``postgres`` user (PostgreSQL refuses to run as root), with its data in a temporary
directory and its own port on 127.0.0.1, so that a test may crash, stop and restart it
without touching the shared server.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from sqlalchemy import create_engine, text

from tests.conftest import free_port

PG_ROOT = Path("/usr/lib/postgresql")


def find_bindir() -> Path | None:
    """The newest installed PostgreSQL server's bin directory (Debian layout), else PATH's."""
    versions = sorted((p for p in PG_ROOT.glob("*/bin") if (p / "initdb").exists()),
                      key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0)
    if versions:
        return versions[-1]
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def unavailable_reason() -> str | None:
    """Why a private cluster cannot run here, or None when it can."""
    if find_bindir() is None:
        return "no PostgreSQL server binaries (initdb, pg_ctl)"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no postgres user to run PostgreSQL as"
    return None


class PgCluster:
    """One private cluster: ``crash()`` is an immediate stop (no shutdown checkpoint, crash
    recovery at the next ``start()``), as a killed server or a lost machine would do."""

    def __init__(self, bindir: Path, root: Path, port: int) -> None:
        self.bindir, self.root, self.port = bindir, root, port
        self.data = root / "data"
        self.log = root / "postgresql.log"
        self.running = False
        # added to the environment of its tools, and so of the server and its
        # archive_command and restore_command
        self.env: dict[str, str] = {}

    @classmethod
    def create(cls, prefix: str = "txmsg-faults-pg-", settings: str = "") -> PgCluster:
        """initdb a cluster (not started); ``settings`` are more postgresql.conf lines."""
        bindir = find_bindir()
        assert bindir is not None, unavailable_reason()
        # not under pytest's tmp_path: its parents are private to root
        root = Path(tempfile.mkdtemp(prefix=prefix))
        cluster = cls(bindir, root, free_port())
        try:
            chown_to_postgres(root)
            # --no-sync only skips flushing initdb's own files; the server runs with fsync on
            cluster._pg("initdb", "-D", str(cluster.data), "-U", "postgres", "-A", "trust",
                        "-E", "UTF8", "--no-sync")
            with (cluster.data / "postgresql.conf").open("a") as conf:
                conf.write(f"port = {cluster.port}\n"
                           "listen_addresses = '127.0.0.1'\n"
                           f"unix_socket_directories = '{root}'\n"
                           "fsync = on\nsynchronous_commit = on\nfull_page_writes = on\n"
                           "max_connections = 200\n" + settings)
        except BaseException:
            shutil.rmtree(root, ignore_errors=True)
            raise
        return cluster

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{dbname}"

    def start(self) -> None:
        """Start (after a crash: recover) and wait until it accepts connections."""
        self._pg("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "120",
                 "start")
        self.running = True

    def stop(self) -> None:
        """``pg_ctl -m fast stop``: a clean shutdown, as ``systemctl stop`` does."""
        self._pg("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "-t", "120", "stop")
        self.running = False

    def crash(self) -> None:
        """``pg_ctl -m immediate stop``: every backend dies at once, nothing is flushed."""
        self._pg("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        self.running = False

    def create_database(self, name: str) -> str:
        admin = create_engine(self.url(), isolation_level="AUTOCOMMIT")
        try:
            with admin.connect() as conn:
                conn.execute(text(f'CREATE DATABASE "{name}"'))
        finally:
            admin.dispose()
        return self.url(name)

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def destroy(self) -> None:
        """Stop it if it runs and remove its files; safe to call after any failure."""
        if (self.data / "postmaster.pid").exists():
            subprocess.run(as_postgres(str(self.bindir / "pg_ctl"), "-D", str(self.data),
                                       "-m", "immediate", "-w", "stop"),
                           check=False, capture_output=True, timeout=60)
        self.running = False
        shutil.rmtree(self.root, ignore_errors=True)

    def _pg(self, tool: str, *args: str) -> None:
        self.run(str(self.bindir / tool), *args)

    def run(self, *command: str) -> str:
        """Run a command as the ``postgres`` user with the cluster's environment; its
        output, or an AssertionError with it and the server log's tail."""
        tool, args = Path(command[0]).name, command[1:]
        started = time.monotonic()
        done = subprocess.run(as_postgres(*command), env={**os.environ, **self.env},
                              check=False, capture_output=True, text=True, timeout=180)
        if done.returncode != 0:
            raise AssertionError(
                f"{tool} {' '.join(args)} failed ({done.returncode}) after "
                f"{time.monotonic() - started:.1f} s: {done.stdout}{done.stderr}\n"
                f"server log:\n{self.log_tail()}")
        return done.stdout


def as_postgres(*command: str) -> list[str]:
    """The command as the ``postgres`` user when this runs as root (PostgreSQL refuses to
    run as root), else as it is."""
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 \
        else list(command)


def chown_to_postgres(path: Path) -> None:
    if os.geteuid() == 0:
        entry = pwd.getpwnam("postgres")
        os.chown(path, entry.pw_uid, entry.pw_gid)
