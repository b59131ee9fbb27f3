"""Request ids, access log lines and the HTTP duration histogram, recorded by the ASGI
front for every request (its own answers and the dashboard's, by Flask behind it)."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask
from prometheus_client import REGISTRY

from app.api.asgi import MAX_HEAD_BYTES, Api
from app.api.telemetry import UNMATCHED
from app.config import Settings
from tests.asgi_client import AsgiClient
from tests.integration.helpers import finish, register, send
from tests.logs import captured_logs

SEND = "/v1/producer-groups/<group>/transactions"
COMMIT = "/v1/producer-groups/<group>/transactions/<transaction_id>/commit"
NEW_ID = re.compile(r"[0-9a-f]{32}")
GROUP = "orders-svc"


def duration_count(route: str, method: str, status: int) -> float:
    value = REGISTRY.get_sample_value(
        "txmsg_http_request_duration_seconds_count",
        {"route": route, "method": method, "status": str(status)})
    return value or 0.0


@pytest.fixture
def front(app: Flask) -> Iterator[AsgiClient]:
    client = AsgiClient(Api(app))
    yield client
    client.close()


@pytest.fixture
def json_logs(settings: Settings) -> Iterator[Any]:
    with captured_logs(settings.model_copy(update={"log_format": "json"})) as captured:
        yield captured


# -- request ids ------------------------------------------------------------------------

@pytest.mark.parametrize(("incoming", "kept"), [
    ("b7e1c0de-0f4e-4c1a-9d55-3f0a8c2f9e11", True),
    ("req.1:2_3-4", True),
    ("x" * 128, True),
    ("x" * 129, False),
    ("has space", False),
    ('quote"d', False),
    ("caf\u00e9", False),
    ("a;b", False),
    ("token=secret", False),
    ("", False),
])
def test_a_sane_request_id_is_kept_and_any_other_replaced(client: Any, front: AsgiClient,
                                                          incoming: str, kept: bool) -> None:
    register(client)
    answers = [
        client.get("/v1/topics", headers={"X-Request-Id": incoming}).headers,
        front.request("GET", "/v1/topics", headers=[("X-Request-Id", incoming)]).headers,
        front.request("POST", f"/v1/producer-groups/{GROUP}/transactions",
                      body=b'{"topic": "t", "body": "x"}',
                      headers=[("X-Request-Id", incoming),
                               ("Content-Length", "27")]).headers,
    ]
    for headers in answers:
        echoed = {k.lower(): v for k, v in headers.items()}["x-request-id"]
        if kept:
            assert echoed == incoming
        else:
            assert NEW_ID.fullmatch(echoed), echoed


def test_every_answer_carries_a_request_id(client: Any, front: AsgiClient) -> None:
    """Successes, problem+json errors, unknown routes and methods, the front's own
    refusals and /healthz: each answer has an id, a new one each time."""
    register(client)
    txid = send(client).json["transaction_id"]
    client_answers = [
        client.get("/healthz"), client.get("/metrics"), client.get("/no/such/route"),
        client.delete("/v1/topics"), finish(client, "nope", "commit"),
        client.post(f"/v1/producer-groups/{GROUP}/transactions", data=b"{bad"),
    ]
    front_answers = [
        front.request("GET", "/healthz"),
        front.request("POST", f"/v1/producer-groups/{GROUP}/transactions/{txid}/commit"),
        front.request("POST", f"/v1/producer-groups/{GROUP}/transactions/nope/rollback"),
        front.request("GET", f"/v1/producer-groups/{GROUP}/transactions/{txid}"),
        front.request("GET", "/no/such/route"),
        front.request("GET", "/v1/topics", headers=[("X-Pad", "v" * MAX_HEAD_BYTES)]),
    ]
    ids = [r.headers["X-Request-Id"] for r in client_answers]
    ids += [r.headers["x-request-id"] for r in front_answers]
    assert [r.status_code for r in client_answers] == [200, 200, 404, 405, 404, 400]
    assert [r.status for r in front_answers] == [200, 200, 404, 200, 404, 431]
    assert all(NEW_ID.fullmatch(i) for i in ids), ids
    assert len(set(ids)) == len(ids)


# -- access log lines -------------------------------------------------------------------

def test_requests_log_one_json_line_each_with_route_and_id(client: Any,
                                                           json_logs: Any) -> None:
    register(client)
    r = client.get(f"/v1/producer-groups/{GROUP}/transactions/missing",
                   headers={"X-Request-Id": "trace-7"})
    assert r.status_code == 404 and r.headers["X-Request-Id"] == "trace-7"
    line = json_logs.access()[-1]
    assert line["level"] == "INFO"
    assert line["request_id"] == "trace-7"
    assert (line["method"], line["route"], line["path"], line["status"]) == (
        "GET", "/v1/producer-groups/<group>/transactions/<transaction_id>",
        f"/v1/producer-groups/{GROUP}/transactions/missing", 404)
    assert isinstance(line["duration_ms"], float) and line["duration_ms"] >= 0
    assert set(line) >= {"time", "level", "logger", "message"}
    assert len(json_logs.access()) == 2  # the PUT and the GET, once each


def test_hot_routes_log_successes_at_debug_and_refusals_at_info(
        front: AsgiClient, client: Any, json_logs: Any) -> None:
    register(client)
    sent = front.request("POST", f"/v1/producer-groups/{GROUP}/transactions",
                         body=b'{"topic": "t", "body": "x"}',
                         headers=[("Content-Length", "27"), ("X-Request-Id", "r-send")])
    txid = json.loads(sent.body)["transaction_id"]
    front.request("POST", f"/v1/producer-groups/{GROUP}/transactions/{txid}/commit",
                  headers=[("X-Request-Id", "r-commit")])
    front.request("POST", f"/v1/producer-groups/{GROUP}/transactions/{txid}/rollback",
                  headers=[("X-Request-Id", "r-late")])
    lines = {line["request_id"]: line for line in json_logs.access()}
    assert (lines["r-send"]["level"], lines["r-send"]["route"],
            lines["r-send"]["status"]) == ("DEBUG", SEND, 201)
    assert (lines["r-commit"]["level"], lines["r-commit"]["route"]) == ("DEBUG", COMMIT)
    assert (lines["r-late"]["level"], lines["r-late"]["status"]) == ("INFO", 409)


def test_probes_log_at_debug_and_server_errors_at_warning(
        client: Any, json_logs: Any, app: Flask) -> None:
    """And a line logged while Flask serves a request carries its id."""
    @app.get("/test-boom")
    def boom() -> Any:
        logging.getLogger("app.test").warning("about to fail")
        return {"oops": True}, 503

    client.get("/healthz")
    r = client.get("/test-boom")
    by_route = {line["route"]: line for line in json_logs.access()}
    assert by_route["/healthz"]["level"] == "DEBUG"
    assert by_route["/test-boom"]["level"] == "WARNING"
    # a line logged while the request was served carries its id
    [inside] = [x for x in json_logs.records() if x["message"] == "about to fail"]
    assert inside["request_id"] == r.headers["X-Request-Id"]


# -- the HTTP duration histogram ------------------------------------------------------

def test_a_request_moves_the_histogram_under_its_route_pattern(client: Any,
                                                               front: AsgiClient) -> None:
    register(client)
    before = {key: duration_count(*key) for key in [
        (SEND, "POST", 201), (COMMIT, "POST", 200), ("/v1/topics/<topic>/messages", "GET", 200),
        (UNMATCHED, "GET", 404), (UNMATCHED, "OTHER", 405)]}
    txid = send(client).json["transaction_id"]
    sent = front.request("POST", f"/v1/producer-groups/{GROUP}/transactions",
                         body=b'{"topic": "t", "body": "x"}', headers=[("Content-Length", "27")])
    assert sent.status == 201
    finish(client, txid, "commit")
    front.request("GET", "/v1/topics/orders/messages")
    client.get("/v1/topics/orders/messages")
    client.get("/no/such/route")
    client.open("/v1/topics", method="BREW")
    after = {key: duration_count(*key) for key in before}
    assert {key: after[key] - before[key] for key in before} == {
        (SEND, "POST", 201): 2, (COMMIT, "POST", 200): 1,
        ("/v1/topics/<topic>/messages", "GET", 200): 2,
        (UNMATCHED, "GET", 404): 1, (UNMATCHED, "OTHER", 405): 1}


def test_no_raw_path_becomes_a_label(client: Any) -> None:
    register(client)
    send(client, transaction_id="tx-raw-path-label")
    client.get("/v1/topics/raw-topic-label/messages")
    text = client.get("/metrics").data.decode()
    assert "tx-raw-path-label" not in text and "raw-topic-label" not in text
    assert 'route="/v1/topics/<topic>/messages"' in text
