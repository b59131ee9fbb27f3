"""Request bodies on both stores: each route takes at most its own limit (a send as much
as MAX_CONTENT_LENGTH, every other route 1 MiB), declared or chunked, through the ASGI
front; and with access control on, the front authenticates a request before it reads any
of its body, for the routes it serves and for the dashboard's pages it hands to Flask. ``Reply.pulled`` counts the body bytes the front took from the server."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from app.api.access import access_of
from app.api.asgi import Api
from app.api.bodies import SMALL_BODY_BYTES, body_limit, send_limit
from app.api.openapi import openapi_document
from app.api.routes import ROUTES
from app.config import Settings
from tests.asgi_client import AsgiClient, Reply

ADMIN_TOKEN = "admin-token-for-tests-0123456789"
GROUP, TOPIC = "orders-svc", "orders"
CHUNK = 64 * 1024
HUGE = str(10 * 1024**3)  # a declared Content-Length nothing should start to read
# a route of each kind: hot (served by the front), Flask, and the dashboard's form
ACK = f"/v1/topics/{TOPIC}/subscriptions/s/ack"
SEND = f"/v1/producer-groups/{GROUP}/transactions"
BODY_ROUTES = [
    ("POST", SEND),
    ("POST", f"{SEND}/t-1/commit"),
    ("POST", f"/v1/topics/{TOPIC}/subscriptions/s/receive"),
    ("POST", ACK),
    ("POST", f"/v1/topics/{TOPIC}/subscriptions/s/nack"),
    ("PUT", f"/v1/topics/{TOPIC}/subscriptions/s"),
    ("PUT", f"/v1/producer-groups/{GROUP}"),
    ("PUT", f"/v1/topics/{TOPIC}"),
    ("POST", "/v1/tokens"),
    ("DELETE", "/v1/tokens/0123456789abcdef"),
]


pytestmark = pytest.mark.settings(admin_token=ADMIN_TOKEN)


@pytest.fixture
def front(app: Any) -> Iterator[AsgiClient]:
    client = AsgiClient(Api(app))
    yield client
    client.close()


def bearer(token: str) -> tuple[str, str]:
    return ("authorization", f"Bearer {token}")


@pytest.fixture
def consumer(client: Any) -> str:
    """A consume:TOPIC token, with the subscription it acks on."""
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    assert client.put(f"/v1/topics/{TOPIC}/subscriptions/s", json={},
                      headers=admin).status_code == 201
    r = client.post("/v1/tokens", json={"name": "c", "scopes": [f"consume:{TOPIC}"]},
                    headers=admin)
    assert r.status_code == 201
    token: str = r.json["token"]
    return token


def chunked(size: int) -> list[bytes]:
    """``size`` bytes as body messages of CHUNK bytes, with no Content-Length."""
    return [b" " * min(CHUNK, size - i) for i in range(0, size, CHUNK)]


def assert_problem(r: Reply, status: int, code: str) -> None:
    assert r.status == status, r
    assert r.headers["content-type"] == "application/problem+json"
    assert orjson.loads(r.body)["code"] == code


@pytest.mark.parametrize(("method", "path"), BODY_ROUTES)
@pytest.mark.parametrize("authorization", [None, "Bearer txmsg_0123456789abcdef_" + "x" * 43])
def test_without_a_valid_token_no_body_is_read(front: AsgiClient, method: str, path: str,
                                               authorization: str | None) -> None:
    """401, not 413: neither a huge declared body nor a chunked one is read at all."""
    token = [("authorization", authorization)] if authorization else []
    declared = front.request(method, path, body=chunked(4 * CHUNK),
                             headers=[("content-length", HUGE), *token])
    assert_problem(declared, 401, "unauthenticated")
    assert declared.headers["www-authenticate"].startswith("Bearer ")
    streamed = front.request(method, path, body=chunked(2 * SMALL_BODY_BYTES),
                             headers=[("transfer-encoding", "chunked"), *token])
    assert_problem(streamed, 401, "unauthenticated")
    assert (declared.pulled, streamed.pulled) == (0, 0)


def test_a_route_no_rule_matches_reads_no_body(front: AsgiClient) -> None:
    r = front.request("POST", "/v1/no-such-route", body=chunked(4 * CHUNK),
                      headers=[("transfer-encoding", "chunked")])
    assert_problem(r, 404, "route_not_found")
    assert r.pulled == 0


def test_an_ack_over_1_mib_is_413_chunked_or_declared(front: AsgiClient, consumer: str) -> None:
    streamed = front.request("POST", ACK, body=chunked(2 * SMALL_BODY_BYTES),
                             headers=[("transfer-encoding", "chunked"), bearer(consumer)])
    assert_problem(streamed, 413, "payload_too_large")
    assert SMALL_BODY_BYTES < streamed.pulled <= SMALL_BODY_BYTES + CHUNK  # stopped at it
    declared = front.request("POST", ACK, body=chunked(2 * SMALL_BODY_BYTES), headers=[
        ("content-length", str(2 * SMALL_BODY_BYTES)), bearer(consumer)])
    assert_problem(declared, 413, "payload_too_large")
    assert declared.pulled == 0
    # 1 MiB itself is read: valid JSON padded with spaces
    doc = b'{"offsets": [0]}'
    exact = front.request("POST", ACK, body=[doc, b" " * (SMALL_BODY_BYTES - len(doc))],
                          headers=[("transfer-encoding", "chunked"), bearer(consumer)])
    assert (exact.status, exact.body) == (200, b'{"acked":0}')


@pytest.mark.parametrize(("method", "path"), [
    ("POST", f"/v1/topics/{TOPIC}/subscriptions/s/nack"),
    ("PUT", f"/v1/topics/{TOPIC}/subscriptions/s"),
    ("PUT", f"/v1/producer-groups/{GROUP}"),
])
def test_small_routes_take_1_mib_chunked_or_declared(
        front: AsgiClient, client: Any, method: str, path: str) -> None:
    admin = bearer(ADMIN_TOKEN)
    r = front.request(method, path, body=chunked(SMALL_BODY_BYTES + 1),
                      headers=[("transfer-encoding", "chunked"), admin])
    assert_problem(r, 413, "payload_too_large")
    declared = client.open(path, method=method, data=b" " * (SMALL_BODY_BYTES + 1),
                           headers={"Authorization": admin[1]})
    assert declared.status_code == 413 and declared.json["code"] == "payload_too_large"
    within = client.open(path, method=method, data=b" " * SMALL_BODY_BYTES,
                         headers={"Authorization": admin[1]})
    assert within.status_code != 413


def test_a_send_of_3_mib_still_works(front: AsgiClient, client: Any,
                                     settings: Settings) -> None:
    admin = bearer(ADMIN_TOKEN)
    assert client.put(f"/v1/producer-groups/{GROUP}", json={"check_urls": [
        "http://127.0.0.1:9/c"]}, headers={"Authorization": admin[1]}).status_code == 200
    body = "x" * (3 * 1024 * 1024)
    doc = orjson.dumps({"transaction_id": "front", "topic": TOPIC, "body": body})
    r = front.request("POST", SEND, body=[doc[:CHUNK], doc[CHUNK:]],
                      headers=[("transfer-encoding", "chunked"), admin])
    assert r.status == 201, r.body[:300]
    doc = orjson.dumps({"transaction_id": "declared", "topic": TOPIC, "body": body})
    declared = client.post(SEND, data=doc, headers={"Authorization": admin[1]})
    assert declared.status_code == 201, declared.json
    assert send_limit(settings) >= 64 * 1024 * 1024


def test_only_a_send_takes_more_than_1_mib(app: Any, settings: Settings) -> None:
    ceiling = app.config["MAX_CONTENT_LENGTH"]
    assert ceiling == send_limit(settings)
    larger = {route.rule for route in ROUTES if body_limit(route, ceiling) != SMALL_BODY_BYTES}
    assert larger == {"/v1/producer-groups/<group>/transactions"}
    assert all(body_limit(app.view_functions[rule.endpoint], ceiling) == SMALL_BODY_BYTES
               for rule in app.url_map.iter_rules())  # the dashboard's
    assert body_limit(access_of, None) == SMALL_BODY_BYTES  # no ceiling: still 1 MiB


def test_open_routes_and_the_dashboard_work_without_a_token(front: AsgiClient) -> None:
    for path in ("/healthz", "/readyz", "/openapi.json", "/ui/sign-in"):
        assert front.request("GET", path).status == 200, path
    assert front.request("GET", "/metrics").status == 401  # the metrics scope, or admin
    form = front.request("GET", "/ui/sign-in")
    cookie = form.headers["set-cookie"].split(";")[0]
    csrf = form.body.split(b'name="csrf_token" value="')[1].split(b'"')[0].decode()
    data = f"token={ADMIN_TOKEN}&csrf_token={csrf}&next=/ui/".encode()
    signed_in = front.request("POST", "/ui/sign-in", body=data, headers=[
        ("content-type", "application/x-www-form-urlencoded"),
        ("content-length", str(len(data))), ("cookie", cookie)])
    assert signed_in.status == 303, signed_in.body[:300]
    assert signed_in.pulled == len(data)


def test_the_document_gives_every_body_route_its_413_and_a_401_before_the_body(
        app: Any) -> None:
    paths = openapi_document()["paths"]
    ceiling = app.config["MAX_CONTENT_LENGTH"]
    with_body = 0
    for route in ROUTES:
        op = paths[route.path][route.method.lower()]
        if "401" in op["responses"]:
            assert "before any of the request's body is read" in (
                op["responses"]["401"]["description"]), route.rule
        if "requestBody" not in op:
            continue
        with_body += 1
        too_large = op["responses"]["413"]["description"]
        if body_limit(route, ceiling) == SMALL_BODY_BYTES:
            assert too_large.startswith("Body over this route's limit (1 MiB)"), route.rule
        else:
            assert too_large.startswith("Body over a send's limit"), route.rule
    assert with_body >= 10


@pytest.mark.parametrize("path", [SEND, ACK, "/v1/tokens"])
def test_a_content_length_of_thousands_of_digits_is_413_not_a_crash(
        front: AsgiClient, consumer: str, path: str) -> None:
    """Python's int() refuses a number of over 4,300 digits: such a length is too large
    for every route, like any other past its limit, and nothing of the body is read."""
    r = front.request("POST", path, body=chunked(CHUNK), headers=[
        ("content-length", "9" * 5000), bearer(ADMIN_TOKEN)])
    assert_problem(r, 413, "payload_too_large")
    assert r.pulled == 0
