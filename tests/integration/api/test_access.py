"""Access control on both stores: every route of the route table (all served by the ASGI
front) is open or declares a scope, refuses a missing token (401) and one without its
scope (403), and writes nothing when it refuses; tokens are made, listed and revoked
through /v1/tokens, stored only as hashes, and revocation reaches another process once
its cache entry expires."""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import select

from app.api import asgi
from app.api.access import Access, access_of
from app.api.openapi import openapi_document
from app.api.routes import ROUTES, openapi_path
from app.config import Settings
from app.domain.access import ADMIN
from app.domain.tokens import CACHE_SECONDS, TokenGuard
from app.storage.schema import api_token
from app.web import create_app
from tests.asgi_client import AsgiClient
from tests.conftest import make_settings
from tests.front_client import front
from tests.integration.helpers import FakeClock, row_counts

ADMIN_TOKEN = "admin-token-for-tests-0123456789"
AS_ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
GROUP, TOPIC = "orders-svc", "orders"
HTTP_METHODS = {"get", "put", "post", "delete"}


pytestmark = pytest.mark.settings(admin_token=ADMIN_TOKEN)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def make_token(client: Any, *scopes: str, name: str = "test") -> dict[str, Any]:
    r = client.post("/v1/tokens", json={"name": name, "scopes": list(scopes)}, headers=AS_ADMIN)
    assert r.status_code == 201, r.json
    return r.json


def assert_problem(r: Any, status: int, code: str) -> None:
    assert r.status_code == status, r.get_data(as_text=True)
    assert r.mimetype == "application/problem+json"
    assert r.json["code"] == code and r.json["status"] == status


@pytest.fixture
def seeded(client: Any) -> dict[str, str]:
    """A registered group with a committed transaction (so a message id to read) and one
    open transaction, and a stored token: values for every path parameter."""
    group = f"/v1/producer-groups/{GROUP}"
    assert client.put(group, json={"check_urls": ["http://127.0.0.1:9/c"]},
                      headers=AS_ADMIN).status_code == 200
    sent = client.post(f"{group}/transactions", headers=AS_ADMIN, json={
        "transaction_id": "t-1", "topic": TOPIC, "body": "hi"})
    assert sent.status_code == 201
    assert client.post(f"{group}/transactions/t-1/commit", headers=AS_ADMIN).status_code == 200
    assert client.post(f"{group}/transactions", headers=AS_ADMIN, json={
        "transaction_id": "t-2", "topic": TOPIC, "body": "hi"}).status_code == 201
    token = make_token(client, "consume:nothing-here")
    return {"group": GROUP, "topic": TOPIC, "transaction_id": "t-2",
            "message_id": sent.json["messages"][0]["message_id"],
            "token_id": token["token_id"], "subscription": "s",
            "consumer": "c-1"}


def _routes() -> Iterator[tuple[str, str, Access]]:
    """(method, rule, access) of every API route (the dashboard's pages check their own
    sessions: tests/integration/ui/test_dashboard.py)."""
    for route in ROUTES:
        yield route.method, route.rule, route.access


def _concrete(rule: str, values: dict[str, str]) -> str:
    return re.sub(r"<(?:[^:<>]+:)?([^<>]+)>", lambda m: values[m[1]], rule)


def test_every_route_is_declared_open_or_with_its_scope(app: Any) -> None:
    routes = list(_routes())
    assert len(routes) >= 18
    for method, rule, access in routes:
        assert isinstance(access, Access), f"{method} {rule} declares no access"
        assert access.open or access.action is not None or access.note, (method, rule)
        if access.param is not None:
            assert f"<{access.param}>" in rule, (method, rule, access)
    opened = {rule for _, rule, access in routes if access.open}
    assert opened == {"/healthz", "/readyz", "/openapi.json"}
    assert all(rule.startswith("/v1/") or rule == "/metrics"
               for _, rule, access in routes if not access.open)
    for rule in app.url_map.iter_rules():  # what Flask serves: the dashboard and /docs
        assert rule.rule.startswith(("/ui/", "/static/", "/docs")), rule.rule
        if rule.endpoint != "static":
            assert access_of(app.view_functions[rule.endpoint]) is not None, rule.rule


