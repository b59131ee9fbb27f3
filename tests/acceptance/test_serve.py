"""`txmsg serve` and `txmsg migrate` as a user runs them: real processes, real sockets."""

from __future__ import annotations

from pathlib import Path

import pytest
import requests
from sqlalchemy import create_engine, text

from app.storage.db import head_revision
from tests.acceptance.conftest import run_txmsg


@pytest.mark.parametrize("interface", [None, "wsgi"])
def test_serve_on_the_embedded_default(serve_factory, tmp_path: Path,  # type: ignore[no-untyped-def]
                                       interface: str | None) -> None:
    """No configuration: SQLite at var/txmsg.db, migrated on start, full lifecycle on the
    ASGI front; the retired TXMSG_WEB_INTERFACE is ignored with a warning."""
    served = serve_factory({"TXMSG_WEB_INTERFACE": interface} if interface else {},
                           "--no-checker")
    warned = "TXMSG_WEB_INTERFACE is ignored" in served.log.read_text()
    assert warned is (interface is not None)
    assert (tmp_path / "var" / "txmsg.db").exists()
    url = served.url
    s = requests.Session()
    assert s.put(f"{url}/v1/producer-groups/shop",
                 json={"check_urls": ["http://127.0.0.1:9/c"]}).status_code == 200
    sent = s.post(f"{url}/v1/producer-groups/shop/transactions",
                  json={"topic": "orders", "body": "one"}).json()
    gone = s.post(f"{url}/v1/producer-groups/shop/transactions",
                  json={"topic": "orders", "body": "two"}).json()
    assert s.post(f"{url}/v1/producer-groups/shop/transactions/{sent['transaction_id']}"
                  "/commit").json()["state"] == "COMMITTED"
    assert s.post(f"{url}/v1/producer-groups/shop/transactions/{gone['transaction_id']}"
                  "/rollback").json()["state"] == "ROLLED_BACK"
    page = s.get(f"{url}/v1/topics/orders/messages").json()
    assert [m["body"] for m in page["messages"]] == ["one"]
    metrics = s.get(f"{url}/metrics").text
    assert "txmsg_commit_messages_total 1.0" in metrics
    assert "txmsg_rollback_messages_total 1.0" in metrics
    r = s.get(f"{url}/no/such/route")
    assert r.status_code == 404 and r.headers["Content-Type"] == "application/problem+json"
    assert s.get(f"{url}/openapi.json").json()["openapi"].startswith("3.")


def test_serve_on_postgres(serve_factory, postgres_url: str) -> None:  # type: ignore[no-untyped-def]
    served = serve_factory({"TXMSG_DATABASE_URL": postgres_url}, "--no-checker")
    s = requests.Session()
    url = served.url
    s.put(f"{url}/v1/producer-groups/shop", json={"check_urls": ["http://127.0.0.1:9/c"]})
    body = {"transaction_id": "t-1", "messages": [{"topic": "a", "body": "x"},
                                                  {"topic": "b", "body_base64": "AAE="}]}
    assert s.post(f"{url}/v1/producer-groups/shop/transactions", json=body).status_code == 201
    assert s.post(f"{url}/v1/producer-groups/shop/transactions", json=body).status_code == 200
    committed = s.post(f"{url}/v1/producer-groups/shop/transactions/t-1/commit").json()
    assert [(m["topic"], m["offset"]) for m in committed["messages"]] == [("a", 0), ("b", 0)]
    assert s.get(f"{url}/v1/topics/b/messages").json()["messages"][0]["body_base64"] == "AAE="


def test_migrate_is_repeatable_and_readyz_follows_the_schema(serve_factory, postgres_url: str,
                                                             tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    env = {"TXMSG_DATABASE_URL": postgres_url}
    for _ in range(2):
        done = run_txmsg(["migrate"], env, tmp_path)
        assert done.returncode == 0, done.stderr
    served = serve_factory(env, "--no-checker", "--no-migrate")
    assert requests.get(f"{served.url}/readyz").status_code == 200
    engine = create_engine(postgres_url)
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '0000behind'"))
    try:
        r = requests.get(f"{served.url}/readyz")
        assert r.status_code == 503 and r.json()["code"] == "schema_not_at_head"
        assert r.headers["Content-Type"] == "application/problem+json"
    finally:
        with engine.begin() as conn:
            conn.execute(text("UPDATE alembic_version SET version_num = :v"),
                         {"v": head_revision()})
        engine.dispose()
