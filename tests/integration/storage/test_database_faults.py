"""Database faults answer 503 ``database_unavailable``, never 500 or a hang.

A ping that masks a lost connection, a read-only database, a stalled network (a proxy
that stops forwarding without closing), a writer stuck in a batch, an exhausted pool: each
answers 503 problem+json within a bound, and the service serves again once the database
does, without a restart.
"""

from __future__ import annotations

import os
import select
import socket
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import orjson
import psycopg
import pytest
from sqlalchemy import create_engine, event, text
from sqlalchemy.engine import make_url

from app.api.asgi import Api
from app.errors import DatabaseUnavailable
from app.storage import writer as writer_module
from app.storage.db import make_engine
from app.storage.writer import GroupCommitWriter
from app.web import create_app
from tests.asgi_client import AsgiClient, Reply
from tests.conftest import make_settings
from tests.databases import PG_ADMIN_URL

GROUP = "/v1/producer-groups/g"
SEND = f"{GROUP}/transactions"


class Service:
    """The API as ``txmsg serve`` runs it (the ASGI front), driven in this process."""

    def __init__(self, **settings: Any) -> None:
        self.app = create_app(make_settings(**settings))
        self.engine = self.app.extensions["txmsg"].engine
        self.asgi = AsgiClient(Api(self.app))

    def call(self, method: str, path: str, body: Any = None) -> Reply:
        raw = b"" if body is None else orjson.dumps(body)
        return self.asgi.request(method, path, body=raw,
                                 headers=[("content-length", str(len(raw)))])

    def register(self) -> Reply:
        return self.call("PUT", GROUP, {"check_urls": ["http://127.0.0.1:9/check"]})

    def send(self, tid: str) -> Reply:
        return self.call("POST", SEND, {"transaction_id": tid, "topic": "t", "body": tid})

    def finish(self, tid: str, op: str = "commit") -> Reply:
        return self.call("POST", f"{SEND}/{tid}/{op}")

    def close(self) -> None:
        self.asgi.close()
        self.app.extensions["txmsg"].close()


@pytest.fixture
def service_factory() -> Iterator[Any]:
    made: list[Service] = []

    def make(**settings: Any) -> Service:
        made.append(Service(**settings))
        return made[-1]

    yield make
    for service in made:
        service.close()


def assert_unavailable(reply: Reply) -> None:
    assert reply.status == 503, reply.body
    assert reply.headers["content-type"] == "application/problem+json"
    assert orjson.loads(reply.body)["code"] == "database_unavailable"


# --- 1. a pre-ping that masks the lost connection -------------------------------------

class _DiesMidPing:
    """A raw psycopg connection as the pool's pre-ping met it in the field: the server's
    FATAL answer to the ping arrived before the end of its stream, so the ping failed while
    the connection still looked open, in transaction status ACTIVE; the dialect's
    ``finally`` then resets autocommit, and psycopg refuses with a ProgrammingError
    that hides the disconnect."""

    def __init__(self, conn: psycopg.Connection) -> None:
        object.__setattr__(self, "_conn", conn)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._conn, name, value)

    def cursor(self) -> Any:
        conn = self._conn

        class Cursor:
            def execute(self, _sql: str) -> None:
                conn.pgconn.send_query(b"SELECT pg_sleep(1)")  # a statement still running
                raise psycopg.errors.AdminShutdown(
                    "terminating connection due to administrator command")

            def close(self) -> None:
                pass

        return Cursor()


def _pings_die(engine: Any, monkeypatch: pytest.MonkeyPatch, times: int) -> list[int]:
    """The next ``times`` pre-pings fail as in the field; returns the count of those done."""
    dialect = engine.dialect
    real = dialect.do_ping
    done = [0]

    def do_ping(conn: psycopg.Connection) -> bool:
        if done[0] >= times:
            return real(conn)
        done[0] += 1
        return real(_DiesMidPing(conn))

    monkeypatch.setattr(dialect, "do_ping", do_ping)
    return done