def test_every_route_refuses_no_token_a_bad_token_and_a_token_without_its_scope(
        app: Any, client: Any, seeded: dict[str, str]) -> None:
    engine = app.extensions["txmsg"].engine
    outsider = make_token(client, "produce:other-svc", "consume:other-topic")["token"]
    before = row_counts(engine)
    for method, rule, access in _routes():
        path = _concrete(rule, seeded)
        anonymous = client.open(path, method=method, json={})
        if access.open:
            assert anonymous.status_code == 200, (method, path)
            continue
        assert_problem(anonymous, 401, "unauthenticated")
        assert anonymous.headers["WWW-Authenticate"] == 'Bearer realm="txmsg"'
        unknown = client.open(path, method=method, json={}, headers=bearer(
            "txmsg_0123456789abcdef_" + "x" * 43))
        assert_problem(unknown, 401, "unauthenticated")
        assert unknown.headers["WWW-Authenticate"].startswith("Bearer ")
        assert 'error="invalid_token"' in unknown.headers["WWW-Authenticate"]
        r = client.open(path, method=method, json={}, headers=bearer(outsider))
        if access.forbids:
            assert_problem(r, 403, "forbidden")
        else:  # GET /v1/topics: lists what the token may consume, here nothing
            assert (r.status_code, r.json["topics"]) == (200, []), (method, path)
    assert row_counts(engine) == before  # no refusal wrote anything


def test_every_route_admits_a_token_with_the_scope_it_declares(
        app: Any, client: Any, seeded: dict[str, str]) -> None:
    for method, rule, access in _routes():
        path = _concrete(rule, seeded)
        if access.open or access.action is None:
            continue
        name = seeded[access.param] if access.param else None
        scope = access.action if name is None else f"{access.action}:{name}"
        wildcard = scope if name is None else f"{access.action}:*"
        for held in (scope, wildcard):
            token = make_token(client, held)["token"]
            r = client.open(path, method=method, json={}, headers=bearer(token))
            assert r.status_code not in (401, 403), (method, path, held, r.json)


def _front_without_flask(app: Any) -> AsgiClient:
    front = asgi.Api(app)

    async def no_flask(scope: Any, receive: Any, send: Any) -> None:
        raise AssertionError(f"{scope['path']} went to Flask")

    front._flask = no_flask  # type: ignore[assignment]
    return AsgiClient(front)


def test_the_asgi_front_checks_every_route_itself(
        app: Any, client: Any, seeded: dict[str, str]) -> None:
    """Every route of the table is served outside Flask: the front refuses it with the
    route's declaration, and never hands a refused request to Flask."""
    engine = app.extensions["txmsg"].engine
    outsider = make_token(client, "produce:other-svc", "consume:other-topic")["token"]
    body = b"{}"
    http = _front_without_flask(app)
    before = row_counts(engine)
    try:
        for route in ROUTES:
            path = _concrete(route.rule, seeded)
            length = ("content-length", str(len(body)))
            r = http.request(route.method, path, body=body, headers=[length])
            if route.access.open:
                assert r.status == 200, (route.method, path, r)
                continue
            assert r.status == 401 and b'"unauthenticated"' in r.body, (route.method, path)
            assert r.headers["www-authenticate"] == 'Bearer realm="txmsg"'
            assert r.headers["content-type"] == "application/problem+json"
            r = http.request(route.method, path, body=body,
                             headers=[length, ("authorization", "Bearer txmsg_nope")])
            assert r.status == 401 and 'error="invalid_token"' in r.headers["www-authenticate"]
            r = http.request(route.method, path, body=body,
                             headers=[length, ("authorization", f"Bearer {outsider}")])
            if route.access.forbids:
                assert r.status == 403 and b'"forbidden"' in r.body, (route.method, path)
            else:
                assert (r.status, r.body) == (200, b'{"topics":[],"next_after":null}')
        assert row_counts(engine) == before
    finally:
        http.close()


