"""A private PgBouncer in transaction pooling mode, in front of the test PostgreSQL.

Debian's ``pgbouncer`` (scripts/ensure-system-deps.sh); its system service is not used:
each ``private_pgbouncer`` writes its own ini and userlist, listens on a free loopback
port, and is stopped (killed if need be) on exit, whatever happened.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from tests.conftest import free_port
from tests.databases import IN_CI, PG_ADMIN_URL

PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
_START_SECONDS = 15


@contextmanager
def private_pgbouncer(workdir: Path) -> Iterator[int]:
    """A pgbouncer (pool_mode=transaction, auth_type=trust) for every database of the test
    PostgreSQL, on 127.0.0.1 and the port this yields."""
    if not os.access(PGBOUNCER, os.X_OK):
        if IN_CI:
            pytest.fail("pgbouncer is not installed (scripts/ensure-system-deps.sh)")
        pytest.skip("pgbouncer is not installed (scripts/ensure-system-deps.sh)")
    server = make_url(PG_ADMIN_URL)
    user = server.username or "postgres"
    port = free_port()
    workdir.mkdir(parents=True, exist_ok=True)
    userlist = workdir / "userlist.txt"
    userlist.write_text(f'"{user}" ""\n')
    ini = workdir / "pgbouncer.ini"
    ini.write_text(f"""[databases]
* = host={server.host or '127.0.0.1'} port={server.port or 5432}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {userlist}
pool_mode = transaction
max_client_conn = 200
default_pool_size = 20
server_check_delay = 0
""")
    # pgbouncer will not run as root; -u drops to the server's own system user
    as_user = ["-u", "postgres"] if os.geteuid() == 0 else []
    if as_user:
        shutil.chown(workdir, "postgres")
        for path in (userlist, ini):
            shutil.chown(path, "postgres")
    log = workdir / "pgbouncer.log"
    with log.open("ab") as out:
        proc = subprocess.Popen([PGBOUNCER, *as_user, str(ini)], stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _wait_listening(proc, port, log)
        yield port
    finally:
        if proc.poll() is None:
            proc.terminate()  # SIGTERM: pgbouncer exits at once
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


def _wait_listening(proc: subprocess.Popen, port: int, log: Path) -> None:
    deadline = time.monotonic() + _START_SECONDS
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"pgbouncer exited: {log.read_text()}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"pgbouncer did not listen on {port}: {log.read_text()}")


def through(port: int, url: str) -> str:
    """``url`` (a test database) by way of the pgbouncer on ``port``."""
    return make_url(url).set(host="127.0.0.1", port=port).render_as_string(
        hide_password=False)