def test_a_ping_that_masks_a_lost_connection_is_a_disconnect(
        postgres_url: str, service_factory: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pool drops the connection and takes a fresh one: the request goes through."""
    monkeypatch.setattr(writer_module, "_KEEP_IDLE_SECONDS", 0.0)  # every batch checks out
    service = service_factory(database_url=postgres_url)
    assert service.register().status == 200  # leaves a pooled connection for the writer
    opened: list[object] = []
    event.listen(service.engine, "connect", lambda conn, _record: opened.append(conn))
    pings = _pings_die(service.engine, monkeypatch, times=1)

    assert service.send("a").status == 201
    assert pings[0] == 1
    assert len(opened) == 1  # the pinged connection was replaced
    assert service.finish("a").status == 200


def test_a_masked_lost_connection_answers_503_while_the_database_is_gone(
        postgres_url: str, service_factory: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """If no fresh connection can be had either, 503; the next request, once the database
    is back, succeeds on a fresh connection."""
    monkeypatch.setattr(writer_module, "_KEEP_IDLE_SECONDS", 0.0)
    service = service_factory(database_url=postgres_url)
    assert service.register().status == 200
    assert service.send("a").status == 201  # the send writer keeps that connection
    assert service.call("GET", f"{SEND}/a").status == 200  # leaves one for the finish writer
    down = threading.Event()

    @event.listens_for(service.engine, "do_connect")
    def _refuse(*_args: Any) -> None:
        if down.is_set():
            raise psycopg.OperationalError("connection refused")

    down.set()
    pings = _pings_die(service.engine, monkeypatch, times=1)
    assert_unavailable(service.finish("a"))
    assert pings[0] == 1
    down.clear()
    assert service.finish("a").status == 200


# --- 2. a read-only database -----------------------------------------------------------

def _terminate_sessions(admin: Any, dbname: str) -> None:
    """Drop the service's sessions (as a failover does): new ones see the new defaults."""
    with admin.connect() as conn:
        conn.execute(text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                          "WHERE datname = :db AND pid <> pg_backend_pid()"), {"db": dbname})


def test_a_read_only_postgresql_answers_503_and_is_not_ready(
        postgres_url: str, service_factory: Any) -> None:
    service = service_factory(database_url=postgres_url)
    assert service.register().status == 200
    for tid in ("c", "r"):
        assert service.send(tid).status == 201
    dbname = make_url(postgres_url).database
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'ALTER DATABASE "{dbname}" SET default_transaction_read_only = on'))
        _terminate_sessions(admin, dbname)

        assert_unavailable(service.call("GET", "/readyz"))
        assert_unavailable(service.send("n"))
        assert_unavailable(service.finish("c", "commit"))
        assert_unavailable(service.finish("r", "rollback"))
        assert_unavailable(service.register())
        # reads still work on a read-only database
        assert orjson.loads(service.call("GET", f"{SEND}/c").body)["state"] == "PREPARED"
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'ALTER DATABASE "{dbname}" RESET default_transaction_read_only'))
        _terminate_sessions(admin, dbname)
        admin.dispose()

    assert service.call("GET", "/readyz").status == 200
    assert service.send("n").status == 201
    assert service.finish("c", "commit").status == 200
    assert service.finish("r", "rollback").status == 200
    assert service.register().status == 200


def test_a_read_only_sqlite_file_answers_503(sqlite_url: str, service_factory: Any) -> None:
    path = make_url(sqlite_url).database
    writable = service_factory(database_url=sqlite_url)
    assert writable.register().status == 200
    assert writable.send("c").status == 201
    read_only = service_factory(database_url=f"sqlite:///file:{path}?mode=ro&uri=true")

    assert_unavailable(read_only.send("n"))
    assert_unavailable(read_only.finish("c"))
    assert_unavailable(read_only.register())
    assert orjson.loads(read_only.call("GET", f"{SEND}/c").body)["state"] == "PREPARED"
    assert writable.finish("c").status == 200


# --- 3. a stalled network and a stuck writer -------------------------------------------

