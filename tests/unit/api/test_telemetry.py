"""Request ids, the clients behind trusted proxies, and the access log's levels."""

from __future__ import annotations

import ipaddress
import logging
import time

import pytest

from app.api.telemetry import asgi_client, record, request_id, trusted_peer

PROXIES = [ipaddress.ip_network("10.0.0.0/8"), ipaddress.ip_network("fd00::/8")]


@pytest.mark.parametrize("incoming", ["abc", "A.b_c:d-9", "x" * 128])
def test_a_sane_request_id_is_kept(incoming: str) -> None:
    assert request_id(incoming) == incoming


@pytest.mark.parametrize("incoming", [None, "", "x" * 129, "a b", "a\nforged line", "ünï",
                                      "a/b", "id;drop"])
def test_any_other_is_replaced_by_a_new_one(incoming: str | None) -> None:
    new = request_id(incoming)
    assert new != incoming and len(new) == 32 and int(new, 16) >= 0
    assert request_id(incoming) != new  # random each time


@pytest.mark.parametrize(("address", "trusted"), [
    ("10.1.2.3", True),
    ("::ffff:10.1.2.3", True),  # IPv4-mapped
    ("fd12::1", True),
    ("11.0.0.1", False),
    ("::ffff:11.0.0.1", False),
    (None, False),
    ("", False),
    ("/run/txmsg.sock", False),  # a Unix socket's peer
])
def test_trusted_peer(address: str | None, trusted: bool) -> None:
    assert trusted_peer(address, PROXIES) is trusted


def scope(peer: str | None, *forwarded: bytes) -> dict[str, object]:
    return {"client": (peer, 5000) if peer else None,
            "headers": [(b"x-forwarded-for", f) for f in forwarded] + [(b"host", b"h")]}


def test_the_client_behind_a_trusted_proxy_is_the_last_forwarded_address() -> None:
    assert asgi_client(scope("10.0.0.1", b"1.1.1.1, 2.2.2.2"), PROXIES) == "2.2.2.2"
    assert asgi_client(scope("10.0.0.1", b"1.1.1.1", b"3.3.3.3"), PROXIES) == "3.3.3.3"


def test_forwarded_addresses_from_anyone_else_are_ignored() -> None:
    assert asgi_client(scope("8.8.8.8", b"1.1.1.1"), PROXIES) == "8.8.8.8"
    assert asgi_client(scope("10.0.0.1", b"1.1.1.1"), []) == "10.0.0.1"


def test_a_trusted_proxy_that_forwards_nothing_is_the_client() -> None:
    assert asgi_client(scope("10.0.0.1"), PROXIES) == "10.0.0.1"
    assert asgi_client(scope("10.0.0.1", b" "), PROXIES) == "10.0.0.1"
    assert asgi_client(scope(None), PROXIES) is None


@pytest.mark.parametrize(("route", "status", "hot", "level"), [
    ("/v1/topics/<topic>", 200, False, logging.INFO),
    ("/v1/topics/<topic>", 404, False, logging.INFO),
    ("/v1/topics/<topic>", 503, False, logging.WARNING),
    ("/v1/topics/<topic>", 200, True, logging.DEBUG),
    ("/v1/topics/<topic>", 409, True, logging.INFO),  # a hot route's refusal is told
    ("/v1/topics/<topic>", 500, True, logging.WARNING),
    ("/healthz", 200, False, logging.DEBUG),
    ("/healthz", 503, False, logging.WARNING),
])
def test_access_log_levels(caplog: pytest.LogCaptureFixture, route: str, status: int,
                           hot: bool, level: int) -> None:
    caplog.set_level(logging.DEBUG, logger="txmsg.access")
    record("rid-1", "GET", route, "/v1/topics/orders", status, time.perf_counter(), hot=hot)
    [line] = caplog.records
    assert line.levelno == level
    assert line.request_id == "rid-1" and line.status == status  # type: ignore[attr-defined]


def test_an_access_line_bounds_what_the_client_chose(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="txmsg.access")
    record("rid-2", "BREW", "<unmatched>", "/" + "p" * 2000, 404, time.perf_counter(),
           client="1.2.3.4")
    [line] = caplog.records
    assert line.method == "OTHER"  # type: ignore[attr-defined]
    assert len(line.path) == 512  # type: ignore[attr-defined]
    assert line.client == "1.2.3.4"  # type: ignore[attr-defined]
    assert line.getMessage().endswith("from 1.2.3.4")