def test_the_asgi_front_serves_the_hot_routes_to_a_token_with_their_scope(
        app: Any, client: Any) -> None:
    client.put(f"/v1/producer-groups/{GROUP}", json={"check_urls": ["http://127.0.0.1:9/c"]},
               headers=AS_ADMIN)
    assert client.put(f"/v1/topics/{TOPIC}/subscriptions/s", json={},
                      headers=AS_ADMIN).status_code == 201
    producer = make_token(client, f"produce:{GROUP}")["token"]
    consumer = make_token(client, f"consume:{TOPIC}")["token"]
    body = b'{"transaction_id": "t-1", "topic": "orders", "body": "hi"}'
    base = f"/v1/producer-groups/{GROUP}/transactions"
    http = _front_without_flask(app)
    try:
        ok = [("content-length", str(len(body))), ("authorization", f"Bearer {producer}")]
        assert http.request("POST", base, body=body, headers=ok).status == 201
        assert http.request("POST", f"{base}/t-1/commit", headers=ok).status == 200
        assert http.request("POST", f"{base}/t-1/rollback", headers=ok).status == 409
        path = f"/v1/topics/{TOPIC}/subscriptions/s/receive"
        r = http.request("POST", path, headers=[("authorization", f"Bearer {consumer}")])
        assert r.status == 200 and r.body == b'{"messages":[{' + r.body[14:]
        ack = f"/v1/topics/{TOPIC}/subscriptions/s/ack"
        ack_body = b'{"offsets":[0]}'
        r = http.request("POST", ack, body=ack_body, headers=[
            ("content-length", str(len(ack_body))), ("authorization", f"Bearer {consumer}")])
        assert r.status == 200 and r.body == b'{"acked":1}'
    finally:
        http.close()


def test_acks_in_a_send_need_consume_on_their_topic(app: Any, client: Any) -> None:
    """produce:<group> sends, acks need consume:<topic>."""
    client.put(f"/v1/producer-groups/{GROUP}", json={"check_urls": ["http://127.0.0.1:9/c"]},
               headers=AS_ADMIN)
    producer = make_token(client, f"produce:{GROUP}")["token"]
    body = {"topic": "out", "body": "x",
            "acks": [{"topic": TOPIC, "subscription": "s", "offsets": [0]}]}
    engine = app.extensions["txmsg"].engine
    before = row_counts(engine)
    path = f"/v1/producer-groups/{GROUP}/transactions"
    assert_problem(client.post(path, json=body, headers=bearer(producer)), 403, "forbidden")
    assert row_counts(engine) == before
    both = make_token(client, f"produce:{GROUP}", f"consume:{TOPIC}")["token"]
    r = client.post(path, json=body, headers=bearer(both))
    assert (r.status_code, r.json["code"]) == (404, "subscription_not_found")


def test_a_dead_letter_topic_other_than_the_default_needs_consume_on_it(
        app: Any, client: Any) -> None:
    """The subscription writes its dead letters into that topic: consume on the
    subscription's topic alone does not let a token write into another one."""
    subs = f"/v1/topics/{TOPIC}/subscriptions"
    only_orders = bearer(make_token(client, f"consume:{TOPIC}")["token"])
    both = bearer(make_token(client, f"consume:{TOPIC}", "consume:other")["token"])
    engine = app.extensions["txmsg"].engine
    before = row_counts(engine)
    refused = {"dead_letter_topic": "other", "max_redeliveries": 0}
    assert_problem(client.put(f"{subs}/s1", json=refused, headers=only_orders), 403, "forbidden")
    assert row_counts(engine) == before
    r = client.put(f"{subs}/s1", json=refused, headers=both)
    assert r.status_code == 201, r.json
    assert r.json["dead_letter_topic"] == "other"
    # changing it to another topic is refused too; back to the default needs nothing more
    assert_problem(client.put(f"{subs}/s1", json=refused, headers=only_orders), 403, "forbidden")
    assert client.get(f"{subs}/s1", headers=only_orders).json["dead_letter_topic"] == "other"
    # a change that leaves it out needs no scope on it, and keeps it (#37)
    for body in ({}, {"ack_timeout_ms": 5000}, {"redelivery_backoff": {"min_ms": 10}}):
        r = client.put(f"{subs}/s1", json=body, headers=only_orders)
        assert r.status_code == 200, r.json
        assert r.json["dead_letter_topic"] == "other"
    for body in ({"dead_letter_topic": None}, {"dead_letter_topic": f"{TOPIC}-s1-DLQ"}):
        r = client.put(f"{subs}/s1", json=body, headers=only_orders)
        assert r.status_code == 200, r.json
        assert r.json["dead_letter_topic"] == f"{TOPIC}-s1-DLQ"
    wildcard = bearer(make_token(client, "consume:*")["token"])
    assert client.put(f"{subs}/s2", json=refused, headers=wildcard).status_code == 201


