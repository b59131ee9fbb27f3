"""`txmsg tokens create|list|revoke` on both stores: the same rules as /v1/tokens, a
readable table or --json, and a token made here works against the API."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from app.cli import main
from app.domain.tokens import CACHE_SECONDS, TokenGuard
from app.web import create_app
from tests.conftest import make_settings
from tests.front_client import front
from tests.integration.helpers import FakeClock, Txmsg

ADMIN_TOKEN = "cli-test-admin-token-0123456789"


@pytest.fixture
def txmsg(database_url: str, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("TXMSG_DATABASE_URL", database_url)
    runner = CliRunner()

    def run(*args: str, code: int = 0):  # type: ignore[no-untyped-def]
        result = runner.invoke(main, ["tokens", *args])
        assert result.exit_code == code, (result.output, result.exception)
        return result

    return run


def test_create_list_revoke(txmsg, database_url: str) -> None:  # type: ignore[no-untyped-def]
    made = json.loads(txmsg("create", "--name", "orders prod", "--scope", "produce:orders-svc",
                            "--scope", "consume:orders", "--json").output)
    assert made["scopes"] == ["produce:orders-svc", "consume:orders"]
    table = txmsg("create", "--name", "reader", "--scope", "consume:*").output.splitlines()
    assert table[0].split() == ["token_id", "name", "scopes", "created_at"]
    assert table[-1].startswith("token (shown this once, store it now): txmsg_")
    listed = json.loads(txmsg("list", "--json").output)
    assert [t["name"] for t in listed] == ["orders prod", "reader"]
    assert "token" not in listed[0] and made["token"] not in txmsg("list").output
    rows = txmsg("list").output.splitlines()
    assert len(rows) == 3 and made["token_id"] in rows[1]
    assert "produce:orders-svc,consume:orders" in rows[1]

    settings = make_settings(database_url, admin_token=ADMIN_TOKEN)
    app = create_app(settings)
    try:
        state, clock = app.extensions["txmsg"], FakeClock()
        state.guard = TokenGuard(state.engine, settings.admin_token, clock=clock)
        client = front(app)
        auth = {"Authorization": f"Bearer {made['token']}"}
        assert client.get("/v1/topics/orders/messages", headers=auth).status_code == 200
        assert txmsg("revoke", made["token_id"]).output.strip() == f"revoked {made['token_id']}"
        clock.now += CACHE_SECONDS  # the server's cache entry expires
        assert client.get("/v1/topics/orders/messages", headers=auth).status_code == 401
    finally:
        app.extensions["txmsg"].close()
    assert [t["name"] for t in json.loads(txmsg("list", "--json").output)] == ["reader"]


@pytest.mark.parametrize(("args", "code"), [
    (("create", "--name", "", "--scope", "admin"), "invalid_token_name"),
    (("create", "--name", "n", "--scope", "read:orders"), "invalid_scope"),
    (("create", "--name", "n" * 201, "--scope", "admin"), "invalid_token_name"),
    (("revoke", "nope"), "invalid_token_id"),
    (("revoke", "0123456789abcdef"), "token_not_found"),
])
def test_refusals_are_one_line_and_write_nothing(txmsg, args: tuple[str, ...],  # type: ignore[no-untyped-def]
                                                 code: str) -> None:
    result = txmsg(*args, code=1)
    assert result.output.startswith(f"txmsg: {code}: ") and result.output.count("\n") == 1
    assert json.loads(txmsg("list", "--json").output) == []


def test_the_console_script(database_url: str) -> None:
    script = Txmsg(database_url)
    made = json.loads(script.script("tokens", "create", "--name", "ops", "--scope", "admin",
                                    "--json").stdout)
    assert set(made) == {"token_id", "name", "scopes", "created_at", "token"}
    listed = json.loads(script.script("tokens", "list", "--json").stdout)
    assert [(t["token_id"], t["scopes"]) for t in listed] == [(made["token_id"], ["admin"])]
    assert script.script("tokens", "revoke", made["token_id"]).stdout == \
        f"revoked {made['token_id']}\n"
    gone = script.script("tokens", "revoke", made["token_id"], code=1)
    assert gone.stderr.startswith("txmsg: token_not_found: ")


def test_a_metrics_token_made_here_scrapes_metrics_and_nothing_else(  # type: ignore[no-untyped-def]
        txmsg, database_url: str) -> None:
    made = json.loads(txmsg("create", "--name", "prometheus", "--scope", "metrics",
                            "--json").output)
    assert made["scopes"] == ["metrics"]
    app = create_app(make_settings(database_url, admin_token=ADMIN_TOKEN))
    try:
        client = front(app)
        auth = {"Authorization": f"Bearer {made['token']}"}
        assert client.get("/metrics", headers=auth).status_code == 200
        assert client.get("/metrics").status_code == 401
        assert client.get("/v1/topics/orders/messages", headers=auth).status_code == 403
    finally:
        app.extensions["txmsg"].close()
