"""The API as ``txmsg serve`` serves it (Granian, the ASGI front, Flask behind a2wsgi)
conforms to its document under fuzzing, over real HTTP: the in-process fuzz in
tests/integration/test_openapi.py reaches the Flask app alone."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import requests
from hypothesis import HealthCheck, settings

from tests.acceptance.conftest import Served, start_serve
from tests.fuzz import CHECKS, REGISTER, SEED, check_problem, schema


def _call(url: str, step: tuple[str, str, Any, int]) -> None:
    method, path, json, status = step
    r = requests.request(method, f"{url}{path}", json=json, timeout=10)
    assert r.status_code == status, r.text


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    cwd = tmp_path_factory.mktemp("served-fuzz")
    server = start_serve({"TXMSG_DATABASE_URL": f"sqlite:///{cwd}/txmsg.db",
                          "TXMSG_MAX_BODY_BYTES": "1024"}, cwd, "--no-checker")
    try:
        for step in SEED:
            _call(server.url, step)
        yield server
    finally:
        server.stop()


@pytest.mark.slow
@schema.parametrize()
@settings(max_examples=25, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
def test_the_served_api_conforms_to_its_document(case: Any, served: Served) -> None:
    if case.method == "POST":  # a fuzzed DELETE may have removed the group
        _call(served.url, REGISTER)
    check_problem(case.call_and_validate(base_url=served.url, checks=CHECKS))
    assert served.proc.poll() is None, served.log.read_text()[-3000:]