def test_the_document_names_each_routes_scope(app: Any) -> None:
    doc = openapi_document()
    assert doc["components"]["securitySchemes"]["bearer"] == {
        "type": "http", "scheme": "bearer",
        "description": doc["components"]["securitySchemes"]["bearer"]["description"]}
    assert doc["security"] == [{"bearer": []}]
    for method, rule, access in _routes():
        op = doc["paths"][openapi_path(rule)][method.lower()]
        if access.open:
            assert op["security"] == [] and "x-required-scope" not in op, rule
            continue
        assert op["security"] == [{"bearer": []}]
        assert op["x-required-scope"] == access.required_scope
        assert access.required_scope in op["description"]
        assert "401" in op["responses"] and ("403" in op["responses"]) == access.forbids
    send = doc["paths"]["/v1/producer-groups/{group}/transactions"]["post"]
    assert send["x-required-scope"] == "produce:{group}"
    read = doc["paths"]["/v1/topics/{topic}/messages"]["get"]
    assert read["x-required-scope"] == "consume:{topic}"
    assert doc["paths"]["/v1/tokens"]["post"]["x-required-scope"] == ADMIN


def test_a_token_is_shown_once_and_stored_only_as_its_hash(app: Any, client: Any) -> None:
    made = make_token(client, "produce:orders-svc", "consume:orders", "produce:orders-svc",
                      name="orders prod")
    assert set(made) == {"token_id", "name", "scopes", "created_at", "token"}
    assert made["scopes"] == ["produce:orders-svc", "consume:orders"]  # repeated once
    assert re.fullmatch(r"txmsg_[0-9a-f]{16}_[A-Za-z0-9_-]{43}", made["token"])
    assert made["token"].startswith(f"txmsg_{made['token_id']}_")
    with app.extensions["txmsg"].engine.connect() as conn:
        row = conn.execute(select(api_token)).one()
    stored = " ".join(str(v) for v in row)
    # the part after the id: base64url, which may itself hold "_" (rsplit found a tail)
    secret = made["token"].removeprefix(f"txmsg_{made['token_id']}_")
    assert secret not in stored and made["token"] not in stored
    assert row.secret_hash == hashlib.sha256(made["token"].encode()).hexdigest()
    listed = client.get("/v1/tokens", headers=AS_ADMIN).json
    assert listed == {"tokens": [{k: v for k, v in made.items() if k != "token"}],
                      "next_after": None}
    assert secret not in str(listed)


def test_tokens_list_pages_oldest_first(client: Any) -> None:
    ids = [make_token(client, f"consume:t{i}")["token_id"] for i in range(3)]
    first = client.get("/v1/tokens?limit=2", headers=AS_ADMIN).json
    assert [t["token_id"] for t in first["tokens"]] == ids[:2]
    rest = client.get(f"/v1/tokens?limit=2&after={first['next_after']}", headers=AS_ADMIN).json
    assert [t["token_id"] for t in rest["tokens"]] == ids[2:] and rest["next_after"] is None


def test_a_producer_token_does_the_producers_work_and_nothing_else(client: Any) -> None:
    producer = bearer(make_token(client, f"produce:{GROUP}")["token"])
    group = f"/v1/producer-groups/{GROUP}"
    assert client.put(group, json={"check_urls": ["http://127.0.0.1:9/c"]},
                      headers=producer).status_code == 200
    secret = client.get(group, headers=producer).json["signing_secret"]
    rotated = client.post(f"{group}/signing-secret/rotate", headers=producer)
    assert rotated.status_code == 200 and rotated.json["signing_secret"] != secret
    assert_problem(client.post("/v1/producer-groups/other-svc/signing-secret/rotate",
                               headers=producer), 403, "forbidden")
    sent = client.post(f"{group}/transactions", headers=producer,
                       json={"transaction_id": "t-1", "topic": TOPIC, "body": "hi"})
    assert sent.status_code == 201
    assert client.post(f"{group}/transactions/t-1/commit", headers=producer).status_code == 200
    assert client.get(f"{group}/transactions/t-1", headers=producer).status_code == 200
    assert client.get(f"{group}/transactions", headers=producer).status_code == 200
    # its own message, by id: produce on the message's group is enough
    message_id = sent.json["messages"][0]["message_id"]
    assert client.get(f"/v1/messages/{message_id}", headers=producer).status_code == 200
    # but not the topic, other groups, or the tokens
    assert_problem(client.get(f"/v1/topics/{TOPIC}/messages", headers=producer), 403,
                   "forbidden")
    assert_problem(client.put("/v1/producer-groups/other-svc", headers=producer,
                              json={"check_urls": ["http://127.0.0.1:9/c"]}), 403, "forbidden")
    assert_problem(client.get("/v1/tokens", headers=producer), 403, "forbidden")
    assert client.get("/v1/topics", headers=producer).json["topics"] == []
    assert client.delete(group, headers=producer).status_code == 204


