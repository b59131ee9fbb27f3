"""`txmsg serve` with TXMSG_LOG_FORMAT=json: every line of its output a JSON object, the
request ids echoed and logged, and none of the secrets planted along the way."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import requests
from sqlalchemy.engine import make_url

from tests.callbacks import wait_until
from tests.conftest import free_port

TOKEN = "txmsg_0123456789abcdef_PLANTEDtokenSECRETvalue0123456789abcdefghij"
SIGNING = "whsec_PLANTEDsigningSECRET42"
DB_PASSWORD = "PLANTED-db-password"
CALLBACK_PASSWORD = "PLANTED-callback-password"
QUERY_SECRET = "PLANTED-query-secret"
PLANTED = [TOKEN.rsplit("_", 1)[1], SIGNING.removeprefix("whsec_"), DB_PASSWORD,
           CALLBACK_PASSWORD, QUERY_SECRET]


def _lines(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


@pytest.mark.slow
@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_json_logs_of_a_real_serve_carry_ids_and_no_secret(
        serve_factory: Any, request: pytest.FixtureRequest, store: str) -> None:
    env = {"TXMSG_LOG_FORMAT": "json", "TXMSG_TRANSACTION_TIMEOUT_SECONDS": "0",
           "TXMSG_CHECK_INTERVAL_SECONDS": "0.2", "TXMSG_CHECK_MAX_TIMES": "2"}
    if store == "postgres":
        url = make_url(request.getfixturevalue("postgres_url")).set(password=DB_PASSWORD)
        env["TXMSG_DATABASE_URL"] = url.render_as_string(hide_password=False)
    served = serve_factory(env)
    s = requests.Session()
    s.headers["Authorization"] = f"Bearer {TOKEN}"
    base = served.url
    # a callback nobody listens on, with a secret in its query; with credentials it is
    # refused (and the refusal logs no password)
    callback = f"http://127.0.0.1:{free_port()}/check?token={QUERY_SECRET}"
    with_password = callback.replace("http://", f"http://probe:{CALLBACK_PASSWORD}@")
    r = s.put(f"{base}/v1/producer-groups/shop", json={"check_urls": [with_password]})
    assert r.status_code == 400 and r.json()["code"] == "invalid_callback_url"
    r = s.put(f"{base}/v1/producer-groups/shop", json={"check_urls": [callback]},
              headers={"X-Request-Id": "trace-put-1"})
    assert r.status_code == 200 and r.headers["X-Request-Id"] == "trace-put-1"
    sent = s.post(f"{base}/v1/producer-groups/shop/transactions",
                  json={"transaction_id": "t-1", "topic": "orders", "body": "x"})
    assert sent.status_code == 201 and len(sent.headers["X-Request-Id"]) == 32
    for topic in (TOKEN, SIGNING):  # secrets in a path (valid topic names), logged at INFO
        assert s.get(f"{base}/v1/topics/{topic}/messages").status_code == 200
    wait_until(lambda: len([x for x in _lines(served.log) if x.get("result")]) >= 2,
               timeout=60, what="two checks logged")
    served.stop()

    lines = _lines(served.log)  # every line parses: one JSON object each
    text = served.log.read_text()
    for secret in PLANTED:
        assert secret not in text, secret
    assert all({"time", "level", "logger", "message"} <= set(x) for x in lines)
    [put] = [x for x in lines if x.get("request_id") == "trace-put-1"]
    assert (put["logger"], put["method"], put["route"], put["status"]) == (
        "txmsg.access", "PUT", "/v1/producer-groups/<group>", 200)
    checks = [x for x in lines if x.get("result")]
    assert [(c["transaction"], c["group"], c["check"], c["result"]) for c in checks[:2]] == [
        ("t-1", "shop", 1, "REFUSED"), ("t-1", "shop", 2, "REFUSED")]
    assert all(c["url"].startswith("http://127.0.0.1:") and c["url"].endswith("/check?…")
               for c in checks)
    assert any(x["logger"] == "_granian" for x in lines)  # Granian's own lines are JSON too


FORGED = "2026-11-26%2015:37:00,000%20WARNING%20txmsg.access:%20FORGED"
LINE_START = re.compile(rb"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [A-Z]+ [\w.]+: ")


@pytest.mark.slow
def test_text_logs_of_a_real_serve_escape_what_requests_bring(serve_factory: Any) -> None:
    """Paths with a forged line, a NUL, a carriage return, an ANSI escape, a Unicode line
    separator, to Flask's routes and to the front's: one request, one line."""
    served = serve_factory({"TXMSG_LOG_LEVEL": "DEBUG"})
    paths = [f"/v1/nothing%0a{FORGED}", f"/v1/nothing%00%0d%1b[31m%e2%80%a8{FORGED}",
             f"/v1/topics/t%0a{FORGED}/messages",
             f"/v1/producer-groups/g%0a{FORGED}/transactions"]
    for path in paths:
        r = requests.post(f"{served.url}{path}", json={"topic": "t", "body": "b"},
                          headers={"X-Request-Id": f"forged%0a{FORGED}"})
        assert r.status_code in (400, 404, 405), (path, r.status_code)
    served.stop()

    output = served.log.read_bytes()
    assert b"\x00" not in output and b"\x1b" not in output and b"\r" not in output
    lines = output.decode().splitlines()  # Unicode's line breaks split too
    assert lines and all(LINE_START.match(line.encode()) or line.startswith(" ")
                         for line in lines), lines
    forged = [line for line in lines if "FORGED" in line]
    access = [line for line in forged if " txmsg.access: POST " in line]
    assert forged == access and len(access) == len(paths), forged
    assert all(line.count("FORGED") == 1 for line in access)
    assert "\\n2026-11-26 15:37:00,000 WARNING txmsg.access: FORGED" in access[0]
    assert "\\x00\\r\\x1b[31m\\u2028" in access[1]
