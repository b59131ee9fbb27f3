"""`txmsg serve` and access control, as an operator meets it: no open port on a network by
accident, and tokens working through the real server (Granian, the ASGI front)."""

from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest
import requests

from tests.acceptance.conftest import run_txmsg

ADMIN_TOKEN = "acceptance-admin-token-0123456789"
AS_ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.7", "example.invalid"])
def test_serve_refuses_a_non_loopback_address_without_access_control(
        tmp_path: Path, host: str) -> None:
    result = run_txmsg(["serve", "--host", host, "--port", "9", "--no-checker"], {}, tmp_path,
                       timeout=60)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert host in lines[0] and "TXMSG_ADMIN_TOKEN" in lines[0]
    assert "TXMSG_ALLOW_UNAUTHENTICATED" in lines[0]
    assert not (tmp_path / "var").exists()  # refused before touching anything


def test_serve_refuses_an_admin_token_too_short_to_be_one(tmp_path: Path) -> None:
    result = run_txmsg(["serve", "--no-checker"], {"TXMSG_ADMIN_TOKEN": "s3cr3t-x"}, tmp_path,
                       timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [(
        "txmsg: TXMSG_ADMIN_TOKEN: Value error, TXMSG_ADMIN_TOKEN must be at least 16 "
        "characters, without surrounding whitespace")]
    assert "s3cr3t-x" not in result.stderr


def test_an_explicit_opt_out_serves_open_on_any_address(serve_factory) -> None:  # type: ignore[no-untyped-def]
    served = serve_factory({"TXMSG_ALLOW_UNAUTHENTICATED": "true"}, "--no-checker",
                           "--host", "0.0.0.0")
    assert requests.get(f"{served.url}/v1/topics", timeout=10).status_code == 200
    assert "access control off" in served.log.read_text()


def test_tokens_through_the_served_api(serve_factory) -> None:  # type: ignore[no-untyped-def]
    """On a non-loopback address, with an admin token: a producer's token sends and
    commits on the ASGI front's hot routes, a consumer's reads, neither can do the other's
    work, and a revoked one is refused; no secret reaches the log."""
    served = serve_factory({"TXMSG_ADMIN_TOKEN": ADMIN_TOKEN}, "--no-checker",
                           "--host", "0.0.0.0")
    url, s = served.url, requests.Session()
    assert "access control on" in served.log.read_text()
    assert s.get(f"{url}/healthz").status_code == 200
    r = s.get(f"{url}/v1/topics")
    assert r.status_code == 401 and r.headers["WWW-Authenticate"] == 'Bearer realm="txmsg"'
    assert r.headers["Content-Type"] == "application/problem+json"

    def make(*scopes: str) -> dict[str, str]:
        r = s.post(f"{url}/v1/tokens", json={"name": "t", "scopes": list(scopes)},
                   headers=AS_ADMIN)
        assert r.status_code == 201, r.text
        return r.json()

    producer, consumer = make("produce:shop"), make("consume:orders")
    as_producer = {"Authorization": f"Bearer {producer['token']}"}
    as_consumer = {"Authorization": f"Bearer {consumer['token']}"}
    group = f"{url}/v1/producer-groups/shop"
    assert s.put(group, json={"check_urls": ["http://127.0.0.1:9/c"]},
                 headers=as_producer).status_code == 200
    send = {"transaction_id": "o-1", "topic": "orders", "body": "one"}
    assert s.post(f"{group}/transactions", json=send).status_code == 401
    assert s.post(f"{group}/transactions", json=send, headers=as_consumer).status_code == 403
    assert s.post(f"{group}/transactions", json=send, headers=as_producer).status_code == 201
    assert s.post(f"{group}/transactions/o-1/commit", headers=as_consumer).status_code == 403
    assert s.post(f"{group}/transactions/o-1/commit", headers=as_producer).status_code == 200
    page = s.get(f"{url}/v1/topics/orders/messages", headers=as_consumer).json()
    assert [m["body"] for m in page["messages"]] == ["one"]
    assert s.get(f"{url}/v1/topics/orders/messages", headers=as_producer).status_code == 403
    scraper = make("metrics")  # Prometheus' token: /metrics, and nothing else
    assert s.get(f"{url}/metrics").status_code == 401
    assert s.get(f"{url}/metrics", headers=as_consumer).status_code == 403
    r = s.get(f"{url}/metrics", headers={"Authorization": f"Bearer {scraper['token']}"})
    assert r.status_code == 200 and "txmsg_commit_messages_total 1.0" in r.text
    assert s.get(f"{url}/metrics", headers=AS_ADMIN).status_code == 200
    assert s.delete(f"{url}/v1/tokens/{producer['token_id']}",
                    headers=AS_ADMIN).status_code == 204
    # one serve process: the revocation is felt at once (other processes within 5 s)
    r = s.post(f"{group}/transactions", json={**send, "transaction_id": "o-2"},
               headers=as_producer)
    assert r.status_code == 401 and 'error="invalid_token"' in r.headers["WWW-Authenticate"]
    served.stop()
    log = served.log.read_text()
    for secret in (ADMIN_TOKEN, producer["token"], consumer["token"], scraper["token"]):
        assert secret not in log


def _raw(port: int, head: str, body: bytes = b"") -> tuple[int, bytes]:
    """One request on a socket; the status and body of its answer, read as soon as it
    comes (the request's own body may never be finished)."""
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(head.encode() + b"\r\n" + body)
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = sock.recv(65536)
            assert chunk, answer
            answer += chunk
        top, _, rest = answer.partition(b"\r\n\r\n")
        length = int(re.search(rb"(?i)content-length: *(\d+)", top)[1])  # type: ignore[index]
        while len(rest) < length:
            rest += sock.recv(65536)
        return int(top.split()[1]), rest


def test_served_a_request_without_a_token_is_refused_before_its_body(serve_factory) -> None:  # type: ignore[no-untyped-def]
    """Through Granian: a body never sent in full (declared 10 GB, or chunked and never
    ended) is answered 401 at once, where reading it would have waited for the rest;
    with a token, an ack over 1 MiB is a 413 and a 3 MiB send is stored."""
    served = serve_factory({"TXMSG_ADMIN_TOKEN": ADMIN_TOKEN}, "--no-checker")
    ack = "/v1/topics/orders/subscriptions/s/ack"
    for path in (ack, "/v1/producer-groups/shop", "/v1/producer-groups/shop/transactions"):
        method = "PUT" if path.endswith("shop") else "POST"
        status, body = _raw(served.port, f"{method} {path} HTTP/1.1\r\nHost: x\r\n"
                            "Content-Length: 10737418240\r\n", b"{" * 65536)
        assert status == 401 and b'"unauthenticated"' in body, (path, body)
        status, body = _raw(served.port, f"{method} {path} HTTP/1.1\r\nHost: x\r\n"
                            "Transfer-Encoding: chunked\r\n", b"10000\r\n" + b" " * 65536)
        assert status == 401 and b'"unauthenticated"' in body, (path, body)
    s = requests.Session()
    s.headers.update(AS_ADMIN)
    assert s.put(f"{served.url}/v1/topics/orders/subscriptions/s", json={}).status_code == 201
    chunks = (b" " * 65536 for _ in range(24))  # 1.5 MiB, chunked
    r = s.post(f"{served.url}{ack}", data=chunks)
    assert r.status_code == 413 and r.json()["code"] == "payload_too_large"
    # its body left unread, the connection closes: the answer says so, and the session
    # opens a new one for the next request instead of meeting the closed one
    assert r.headers["Connection"] == "close"
    assert s.put(f"{served.url}/v1/producer-groups/shop",
                 json={"check_urls": ["http://127.0.0.1:9/c"]}).status_code == 200
    sent = s.post(f"{served.url}/v1/producer-groups/shop/transactions",
                  json={"topic": "orders", "body": "x" * (3 * 1024 * 1024)})
    assert sent.status_code == 201, sent.text


def test_served_a_token_without_the_scope_is_refused_before_its_body(
        serve_factory) -> None:  # type: ignore[no-untyped-def]
    """A valid token without the route's scope (which depends on the path only) starting
    a send of 64 MiB, chunked, or a registration declared 1 MiB: 403 after the first 64
    KiB, where reading the body would have waited for the rest."""
    served = serve_factory({"TXMSG_ADMIN_TOKEN": ADMIN_TOKEN}, "--no-checker")
    r = requests.post(f"{served.url}/v1/tokens", json={"name": "c", "scopes": ["consume:orders"]},
                      headers=AS_ADMIN, timeout=30)
    auth = f"Authorization: Bearer {r.json()['token']}\r\n"
    send = "POST /v1/producer-groups/shop/transactions HTTP/1.1\r\nHost: x\r\n"
    status, body = _raw(served.port, f"{send}{auth}Transfer-Encoding: chunked\r\n",
                        b"10000\r\n" + b'{"topic": "orders", "body": "' + b"x" * 65507)
    assert status == 403 and b'"produce:shop"' in body, body
    status, body = _raw(served.port, "PUT /v1/producer-groups/shop HTTP/1.1\r\nHost: x\r\n"
                        f"{auth}Content-Length: 1048576\r\n", b" " * 65536)
    assert status == 403 and b'"produce:shop"' in body, body


def test_the_api_browser_is_served_open_by_the_real_server(serve_factory) -> None:  # type: ignore[no-untyped-def]
    """GET /docs through Granian and the ASGI front, with access control on: public, as
    /openapi.json is, and every file it loads comes from this server."""
    served = serve_factory({"TXMSG_ADMIN_TOKEN": ADMIN_TOKEN}, "--no-checker")
    assert requests.get(f"{served.url}/v1/topics", timeout=10).status_code == 401
    page = requests.get(f"{served.url}/docs", timeout=10)
    assert page.status_code == 200 and page.headers["Content-Type"].startswith("text/html")
    assert not re.search(r"(?i)https?:", page.text)
    assets = re.findall(r'(?:src|href)="(/docs/assets/[^"]+)"', page.text)
    assert "/docs/assets/swagger-ui-bundle.js" in assets
    for asset in assets:
        assert requests.get(f"{served.url}{asset}", timeout=10).status_code == 200, asset
    assert requests.get(f"{served.url}/openapi.json", timeout=10).status_code == 200