def test_consumers_see_only_their_topics(client: Any) -> None:
    group = f"/v1/producer-groups/{GROUP}"
    client.put(group, json={"check_urls": ["http://127.0.0.1:9/c"]}, headers=AS_ADMIN)
    ids = {}
    for topic in ("a-topic", "b-topic", "c-topic", "d-topic"):
        r = client.post(f"{group}/transactions", headers=AS_ADMIN,
                        json={"transaction_id": topic, "topic": topic, "body": "hi"})
        ids[topic] = r.json["messages"][0]["message_id"]
        client.post(f"{group}/transactions/{topic}/commit", headers=AS_ADMIN)
    consumer = bearer(make_token(client, "consume:b-topic", "consume:d-topic",
                                 "consume:never-written")["token"])

    def names(query: str = "", headers: dict[str, str] = consumer) -> list[str]:
        r = client.get(f"/v1/topics{query}", headers=headers)
        assert r.status_code == 200, r.json
        return [t["topic"] for t in r.json["topics"]]

    assert names() == ["b-topic", "d-topic"]
    assert names("?limit=1") == ["b-topic"]  # pages within what it may see
    assert names("?after=b-topic&limit=1") == ["d-topic"]
    assert names(headers=AS_ADMIN) == ["a-topic", "b-topic", "c-topic", "d-topic"]
    everything = bearer(make_token(client, "consume:*")["token"])
    assert names(headers=everything) == ["a-topic", "b-topic", "c-topic", "d-topic"]
    page = client.get("/v1/topics/b-topic/messages", headers=consumer)
    assert page.status_code == 200 and len(page.json["messages"]) == 1
    assert_problem(client.get("/v1/topics/a-topic/messages", headers=consumer), 403, "forbidden")
    assert client.get(f"/v1/messages/{ids['d-topic']}", headers=consumer).status_code == 200
    refused = client.get(f"/v1/messages/{ids['a-topic']}", headers=consumer)
    assert_problem(refused, 403, "forbidden")
    # the message's id tells a token neither its topic nor its group
    assert "a-topic" not in refused.get_data(as_text=True)
    assert GROUP not in refused.get_data(as_text=True)
    assert_problem(client.get("/v1/messages/no-such-message", headers=consumer), 404,
                   "message_not_found")
    assert_problem(client.post(f"{group}/transactions", headers=consumer,
                               json={"topic": "b-topic", "body": "x"}), 403, "forbidden")


@pytest.mark.parametrize("authorization", [
    None, "", "Bearer", "Bearer ", "Basic YWRtaW46YWRtaW4=", f"Token {ADMIN_TOKEN}",
    f"{ADMIN_TOKEN}", "Bearer txmsg_0123456789abcdef_short", f"Bearer {ADMIN_TOKEN}x",
    f"Bearer {ADMIN_TOKEN[:-1]}", "Bearer " + "x" * 5000,
])
def test_anything_but_a_valid_bearer_token_is_401(client: Any,
                                                  authorization: str | None) -> None:
    headers = {} if authorization is None else {"Authorization": authorization}
    r = client.get("/v1/topics", headers=headers)
    assert_problem(r, 401, "unauthenticated")
    assert r.headers["WWW-Authenticate"].startswith("Bearer")
    assert ADMIN_TOKEN not in r.get_data(as_text=True)


def test_the_bearer_scheme_is_case_insensitive(client: Any) -> None:
    for scheme in ("Bearer", "bearer", "BEARER"):
        r = client.get("/v1/topics", headers={"Authorization": f"{scheme} {ADMIN_TOKEN}"})
        assert r.status_code == 200


