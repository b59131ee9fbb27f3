"""Bad input, on both stores: each refusal is problem+json with its stable code and status,
and writes nothing (every table's row count is unchanged). The cases are in
``bad_input_cases``; tests/integration/api/test_asgi_front.py runs them through the ASGI front."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.bad_input_cases import (
    CASES,
    GROUP,
    GROUP_URL,
    MAX_BODY,
    MSG,
    SEED,
    SEND,
    TXN,
    UNSET,
    Case,
    b64,
    with_msg,
)
from tests.integration.helpers import register, row_counts

pytestmark = pytest.mark.settings(max_body_bytes=MAX_BODY)


@pytest.fixture
def seeded(client):  # type: ignore[no-untyped-def]
    """The state the cases assume (``SEED``)."""
    for method, path, json, status in SEED:
        r = client.open(path, method=method, json=json)
        assert r.status_code == status, r.json
    return client


@pytest.mark.parametrize("c", CASES)
def test_bad_input_is_refused_and_writes_nothing(app, seeded, c: Case) -> None:  # type: ignore[no-untyped-def]
    engine = app.extensions["txmsg"].engine
    before = row_counts(engine)
    kwargs: dict[str, Any] = {}
    if c.json is not UNSET:
        kwargs["json"] = c.json
    elif c.data is not None:
        kwargs.update(data=c.data, content_type="application/json")
    r = seeded.open(c.path, method=c.method, **kwargs)
    assert r.status_code == c.status, r.get_data(as_text=True)
    assert r.mimetype == "application/problem+json"
    problem = r.get_json(force=True)
    assert problem["code"] == c.code, problem
    assert problem["status"] == c.status
    assert problem["type"] == f"urn:txmsg:problem:{c.code}"
    assert problem["title"] and problem["detail"]
    assert problem["instance"] == r.request.path
    if c.status == 405:
        assert r.headers["Allow"]
    assert row_counts(engine) == before


def test_the_boundaries_themselves_are_accepted(client) -> None:  # type: ignore[no-untyped-def]
    """The other side of the limits above, so that the refusals are not blanket ones."""
    register(client, GROUP)
    ok = [
        with_msg(topic="t" * 127),
        with_msg(topic="A-z_0%9|x"),
        with_msg(body="x" * MAX_BODY),
        with_msg(body="é" * (MAX_BODY // 2)),
        # base64 text longer than the limit, decoded body exactly at it
        {"topic": "orders", "body_base64": b64(MAX_BODY)},
        {"topic": "orders", "body": None, "body_base64": "aGk="},
        with_msg(properties={f"k{i}": "v" for i in range(128)}),
        with_msg(properties={"k": "v" * (16 * 1024 - 1)}),
        with_msg(transaction_id="t" * 128),
        with_msg(ordering_key="k"),
        with_msg(ordering_key="é" * 256),
        with_msg(ordering_key=None),
        with_msg(check_url="https://127.0.0.1:9/check", check_immunity_seconds=0),
        {"messages": [MSG] * 1000},
    ]
    for body in ok:
        r = client.post(SEND, json=body)
        assert r.status_code == 201, (body if len(str(body)) < 200 else "...", r.json)
    for timeout in (100, 60000):
        r = client.put(GROUP_URL, json={"check_urls": [f"http://h{i}:9/c" for i in range(16)],
                                        "check_timeout_ms": timeout})
        assert r.status_code == 200, r.json
    for q in ("limit=1", "limit=1000", "from_offset=0", "from_offset=9223372036854775807"):
        assert client.get(f"/v1/topics/orders/messages?{q}").status_code == 200, q
    r = client.get("/v1/topics/TRANS_CHECK_MAX_TIME_TOPIC/messages")
    assert r.status_code == 200 and r.json["messages"] == []
    for state in ("PREPARED", "COMMITTED", "ROLLED_BACK", "DISCARDED"):
        assert client.get(f"{TXN}?state={state}").status_code == 200


def test_request_over_the_server_limit_is_413_problem(app, seeded) -> None:  # type: ignore[no-untyped-def]
    """Werkzeug's own limit on the request size answers problem+json too."""
    app.config["MAX_CONTENT_LENGTH"] = 4096
    engine = app.extensions["txmsg"].engine
    before = row_counts(engine)
    r = seeded.post(SEND, json=with_msg(properties={"k": "v" * 5000}))
    assert r.status_code == 413 and r.mimetype == "application/problem+json"
    assert r.json["code"] == "payload_too_large"
    assert row_counts(engine) == before


def test_a_retried_send_with_the_same_messages_is_not_a_conflict(seeded) -> None:  # type: ignore[no-untyped-def]
    """The control for the 409 cases: same id, same messages and check settings, in either
    form -> 200 (other check settings are a conflict too: test_lifecycle)."""
    r = seeded.post(SEND, json=with_msg(transaction_id="t-open", check_immunity_seconds=0))
    assert r.status_code == 200
    r = seeded.post(SEND, json={"transaction_id": "t-open", "messages": [MSG]})
    assert r.status_code == 200
