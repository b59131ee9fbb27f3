"""The ASGI front (``app.api.asgi``), the API's only front, as ``txmsg serve`` runs it.

Every route of the route table answers as it should, and none of them reaches Flask (a
hook on the app's Flask records what reaches it): the front reads bodies whole, within
their limits and their time, refuses what is over its own limits as problem+json, shares
group-commit batches among the requests awaiting on its loop, and answers 404 and 405
itself for what no route takes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any, NamedTuple

import orjson
import pytest
from flask import Flask, request

from app.api.asgi import MAX_HEAD_BYTES, MAX_TARGET_BYTES, Api
from app.domain.messages import parse_transaction
from app.web import create_app
from tests.asgi_client import AsgiClient
from tests.conftest import make_settings
from tests.integration import bad_input_cases
from tests.logs import captured_logs

TAG = "AAON"


class Answer(NamedTuple):
    status: int
    content_type: str
    body: Any


class Side:
    """The app behind its front; ``call`` takes ``json`` or ``data`` (a body with its
    Content-Length), ``stream`` (a chunked body, without one), ``headers``."""

    def __init__(self, app: Flask, tag: str = TAG) -> None:
        self.app, self.tag = app, tag
        self.flask_saw: list[str] = []
        app.before_request(lambda: self.flask_saw.append(f"{request.method} {request.path}"))
        self.api = Api(app)
        self.asgi = AsgiClient(self.api)

    @property
    def lifecycle(self) -> Any:
        return self.app.extensions["txmsg"].lifecycle

    def call(self, method: str, path: str, *, json: Any = None, data: bytes | None = None,
             stream: list[bytes] | None = None, headers: dict[str, str] | None = None) -> Answer:
        path = path.replace("TAG", self.tag)
        headers = dict(headers or {})
        if json is not None:
            data = orjson.dumps(json).replace(b"TAG", self.tag.encode())
        if stream is not None:
            headers["Transfer-Encoding"] = "chunked"
        if data is not None and "Content-Length" not in headers:
            headers["Content-Length"] = str(len(data))
        reply = self.asgi.request(method, path, body=stream or data or b"",
                                  headers=[("Content-Type", "application/json"),
                                           *headers.items()])
        raw = reply.body
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            body = raw
        return Answer(reply.status, reply.headers.get("content-type", ""), body)

    def close(self) -> None:
        self.asgi.close()
        self.api.stop_threads()
        self.app.extensions["txmsg"].close()


@pytest.fixture
def front(database_url: str) -> Iterator[Side]:
    side = Side(create_app(make_settings(database_url, max_body_bytes=bad_input_cases.MAX_BODY)))
    put = side.call("PUT", "/v1/producer-groups/gTAG",
                    json={"check_urls": ["http://127.0.0.1:9/check"]})
    assert put.status == 200, put
    yield side
    side.close()


SEND = "/v1/producer-groups/gTAG/transactions"
MSG = {"topic": "tTAG", "body": "hello"}


class Step(NamedTuple):
    method: str
    path: str
    kwargs: dict[str, Any]
    status: int


def step(method: str, path: str, status: int, **kwargs: Any) -> Step:
    return Step(method, path, kwargs, status)


def _json(doc: Any) -> bytes:
    return orjson.dumps(doc)


LIFECYCLE = [
    step("POST", SEND, 201, json={"transaction_id": "xTAG-1", **MSG}),
    step("POST", SEND, 200, json={"transaction_id": "xTAG-1", **MSG}),  # a retried send
    step("POST", SEND, 409, json={"transaction_id": "xTAG-1", "topic": "tTAG", "body": "other"}),
    step("POST", SEND, 201, json={"transaction_id": "xTAG-2", "check_immunity_seconds": 30,
                                  "messages": [
                                      {**MSG, "tag": "a", "keys": ["k1", "k2"],
                                       "properties": {"p": "v"}},
                                      {"topic": "tTAG", "body_base64": "AAEC/w=="}]}),
    step("POST", SEND, 201, json={"topic": "tTAG", "body": "no id: the server picks one"}),
    step("POST", "/v1/producer-groups/nobodyTAG/transactions", 422, json=MSG),
    step("POST", f"{SEND}/xTAG-1/commit", 200),
    step("POST", f"{SEND}/xTAG-1/commit", 200),  # repeated: the same offsets
    step("POST", f"{SEND}/xTAG-1/rollback", 409),
    step("POST", f"{SEND}/xTAG-2/rollback", 200),
    step("POST", f"{SEND}/xTAG-2/rollback", 200),
    step("POST", f"{SEND}/xTAG-2/commit", 409),
    step("POST", f"{SEND}/missingTAG/commit", 404),
    step("POST", f"{SEND}/a%20b/commit", 400),
    step("POST", "/v1/producer-groups/a.b/transactions/xTAG-1/commit", 400),
    step("POST", SEND, 400, data=b"{not json"),
    step("POST", SEND, 400, data=b""),
    step("POST", SEND, 400, data=b"[1, 2]"),
    step("POST", SEND, 413, json={**MSG, "body": "x" * (bad_input_cases.MAX_BODY + 1)}),
    # a chunked body: the front reads it whole first, as it does any body
    step("POST", SEND, 201, stream=[b'{"transaction_id": "xTAG-3", ',
                                    b'"topic": "tTAG", "body": "chunked"}']),
    step("POST", SEND, 400, stream=[b'{"topic": 5}']),
    # a subscription's receive and ack
    step("PUT", "/v1/topics/tTAG/subscriptions/s", 201, json={"initial_position": "earliest"}),
    step("PUT", "/v1/topics/tTAG/subscriptions/s", 200, json={"ack_timeout_ms": 60000}),
    step("PUT", "/v1/topics/tTAG/subscriptions/s", 400, json={"ack_timeout_ms": "soon"}),
    step("POST", "/v1/topics/tTAG/subscriptions/s/receive", 200, json={"max_messages": 1}),
    step("POST", "/v1/topics/tTAG/subscriptions/s/receive", 200),  # no body: the defaults
    step("POST", "/v1/topics/tTAG/subscriptions/s/ack", 200, json={"offsets": [0, 7]}),
    step("POST", "/v1/topics/tTAG/subscriptions/s/ack", 200, json={"offsets": [0]}),
    step("POST", "/v1/topics/tTAG/subscriptions/s/ack", 400, json={"offsets": [-1]}),
    step("POST", "/v1/topics/tTAG/subscriptions/s/ack", 400, json={"offsets": "0"}),
    step("POST", "/v1/topics/tTAG/subscriptions/s/ack", 400, data=b""),
    step("POST", "/v1/topics/tTAG/subscriptions/s/ack", 400, data=b"{not json"),
    step("POST", "/v1/topics/tTAG/subscriptions/nobody/ack", 404, json={"offsets": [0]}),
    step("POST", "/v1/topics/tTAG/subscriptions/a%20b/ack", 400, json={"offsets": [0]}),
    step("POST", "/v1/topics/tTAG/subscriptions/s/nack", 200, json={"offsets": [1]}),
    step("POST", "/v1/topics/tTAG/subscriptions/s/renew", 200, json={"offsets": [1]}),
    step("POST", "/v1/topics/tTAG/subscriptions/s/seek", 200, json={"offset": 1}),
    step("POST", "/v1/topics/tTAG/subscriptions/s/seek", 400, json={"offset": -1}),
    step("GET", "/v1/topics/tTAG/subscriptions/s", 200),
    step("GET", "/v1/topics/tTAG/subscriptions?limit=1", 200),
    step("GET", "/v1/topics/tTAG/subscriptions?after=a%20b", 400),
    step("DELETE", "/v1/topics/tTAG/subscriptions/s", 204),
    step("DELETE", "/v1/topics/tTAG/subscriptions/s", 404),
    # every other route of the table is served by the front too
    step("POST", f"{SEND}/xTAG-1/resume-check", 409),
    step("GET", f"{SEND}/xTAG-1", 200),
    step("GET", f"{SEND}/missingTAG", 404),
    step("GET", f"{SEND}?state=PREPARED&limit=5", 200),
    step("GET", f"{SEND}?limit=0", 400),
    step("GET", f"{SEND}?after=1_0", 400),
    step("GET", "/v1/topics/tTAG/messages?from_offset=0", 200),
    step("GET", "/v1/topics/tTAG/messages?from_offset=0&limit=1", 200),
    step("GET", "/v1/topics/tTAG/messages?from_offset=-1", 400),
    step("GET", "/v1/topics/tTAG", 200),
    step("PUT", "/v1/topics/tTAG", 200, json={"retention_seconds": 3600}),
    step("PUT", "/v1/topics/tTAG", 400, json={"retention_seconds": "a day"}),
    step("GET", "/v1/topics?after=a%20b", 400),
    step("GET", "/v1/topics?limit=1001", 400),
    step("GET", "/v1/producer-groups/gTAG", 200),
    step("GET", "/v1/producer-groups/nobodyTAG", 404),
    step("PUT", "/v1/producer-groups/gTAG", 400, json={"check_urls": []}),
    step("GET", "/v1/messages/0F8E3B0C9D2A4C6E8F1A2B3C4D5E6F70", 404),
    step("GET", "/v1/messages/not%20an%20id", 400),
    step("DELETE", "/v1/tokens/0123456789abcdef", 404),
    step("GET", "/v1/tokens?after=x", 400),
    step("POST", "/v1/tokens", 400, json={"name": "t", "scopes": ["nope"]}),
    step("GET", "/healthz", 200),
    step("GET", "/readyz", 200),
    step("GET", "/openapi.json", 200),
    step("POST", "/v1/producer-groups/zamówienia/transactions", 400, json=MSG),
    # no route: the front answers too
    step("POST", f"{SEND}/", 404, json=MSG),
    step("PUT", SEND, 405, json=MSG),
    step("DELETE", "/v1/topics/tTAG", 405),
    step("GET", "/v1/nothing-here", 404),
]


def test_every_route_answers_without_flask(front: Side) -> None:
    for s in LIFECYCLE:
        answer = front.call(s.method, s.path, **s.kwargs)
        assert answer.status == s.status, (s, answer)
        if answer.status >= 400:
            assert answer.content_type == "application/problem+json", (s, answer)
    assert front.flask_saw == []


def test_a_405_names_the_methods_of_the_path_and_options_and_head_are_answered(
        front: Side) -> None:
    send = SEND.replace("TAG", front.tag)
    refused = front.asgi.request("PUT", send)
    assert refused.status == 405 and refused.headers["allow"] == "GET, HEAD, OPTIONS, POST"
    assert orjson.loads(refused.body)["code"] == "method_not_allowed"
    options = front.asgi.request("OPTIONS", send)
    assert (options.status, options.headers["allow"]) == (200, "GET, HEAD, OPTIONS, POST")
    head = front.asgi.request("HEAD", "/v1/producer-groups/" + f"g{front.tag}")
    get = front.asgi.request("GET", "/v1/producer-groups/" + f"g{front.tag}")
    assert (head.status, head.body) == (200, b"")
    assert head.headers["content-length"] == get.headers["content-length"] != "0"
    assert front.flask_saw == []


def test_the_dashboard_is_flasks(front: Side) -> None:
    assert front.asgi.request("GET", "/ui/").status == 200
    redirected = front.asgi.request("GET", "/ui")
    assert redirected.status == 308 and redirected.headers["location"].endswith("/ui/")
    assert front.flask_saw == ["GET /ui/", "GET /ui"]


def test_a_body_over_the_limit_is_refused_unread(front: Side) -> None:
    front.app.config["MAX_CONTENT_LENGTH"] = 4096  # low, to reach it cheaply
    answer = front.call("POST", SEND, data=b" " * 4097)
    assert answer.status == 413
    assert answer.body["code"] == "payload_too_large"
    assert front.call("POST", SEND, data=b" " * 4096).status == 400  # read, not JSON
    assert front.flask_saw == []


def test_a_send_in_several_body_messages_is_read_whole(front: Side) -> None:
    body = _json({"transaction_id": "parts", **MSG}).replace(b"TAG", front.tag.encode())
    reply = front.asgi.request("POST", SEND.replace("TAG", front.tag),
                               body=[body[:7], body[7:20], body[20:]],
                               headers=[("Content-Length", str(len(body)))])
    assert reply.status == 201, reply
    assert front.flask_saw == []


def test_an_unexpected_error_is_a_logged_500(
        front: Side, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    def broken(*_args: Any, **_kwargs: Any) -> Any:
        raise RuntimeError("a bug")

    monkeypatch.setattr(front.lifecycle, "send_async", broken)
    answer = front.call("POST", SEND, json=MSG)
    assert answer.status == 500
    assert answer.content_type == "application/problem+json"
    assert answer.body["code"] == "internal_error"
    assert sum("Exception on" in r.getMessage() for r in caplog.records) == 1


def test_a_route_under_a_root_path_is_served(front: Side) -> None:
    body = _json({"transaction_id": "rooted", "topic": "t", "body": "b"})
    path = SEND.replace("TAG", front.tag)
    reply = front.asgi.request("POST", "/api" + path, body=body, root_path="/api",
                               headers=[("Content-Length", str(len(body)))])
    assert reply.status == 201, reply
    assert front.flask_saw == []


def test_a_client_gone_before_its_body_is_whole_stores_nothing(front: Side) -> None:
    """The server says "disconnect" for a client gone and for chunked framing it could not
    decode alike: the answer (if anyone hears it) is a 400, and nothing is stored."""
    body = _json({"transaction_id": "cut", "topic": "t", "body": "b"})
    for path in (SEND, "/v1/producer-groups/cut"):
        reply = front.asgi.request("POST" if path == SEND else "PUT", path.replace("TAG", front.tag),
                                   body=[body[:10]], disconnect=True,
                                   headers=[("Content-Length", str(len(body)))])
        assert reply.status == 400, reply
        assert orjson.loads(reply.body)["code"] == "incomplete_body"
    assert front.call("GET", f"{SEND}/cut").status == 404
    assert front.call("GET", "/v1/producer-groups/cut").status == 404
    assert front.flask_saw == []  # the front serves every route of the table


def test_concurrent_requests_on_one_loop_share_batches(front: Side) -> None:
    """Many sends and commits awaiting at once on the one event loop: every answer is
    right, and the writers carried them in fewer transactions than requests."""
    path = SEND.replace("TAG", front.tag)
    n = 64
    writers = (front.lifecycle.send_writer, front.lifecycle.finish_writer)
    before = [w.stats.transactions for w in writers]

    async def one(i: int) -> tuple[int, int]:
        body = _json({"transaction_id": f"c{i}", "topic": "conc", "body": str(i)})
        sent = await _call(front.api, "POST", path, body)
        committed = await _call(front.api, "POST", f"{path}/c{i}/commit", b"")
        return sent, committed

    async def all_of_them() -> list[tuple[int, int]]:
        return await asyncio.gather(*(one(i) for i in range(n)))

    results = front.asgi.run(all_of_them())
    assert results == [(201, 200)] * n
    used = [w.stats.transactions - b for w, b in zip(writers, before, strict=True)]
    assert all(0 < u < n for u in used), used
    offsets = sorted(m["offset"] for m in front.call(
        "GET", "/v1/topics/conc/messages?from_offset=0&limit=1000").body["messages"])
    assert offsets == list(range(n))


def test_lifespan_shutdown_stops_the_writers(database_url: str) -> None:
    app = create_app(make_settings(database_url))
    side = Side(app, "LIFE")
    try:
        assert side.asgi.lifespan("startup", "shutdown") == ["lifespan.startup.complete",
                                                             "lifespan.shutdown.complete"]
        assert not side.lifecycle.send_writer.alive
        assert not side.lifecycle.finish_writer.alive
    finally:
        side.asgi.close()


async def _call(api: Api, method: str, path: str, body: bytes) -> int:
    """A request straight on the running loop; its status."""
    messages = [{"type": "http.request", "body": body, "more_body": False}]
    status: list[int] = []

    async def receive() -> dict[str, Any]:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            status.append(message["status"])

    await api({"type": "http", "method": method, "path": path, "root_path": "",
               "query_string": b"", "http_version": "1.1", "scheme": "http",
               "headers": [(b"content-length", str(len(body)).encode())]}, receive, send)
    return status[0]


def test_a_cancelled_request_is_still_written_and_the_writer_goes_on(front: Side) -> None:
    """A request whose coroutine is cancelled while it waits (its client gone): the batch
    it joined is written all the same, and answering the dead future breaks nothing."""
    lifecycle = front.lifecycle

    def txn(tid: str) -> Any:
        return parse_transaction({"transaction_id": tid, "topic": "t", "body": "b"},
                                 max_body_bytes=1024)

    async def cancel_one_then_send_another() -> Any:
        waiting = asyncio.ensure_future(lifecycle.send_async(f"g{front.tag}", txn("gone")))
        await asyncio.sleep(0)  # submitted: now waiting on its batch
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        return await lifecycle.send_async(f"g{front.tag}", txn("next"))

    assert front.asgi.run(cancel_one_then_send_another()).created
    assert front.call("GET", f"{SEND}/gone").body["state"] == "PREPARED"
    assert front.call("GET", f"{SEND}/next").status == 200


@pytest.mark.parametrize("route", ["send", "registration"])
def test_a_chunked_body_over_the_limit_is_413_not_cut(front: Side, route: str) -> None:
    """Werkzeug stopped reading a streamed body at MAX_CONTENT_LENGTH and handed over what
    it had: valid JSON, padded past the limit with spaces and then garbage, was stored."""
    front.app.config["MAX_CONTENT_LENGTH"] = 4096  # low, to reach it cheaply
    if route == "send":
        method, path = "POST", SEND
        doc = _json({"transaction_id": "padded", **MSG})
    else:
        method, path = "PUT", "/v1/producer-groups/padded"
        doc = _json({"check_urls": ["http://127.0.0.1:9/check"]})
    padded = [doc, b" " * (4096 - len(doc)), b"garbage"]
    answer = front.call(method, path, stream=padded)
    assert answer.status == 413 and answer.content_type == "application/problem+json"
    assert answer.body["code"] == "payload_too_large"
    assert front.flask_saw == []
    gone = f"{SEND}/padded" if route == "send" else path
    assert front.call("GET", gone).status == 404
    # the limit itself is accepted, streamed or not
    exact = [doc, b" " * (4096 - len(doc))]
    assert front.call(method, path, stream=exact).status == (201 if route == "send" else 200)


def test_a_body_that_does_not_arrive_in_time_is_408_and_holds_no_thread(
        database_url: str) -> None:
    app = create_app(make_settings(database_url, request_body_timeout_seconds=0.2))
    side = Side(app, "SLOW")
    try:
        for method, path in (("POST", SEND), ("PUT", "/v1/producer-groups/gSLOW")):
            status, body = side.asgi.run(_stalled(side.api, method, path.replace("TAG", "SLOW")))
            assert status == 408, body
            assert orjson.loads(body)["code"] == "request_timeout"
        assert side.flask_saw == []  # Flask (and its threads) never saw them
    finally:
        side.close()


async def _stalled(api: Api, method: str, path: str) -> tuple[int, bytes]:
    """A request whose body starts and then stops coming: its answer."""
    loop = asyncio.get_running_loop()
    messages = [{"type": "http.request", "body": b'{"topic": ', "more_body": True}]
    never = loop.create_future()
    answer: dict[str, Any] = {}

    async def receive() -> dict[str, Any]:
        return messages.pop(0) if messages else await never

    async def send(message: dict[str, Any]) -> None:
        answer.update(message)

    await api({"type": "http", "method": method, "path": path, "root_path": "",
               "query_string": b"", "http_version": "1.1", "scheme": "http",
               "headers": [(b"content-length", b"100")]}, receive, send)
    never.cancel()
    return answer["status"], answer["body"]


def test_targets_and_heads_over_the_fronts_limits_are_refused_as_problem_json(
        front: Side) -> None:
    """Below the server's own limits, whose refusals have empty bodies."""
    read = "/v1/topics/t/messages?from_offset=0&pad="
    refusals = [
        (front.asgi.request("GET", read + "a" * MAX_TARGET_BYTES), 414, "uri_too_long"),
        (front.asgi.request("POST", f"{SEND}/x/commit".replace("TAG", front.tag) + "?"
                            + "a" * MAX_TARGET_BYTES), 414, "uri_too_long"),
        (front.asgi.request("GET", read, headers=[("X-Pad", "v" * MAX_HEAD_BYTES)]),
         431, "request_header_fields_too_large"),
    ]
    for reply, status, code in refusals:
        assert reply.status == status, reply
        assert reply.headers["content-type"] == "application/problem+json"
        assert orjson.loads(reply.body)["code"] == code
    assert front.flask_saw == []
    assert front.asgi.request("GET", read + "a" * (MAX_TARGET_BYTES - 100),
                              headers=[("X-Pad", "v" * (MAX_HEAD_BYTES - 200))]).status == 200


