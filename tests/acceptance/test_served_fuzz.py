"""The API as ``txmsg serve`` serves it (Granian, the ASGI front, Flask behind a2wsgi)
conforms to its document under fuzzing, over real HTTP: the in-process fuzz in
tests/integration/test_openapi.py reaches the Flask app alone."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, settings

from app.api.openapi import openapi_document
from tests.acceptance.conftest import Served, start_serve
from tests.integration.test_openapi import CHECKS, FUZZ_GROUP, check_problem

schema = schemathesis.openapi.from_dict(openapi_document())


def _register(url: str) -> None:
    r = requests.put(f"{url}/v1/producer-groups/{FUZZ_GROUP}",
                     json={"check_urls": ["http://127.0.0.1:9/check"]}, timeout=10)
    assert r.status_code == 200, r.text


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    cwd = tmp_path_factory.mktemp("served-fuzz")
    server = start_serve({"TXMSG_DATABASE_URL": f"sqlite:///{cwd}/txmsg.db",
                          "TXMSG_MAX_BODY_BYTES": "1024"}, cwd, "--no-checker")
    try:
        _register(server.url)
        base = f"{server.url}/v1/producer-groups/{FUZZ_GROUP}/transactions"
        for txid, op in (("order-1001", "commit"), ("order-1002", None)):
            sent = requests.post(base, json={"transaction_id": txid, "topic": "orders",
                                             "body": "hi"}, timeout=10)
            assert sent.status_code == 201, sent.text
            if op:
                assert requests.post(f"{base}/{txid}/{op}", timeout=10).status_code == 200
        yield server
    finally:
        server.stop()


@pytest.mark.slow
@schema.parametrize()
@settings(max_examples=25, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
def test_the_served_api_conforms_to_its_document(case: Any, served: Served) -> None:
    if case.method == "POST":  # a fuzzed DELETE may have removed the group
        _register(served.url)
    check_problem(case.call_and_validate(base_url=served.url, checks=CHECKS))
    assert served.proc.poll() is None, served.log.read_text()[-3000:]