def test_a_revoked_token_is_refused_at_once_in_the_process_that_revoked_it(
        client: Any) -> None:
    made = make_token(client, "consume:orders")
    assert client.get("/v1/topics", headers=bearer(made["token"])).status_code == 200
    assert client.delete(f"/v1/tokens/{made['token_id']}", headers=AS_ADMIN).status_code == 204
    assert_problem(client.get("/v1/topics", headers=bearer(made["token"])), 401,
                   "unauthenticated")
    assert_problem(client.delete(f"/v1/tokens/{made['token_id']}", headers=AS_ADMIN), 404,
                   "token_not_found")
    assert client.get("/v1/tokens", headers=AS_ADMIN).json["tokens"] == []


def test_another_process_refuses_a_revoked_token_once_its_cache_expires(
        app: Any, client: Any, settings: Settings) -> None:
    """Two app instances on one database stand for two processes; the other one's cache
    runs on a fake clock. Revocation reaches it within CACHE_SECONDS, which is under 5 s."""
    assert CACHE_SECONDS < 5
    other = create_app(settings)
    try:
        clock = FakeClock()
        state = other.extensions["txmsg"]
        state.guard = TokenGuard(state.engine, settings.admin_token, clock=clock)
        other_client = front(other)
        made = make_token(client, "consume:orders")
        headers = bearer(made["token"])
        assert other_client.get("/v1/topics", headers=headers).status_code == 200  # cached
        assert client.delete(f"/v1/tokens/{made['token_id']}",
                             headers=AS_ADMIN).status_code == 204
        clock.now += CACHE_SECONDS - 0.5
        # still served from the other process's cache: this is the few seconds' window
        assert other_client.get("/v1/topics", headers=headers).status_code == 200
        clock.now += 0.6
        assert_problem(other_client.get("/v1/topics", headers=headers), 401, "unauthenticated")
    finally:
        other.extensions["txmsg"].close()


def test_the_guard_caches_briefly_and_boundedly(app: Any, client: Any,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from app.storage import tokens as token_storage

    loads: list[str] = []
    real = token_storage.get_token

    def counting(conn: Any, token_id: str) -> Any:
        loads.append(token_id)
        return real(conn, token_id)

    monkeypatch.setattr(token_storage, "get_token", counting)
    engine = app.extensions["txmsg"].engine
    one, two = (make_token(client, "consume:a")["token"], make_token(client, "consume:b")["token"])
    clock = FakeClock()
    guard = TokenGuard(engine, None, clock=clock, ttl=3, size=1)
    assert guard.verify(one) is not None and guard.verify(one) is not None
    assert len(loads) == 1  # the second time from the cache
    clock.now += 3.1
    assert guard.verify(one) is not None and len(loads) == 2  # expired: read again
    assert guard.verify(two) is not None and guard.verify(one) is not None
    assert len(loads) == 4  # one entry only: two pushed one out
    assert guard.verify("txmsg_0123456789abcdef_" + "x" * 43) is None
    assert guard.verify("not even the shape") is None and len(loads) == 5


def test_secrets_never_reach_the_logs(client: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    made = make_token(client, "consume:orders")
    client.get("/v1/topics", headers=bearer(made["token"]))
    client.get("/v1/tokens", headers=bearer(made["token"]))
    client.get("/v1/topics", headers=bearer(made["token"] + "x"))
    client.delete(f"/v1/tokens/{made['token_id']}", headers=AS_ADMIN)
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert made["token"] not in logged and ADMIN_TOKEN not in logged
    assert made["token"].rsplit("_", 1)[1] not in logged


def test_with_access_control_off_every_route_is_open(database_url: str) -> None:
    app = create_app(make_settings(database_url))
    try:
        c = front(app)
        assert c.get("/v1/topics").status_code == 200
        made = c.post("/v1/tokens", json={"name": "n", "scopes": ["consume:x"]})
        assert made.status_code == 201  # made ahead of turning access control on
        assert c.get("/v1/tokens").json["tokens"][0]["token_id"] == made.json["token_id"]
        # a token is not needed, and one without the scope changes nothing
        r = c.get("/v1/tokens", headers=bearer(made.json["token"]))
        assert r.status_code == 200
    finally:
        app.extensions["txmsg"].close()
