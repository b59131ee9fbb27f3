"""The signing-secrets revision on data written before it, on each store: every registered
group gets its own secret, and no stored callback URL keeps user info."""

from __future__ import annotations

import json

from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine, text

from app.domain.signing import secret_key

REVISION = "0004_signing_secrets"


def test_existing_groups_get_secrets_and_lose_user_info(alembic_config: Config,
                                                        database_url: str) -> None:
    command.upgrade(alembic_config, f"{REVISION}-1")
    engine = create_engine(database_url)
    now = "2026-01-01 00:00:00"
    with engine.begin() as conn:
        for name, urls in (("shop", ["http://alice:pw@10.0.0.5:8000/check",
                                     "http://10.0.0.6:8000/check"]),
                           ("plain", ["https://producer.test/check"])):
            conn.execute(text("INSERT INTO producer_group VALUES (:n, :u, 3000, :t, :t)"),
                         {"n": name, "u": json.dumps(urls), "t": now})
        for i, check_url in enumerate(("https://bob@h.test:9/c?x=a@b", None, "http://h/c")):
            conn.execute(text(
                "INSERT INTO txn (producer_group, transaction_id, state, fingerprint, "
                "message_count, check_url, check_immunity_seconds, check_times, "
                "next_check_at, created_at) VALUES ('shop', :tid, 'PREPARED', 'f', 1, :u, 0, "
                "0, :t, :t)"), {"tid": f"t-{i}", "u": check_url, "t": now})

    command.upgrade(alembic_config, REVISION)
    with engine.connect() as conn:
        secrets = dict(conn.execute(text(
            "SELECT producer_group, secret FROM signing_secret")).all())
        urls = dict(conn.execute(text("SELECT name, check_urls FROM producer_group")).all())
        check_urls = [r[0] for r in conn.execute(
            text("SELECT check_url FROM txn ORDER BY transaction_id"))]
    engine.dispose()
    assert set(secrets) == {"shop", "plain"} and secrets["shop"] != secrets["plain"]
    assert all(s.startswith("whsec_") and len(secret_key(s)) == 32 for s in secrets.values())
    assert json.loads(urls["shop"]) == ["http://10.0.0.5:8000/check",
                                        "http://10.0.0.6:8000/check"]
    assert json.loads(urls["plain"]) == ["https://producer.test/check"]
    assert check_urls == ["https://h.test:9/c?x=a@b", None, "http://h/c"]
