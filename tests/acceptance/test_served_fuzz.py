"""The API as ``txmsg serve`` serves it (Granian, the ASGI front, Flask behind a2wsgi)
conforms to its document under fuzzing, over real HTTP, with access control off and on
(every request then carries the admin token): the in-process fuzz in
tests/integration/api/test_openapi.py reaches the Flask app alone."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from hypothesis import HealthCheck, settings

from tests.acceptance.conftest import Served, start_serve
from tests.fuzz import CHECKS, REGISTER, SEED, check_problem, open_schema, schema

ADMIN_TOKEN = "served-fuzz-admin-token-0123456789"
AS_ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


def _call(url: str, step: tuple[str, str, Any, int], headers: dict[str, str]) -> None:
    method, path, json, status = step
    r = requests.request(method, f"{url}{path}", json=json, headers=headers, timeout=10)
    assert r.status_code == status, r.text


def _serve(cwd: Path, headers: dict[str, str], **env: str) -> Served:
    server = start_serve({"TXMSG_DATABASE_URL": f"sqlite:///{cwd}/txmsg.db",
                          "TXMSG_MAX_BODY_BYTES": "1024", **env}, cwd, "--no-checker")
    try:
        for step in SEED:
            _call(server.url, step, headers)
    except BaseException:
        server.stop()
        raise
    return server


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    server = _serve(tmp_path_factory.mktemp("served-fuzz"), {})
    yield server
    server.stop()


@pytest.fixture(scope="module")
def served_secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """With access control on: every request carries the admin token."""
    server = _serve(tmp_path_factory.mktemp("served-fuzz-secured"), AS_ADMIN,
                    TXMSG_ADMIN_TOKEN=ADMIN_TOKEN)
    assert requests.get(f"{server.url}/v1/topics", timeout=10).status_code == 401
    yield server
    server.stop()
    assert ADMIN_TOKEN not in server.log.read_text()


def _fuzz(case: Any, server: Served, headers: dict[str, str]) -> None:
    if case.method == "POST":  # a fuzzed DELETE may have removed the group
        _call(server.url, REGISTER, headers)
    # The document's bearer scheme has the fuzzer write "Bearer <anything>" where a token
    # goes: that becomes the admin token. A header it left out or mangled on purpose (a
    # negative case) is sent as it is, and must be refused.
    if case.headers and case.headers.get("Authorization", "").startswith("Bearer "):
        case.headers.update(headers)
    check_problem(case.call_and_validate(base_url=server.url, checks=CHECKS))
    assert server.proc.poll() is None, server.log.read_text()[-3000:]


@pytest.mark.slow
@open_schema.parametrize()
@settings(max_examples=25, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
def test_the_served_api_conforms_to_its_document(case: Any, served: Served) -> None:
    _fuzz(case, served, {})


@pytest.mark.slow
@schema.parametrize()
@settings(max_examples=25, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
def test_the_served_api_conforms_to_its_document_with_access_control_on(
        case: Any, served_secured: Served) -> None:
    _fuzz(case, served_secured, AS_ADMIN)
