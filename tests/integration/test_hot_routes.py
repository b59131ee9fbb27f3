"""The hot routes (send, commit, rollback) answer exactly as the Flask routes do.

Two apps share one database on each store: one with ``web_hot_routes`` (the default), one
without. The same requests go to both, each app with its own group, topic and ids, and
every answer must match: status, content type and body (random message ids and
timestamps aside). A hook on Flask records which requests reached it, so the test also
fails if the hot path quietly handed everything to Flask.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from typing import Any, NamedTuple

import orjson
import pytest
from flask import Flask, request

from app.web import create_app
from tests.conftest import make_settings
from tests.integration import test_bad_input

TAGS = ("AAON", "AAOF")  # the same length, so that both apps' answers line up
_SERVER_ID = re.compile(r"[0-9A-F]{32}")  # a transaction id the server chose


class Answer(NamedTuple):
    status: int
    content_type: str
    body: Any


class Side:
    def __init__(self, app: Flask, tag: str) -> None:
        self.app, self.tag = app, tag
        self.client = app.test_client()
        self.flask_saw: list[str] = []
        app.before_request(lambda: self.flask_saw.append(f"{request.method} {request.path}"))

    def call(self, method: str, path: str, **kwargs: Any) -> Answer:
        path = path.replace("TAG", self.tag)
        if "stream" in kwargs:  # a body without a Content-Length, read to its end
            kwargs["input_stream"] = io.BytesIO(kwargs.pop("stream"))
        if "json" in kwargs:
            kwargs["data"] = orjson.dumps(kwargs.pop("json")).replace(b"TAG", self.tag.encode())
        r = self.client.open(path, method=method, **kwargs)
        raw = r.get_data().replace(self.tag.encode(), b"TAG")
        return Answer(r.status_code, r.headers.get("Content-Type", ""), _normalised(raw))


def _normalised(raw: bytes) -> Any:
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: ("<random>" if k in ("message_id", "created_at", "resolved_at") else walk(v))
                    for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        if isinstance(node, str) and _SERVER_ID.fullmatch(node):
            return "<server id>"
        return node
    return walk(doc)


@pytest.fixture
def sides(database_url: str) -> Iterator[tuple[Side, Side]]:
    apps = [create_app(make_settings(database_url, web_hot_routes=hot,
                                     max_body_bytes=test_bad_input.MAX_BODY))
            for hot in (True, False)]
    pair = (Side(apps[0], TAGS[0]), Side(apps[1], TAGS[1]))
    for side in pair:
        put = side.call("PUT", "/v1/producer-groups/gTAG",
                        json={"check_urls": ["http://127.0.0.1:9/check"]})
        assert put.status == 200, put
    yield pair
    for app in apps:
        app.extensions["txmsg"].close()


SEND = "/v1/producer-groups/gTAG/transactions"
MSG = {"topic": "tTAG", "body": "hello"}


class Step(NamedTuple):
    method: str
    path: str
    kwargs: dict[str, Any]
    status: int
    hot: bool  # served without Flask when hot routes are on


def step(method: str, path: str, status: int, hot: bool = True, **kwargs: Any) -> Step:
    return Step(method, path, kwargs, status, hot)


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
    # as Granian calls the app: a body that ends where the request ends, with its length
    step("POST", SEND, 201, json={"transaction_id": "xTAG-3", **MSG},
         environ_overrides={"wsgi.input_terminated": True}),
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
    step("POST", SEND, 400, data=b"", headers={"Content-Length": "0"}),
    step("POST", SEND, 400, data=b"[1, 2]"),
    step("POST", SEND, 413, json={**MSG, "body": "x" * (test_bad_input.MAX_BODY + 1)}),
    # not served by the hot path: Flask answers both ways
    step("POST", SEND, 400, hot=False, stream=b'{"topic": 5}',
         headers={"Transfer-Encoding": "chunked"}),
    step("POST", SEND, 400, hot=False, stream=b'{"topic": 6}',
         environ_overrides={"wsgi.input_terminated": True, "CONTENT_LENGTH": ""}),
    step("POST", "/v1/producer-groups/zamówienia/transactions", 400, hot=False, json=MSG),
    step("POST", f"{SEND}/", 404, hot=False, json=MSG),
    step("POST", f"{SEND}/xTAG-1/resume-check", 409, hot=False),
    step("GET", f"{SEND}/xTAG-1", 200, hot=False),
    step("PUT", SEND, 405, hot=False, json=MSG),
]


def test_the_lifecycle_answers_match_and_skip_flask(sides: tuple[Side, Side]) -> None:
    hot, plain = sides
    for s in LIFECYCLE:
        hot.flask_saw.clear()
        plain.flask_saw.clear()
        answers = [side.call(s.method, s.path, **s.kwargs) for side in sides]
        assert answers[0] == answers[1], s
        assert answers[0].status == s.status, (s, answers[0])
        path = s.path.replace("%20", " ")
        assert (f"{s.method} {path.replace('TAG', hot.tag)}" in hot.flask_saw) is not s.hot, s
        assert f"{s.method} {path.replace('TAG', plain.tag)}" in plain.flask_saw, s


@pytest.mark.parametrize("case", [c for c in test_bad_input.CASES
                                  if c.values[0].method == "POST"])
def test_refusals_match(sides: tuple[Side, Side], case: test_bad_input.Case) -> None:
    c = case
    for side in sides:  # as test_bad_input's ``seeded``
        for txid in ("t-open", "t-rolled"):
            assert side.call("POST", SEND, json={"transaction_id": txid,
                                                  **test_bad_input.MSG}).status == 201
        assert side.call("POST", f"{SEND}/t-rolled/rollback").status == 200
    path = re.sub(r"orders-svc", "gTAG", c.path)
    kwargs: dict[str, Any] = {"data": c.data} if c.data is not None else {}
    if c.json is not test_bad_input._UNSET:
        kwargs["json"] = c.json
    answers = [side.call(c.method, path, **kwargs) for side in sides]
    assert answers[0] == answers[1]
    assert answers[0].status == c.status


def test_an_unexpected_error_is_a_logged_500_both_ways(
        sides: tuple[Side, Side], monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    answers = []
    for side in sides:
        lifecycle = side.app.extensions["txmsg"].lifecycle

        def broken(*_args: Any, **_kwargs: Any) -> Any:
            raise RuntimeError("a bug")
        monkeypatch.setattr(lifecycle, "send", broken)
        answers.append(side.call("POST", SEND, json=MSG))
    assert answers[0] == answers[1]
    assert answers[0].status == 500
    assert answers[0].content_type == "application/problem+json"
    assert answers[0].body["code"] == "internal_error"
    assert sum("Exception on" in r.getMessage() for r in caplog.records) == 2