def test_health_answers_never_reach_flask(front: Side) -> None:
    for path in ("/healthz", "/readyz"):
        assert front.call("GET", path).status == 200
    assert front.flask_saw == []  # /readyz on threads of its own


def test_a_deletion_answers_204_without_a_content_type(front: Side) -> None:
    assert front.call("DELETE", "/v1/producer-groups/gTAG") == Answer(204, "", b"")


def test_the_fronts_access_lines_name_the_client_a_trusted_proxy_forwards(
        database_url: str) -> None:
    """As for the dashboard's (tests/integration/api/test_trusted_proxies.py): the peer, or
    for a trusted proxy the last address it forwards."""
    forwarded = [("X-Forwarded-For", "198.51.100.1, 203.0.113.9")]
    for proxies, client in (("127.0.0.0/8", "203.0.113.9"), ("10.0.0.0/8", "127.0.0.1")):
        settings = make_settings(database_url, trusted_proxies=proxies, log_format="json")
        app = create_app(settings)
        http = AsgiClient(Api(app))
        try:
            with captured_logs(settings) as captured:
                assert http.request("GET", "/v1/topics", headers=forwarded).status == 200
            [line] = captured.access()
            assert (line["route"], line["client"]) == ("/v1/topics", client)
            assert line["message"].endswith(f" ms from {client}")
        finally:
            http.close()
            app.extensions["txmsg"].close()
