"""TXMSG_TRUSTED_PROXIES: X-Forwarded-Proto / X-Forwarded-For believed from the proxies
named, ignored from any other peer; through Flask's test client, on both stores."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask
from pydantic import ValidationError

from app.api.telemetry import trusted_peer
from app.config import Settings
from app.web import create_app
from tests.conftest import make_settings
from tests.front_client import front
from tests.integration.dashboard_helpers import ADMIN_TOKEN, csrf_of
from tests.logs import captured_logs

PROXY, STRANGER, CLIENT = "10.0.0.2", "192.0.2.7", "203.0.113.9"
BEHIND_TLS = {"X-Forwarded-Proto": "https", "X-Forwarded-For": CLIENT,
              "Referer": "https://localhost/ui/sign-in"}


pytestmark = pytest.mark.settings(admin_token=ADMIN_TOKEN,
                                   trusted_proxies="10.0.0.0/8, fd00::/8")


def signed_in_from(app: Flask, peer: str) -> tuple[str, Any]:
    """Sign in as a browser behind a TLS proxy would, the request coming from ``peer``:
    the session cookie set, and the client."""
    client = front(app)
    client.environ_base["REMOTE_ADDR"] = peer
    form = client.get("/ui/sign-in", headers=BEHIND_TLS)
    r = client.post("/ui/sign-in", headers=BEHIND_TLS,
                    data={"token": ADMIN_TOKEN, "csrf_token": csrf_of(form)})
    assert r.status_code == 303, r.get_data(as_text=True)
    cookie: str = r.headers["Set-Cookie"]
    return cookie, client


def test_behind_a_trusted_tls_proxy_the_session_cookie_is_secure(app: Flask) -> None:
    for peer in (PROXY, "::ffff:10.0.0.2", "fd00::5"):
        cookie, _ = signed_in_from(app, peer)
        assert cookie.startswith("txmsg_ui=") and "; Secure" in cookie, peer


def test_from_an_untrusted_peer_the_forwarded_headers_are_ignored(app: Flask) -> None:
    cookie, _ = signed_in_from(app, STRANGER)
    assert cookie.startswith("txmsg_ui=") and "Secure" not in cookie


def test_with_no_trusted_proxies_the_headers_are_ignored(database_url: str) -> None:
    app = create_app(make_settings(database_url, admin_token=ADMIN_TOKEN))
    try:
        cookie, _ = signed_in_from(app, PROXY)
        assert "Secure" not in cookie
    finally:
        app.extensions["txmsg"].close()


def test_the_access_line_names_the_client_the_trusted_proxy_forwards(
        app: Flask, settings: Settings) -> None:
    with captured_logs(settings.model_copy(update={"log_format": "json"})) as captured:
        for peer in (PROXY, STRANGER):
            client = front(app)
            client.environ_base["REMOTE_ADDR"] = peer
            assert client.get("/v1/topics", headers=BEHIND_TLS).status_code == 401
    lines = captured.access()
    assert [(x["client"], x["message"].split(" ms ")[1]) for x in lines] == [
        (CLIENT, f"from {CLIENT}"), (STRANGER, f"from {STRANGER}")]


@pytest.mark.parametrize(("address", "trusted"), [
    ("10.1.2.3", True), ("::ffff:10.1.2.3", True), ("fd00::1", True), ("11.0.0.1", False),
    ("::1", False), ("", False), (None, False), ("/run/txmsg.sock", False),
])
def test_trusted_peer(address: str | None, trusted: bool) -> None:
    networks = [ipaddress.ip_network("10.0.0.0/8"), ipaddress.ip_network("fd00::/8")]
    assert trusted_peer(address, networks) is trusted


def test_the_setting_reads_comma_separated_cidrs(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().trusted_proxies == []
    monkeypatch.setenv("TXMSG_TRUSTED_PROXIES", "10.0.0.0/8, 127.0.0.1/32,")
    assert [str(n) for n in Settings().trusted_proxies] == ["10.0.0.0/8", "127.0.0.1/32"]
    monkeypatch.setenv("TXMSG_TRUSTED_PROXIES", "10.0.0.1/8")
    with pytest.raises(ValidationError):
        Settings()


@pytest.fixture
def app(settings: Settings) -> Iterator[Flask]:
    app = create_app(settings)
    yield app
    app.extensions["txmsg"].close()
