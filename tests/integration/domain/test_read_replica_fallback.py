"""TXMSG_READ_DATABASE_URL's replica as seen from outside, on both stores: a message lookup
it misses (it lags) is looked up on the primary before answering 404, and with the replica
unreachable (a port that accepts and never answers; on SQLite a file that cannot be
opened) reads go to the primary while /readyz stays 200 and says so (#37)."""

from __future__ import annotations

import shutil
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from app.config import Settings
from app.storage.db import upgrade_to_head
from app.web import create_app
from tests.conftest import make_settings
from tests.databases import scratch_pg_database
from tests.front_client import front
from tests.integration.helpers import finish, register, send


@pytest.fixture(scope="session")
def pg_replica() -> Iterator[str]:
    """A second migrated PostgreSQL database: a replica that has replayed nothing yet."""
    with scratch_pg_database("txmsg_replica") as url:
        upgrade_to_head(Settings(database_url=url))
        yield url


@pytest.fixture
def lagging_replica(database_url: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if make_url(database_url).get_backend_name() == "postgresql":
        return str(request.getfixturevalue("pg_replica"))
    path = tmp_path / "replica.db"
    shutil.copy(request.getfixturevalue("sqlite_template"), path)
    return f"sqlite:///{path}"


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A loopback port whose connections are accepted (by the kernel) and never answered."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield listener.getsockname()[1]


@pytest.fixture
def unreachable_replica(database_url: str, request: pytest.FixtureRequest,
                        tmp_path: Path) -> str:
    if make_url(database_url).get_backend_name() == "postgresql":
        port = request.getfixturevalue("silent_port")
        return f"postgresql+psycopg://postgres@127.0.0.1:{port}/txmsg"
    return f"sqlite:///{tmp_path}"  # a directory: the file cannot be opened


def served_with(database_url: str, replica: str) -> Any:
    return create_app(make_settings(database_url, read_database_url=replica))


def committed(client: Any) -> dict[str, Any]:
    register(client)
    sent = send(client, topic="orders", body="hello")
    assert sent.status_code == 201, sent.json
    done = finish(client, sent.json["transaction_id"], "commit")
    assert done.status_code == 200, done.json
    return dict(done.json["messages"][0])


def test_a_lookup_the_replica_misses_is_looked_up_on_the_primary(
        database_url: str, lagging_replica: str) -> None:
    app = served_with(database_url, lagging_replica)
    try:
        client = front(app)
        message = committed(client)
        # the replica has not replayed it: offset reads may lag behind...
        assert client.get("/v1/topics/orders/messages").json["messages"] == []
        # ...but a lookup by id never answers 404 for a message the primary has
        r = client.get(f"/v1/messages/{message['message_id']}")
        assert r.status_code == 200, r.json
        assert (r.json["offset"], r.json["state"]) == (message["offset"], "COMMITTED")
        r = client.get("/v1/messages/0123456789ABCDEF0123456789ABCDEF")
        assert (r.status_code, r.json["code"]) == (404, "message_not_found")
        assert client.get("/readyz").json["read_replica"] == "reachable"
    finally:
        app.extensions["txmsg"].close()


def test_with_the_replica_unreachable_reads_go_to_the_primary(
        database_url: str, unreachable_replica: str) -> None:
    app = served_with(database_url, unreachable_replica)
    try:
        client = front(app)
        message = committed(client)
        for _ in range(2):  # the first finds the replica down, the next skips it
            page = client.get("/v1/topics/orders/messages")
            assert page.status_code == 200, page.json
            assert [m["message_id"] for m in page.json["messages"]] == [message["message_id"]]
            r = client.get(f"/v1/messages/{message['message_id']}")
            assert r.status_code == 200, r.json
        ready = client.get("/readyz")
        assert ready.status_code == 200, ready.json
        assert ready.json["status"] == "ready"
        assert ready.json["read_replica"] == "unreachable"
    finally:
        app.extensions["txmsg"].close()


def test_without_a_replica_readyz_says_nothing_of_one(client: Any) -> None:
    assert "read_replica" not in client.get("/readyz").json