class StallableProxy:
    """A TCP proxy to PostgreSQL that can stop forwarding without closing anything, as a
    partition looks from the client (what it sent is acknowledged, nothing comes back)."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self._upstream = upstream
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._flowing = threading.Event()
        self._flowing.set()
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def stall(self) -> None:
        self._flowing.clear()

    def resume(self) -> None:
        self._flowing.set()

    def close(self) -> None:
        self._listener.close()
        for s in self._sockets:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self._upstream)
            self._sockets += [client, server]
            for src, dst in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                self._flowing.wait()
                if not select.select([src], [], [], 0.05)[0] or not self._flowing.is_set():
                    continue  # stalled: what arrives stays in the kernel's buffers
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except (OSError, ValueError):  # closed under it
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


def test_a_stalled_network_answers_503_within_the_deadline_and_recovers(
        postgres_url: str, service_factory: Any) -> None:
    url = make_url(postgres_url)
    proxy = StallableProxy((url.host or "127.0.0.1", url.port or 5432))
    timeout = 1.0
    service = service_factory(
        database_url=url.set(host="127.0.0.1", port=proxy.port).render_as_string(False),
        db_write_timeout_seconds=timeout, db_connect_timeout_seconds=1)
    try:
        assert service.register().status == 200
        assert service.send("before").status == 201
        proxy.stall()
        with ThreadPoolExecutor(2) as pool:
            sending = pool.submit(service.send, "during")
            committing = pool.submit(service.finish, "before")
            # it returned: the bound is generous, what matters is that it does not hang
            assert_unavailable(sending.result(timeout=3 * timeout))
            assert_unavailable(committing.result(timeout=3 * timeout))
        proxy.resume()
        # the writers serve again once the database answers (a retried send: 200 or 201)
        assert service.send("during").status in (200, 201)
        assert service.finish("during").status == 200
        assert service.finish("before").status == 200
        assert service.send("after").status == 201
        page = orjson.loads(service.call("GET", "/v1/topics/t/messages").body)
        assert [m["transaction_id"] for m in page["messages"]] in (
            ["during", "before"], ["before", "during"])
    finally:
        proxy.resume()
        proxy.close()


def test_a_stuck_writer_answers_503_to_its_batch_and_its_queue_then_recovers(
        database_url: str) -> None:
    """The writer's deadline on each store: a batch that does not come back in time is
    answered 503, and so is every request queued behind it; the writer serves again as
    soon as the batch returns."""
    engine = make_engine(make_settings(database_url))
    release = threading.Event()
    entered = threading.Event()

    def apply(conn: Any, items: list[str]) -> list[str]:
        conn.execute(text("SELECT 1"))
        if "stuck" in items:
            entered.set()
            release.wait(30)
        return [f"wrote {i}" for i in items]

    timeout = 0.5
    writer: GroupCommitWriter[str] = GroupCommitWriter(engine, apply, timeout=timeout)
    try:
        with ThreadPoolExecutor(4) as pool:
            stuck = pool.submit(writer.submit, "stuck")
            assert entered.wait(10)
            queued = [pool.submit(writer.submit, f"q{i}") for i in range(3)]
            for waiting in [stuck, *queued]:
                with pytest.raises(DatabaseUnavailable):
                    waiting.result(timeout=3 * timeout)
        release.set()
        assert writer.submit("next") == "wrote next"
    finally:
        release.set()
        writer.close()
        engine.dispose()


def test_an_exhausted_pool_answers_503(postgres_url: str, service_factory: Any) -> None:
    service = service_factory(database_url=postgres_url, db_pool_size=1, db_max_overflow=0,
                              db_pool_timeout_seconds=0.2)
    assert service.register().status == 200
    with service.engine.connect():  # the only connection, held
        assert_unavailable(service.call("GET", f"{SEND}/x"))
        assert_unavailable(service.call("GET", "/v1/producer-groups/g"))
    assert service.call("GET", "/v1/producer-groups/g").status == 200



def test_postgresql_sockets_carry_the_network_bounds(postgres_url: str) -> None:
    """What ends a real partition: the kernel's own timeouts on each connection's socket."""
    engine = make_engine(make_settings(postgres_url, db_tcp_user_timeout_ms=7000,
                                       db_keepalives_idle_seconds=9))
    try:
        raw = engine.raw_connection()
        try:
            sock = socket.socket(fileno=os.dup(raw.driver_connection.pgconn.socket))
            with sock:
                assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == 7000
                assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
                assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 9
        finally:
            raw.close()
    finally:
        engine.dispose()
