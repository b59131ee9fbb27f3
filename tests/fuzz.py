"""The schemathesis fuzz of the API, in process (tests/integration/api/test_openapi.py) and as
`txmsg serve` serves it (tests/acceptance/test_served_fuzz.py): the document fuzzed, the
state fuzzed from, and what every answer is held to."""

from __future__ import annotations

import re
from typing import Any

import schemathesis
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from app.api.openapi import openapi_document


def without_access_control(doc: dict[str, Any]) -> dict[str, Any]:
    """The document as it applies to a server without TXMSG_ADMIN_TOKEN: no operation needs
    a token (the fuzzer would otherwise expect a request without one to be refused)."""
    doc.pop("security", None)
    for item in doc["paths"].values():
        for op in item.values():
            if isinstance(op, dict):
                op.pop("security", None)
    return doc


# loaded eagerly from the document (the app serves the same, tested in test_openapi):
# schemathesis' lazy from_fixture loader does not run on pytest 9.
# ``schema`` fuzzes a server with access control on (requests carry the admin token),
# ``open_schema`` one without
schema = schemathesis.openapi.from_dict(openapi_document())
open_schema = schemathesis.openapi.from_dict(without_access_control(openapi_document()))

FUZZ_GROUP = "orders-svc"  # the document's example producer group
_TXNS = f"/v1/producer-groups/{FUZZ_GROUP}/transactions"
# (method, path, JSON body, expected status)
REGISTER = ("PUT", f"/v1/producer-groups/{FUZZ_GROUP}",
            {"check_urls": ["http://127.0.0.1:9/check"]}, 200)
# the group with the document's example transactions, one committed and one open
SEED = [
    REGISTER,
    ("POST", _TXNS, {"transaction_id": "order-1001", "topic": "orders", "body": "hi"}, 201),
    ("POST", f"{_TXNS}/order-1001/commit", None, 200),
    ("POST", _TXNS, {"transaction_id": "order-1002", "topic": "orders", "body": "hi"}, 201),
]

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_headers_conformance, response_schema_conformance, negative_data_rejection]


def check_problem(response: Any) -> None:
    """An error answer is problem+json with a stable code and its own status."""
    if response.status_code >= 400:
        assert response.headers["content-type"][0].startswith("application/problem+json")
        body = response.json()
        assert re.fullmatch(r"[a-z0-9]+(_[a-z0-9]+)*", body["code"])
        assert body["status"] == response.status_code
