"""The OpenAPI document: it matches the routes, validates as OpenAPI 3.1, and the app
conforms to it under fuzzing (schemathesis against the in-process WSGI app, on SQLite)."""

from __future__ import annotations

import base64
import functools
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from jsonschema import Draft202012Validator
from openapi_spec_validator import validate
from openapi_spec_validator.validation.exceptions import OpenAPIValidationError

from app.api.openapi import openapi_document
from app.api.routes import ROUTES
from app.domain.messages import (
    MAX_CHECK_URLS,
    MAX_KEYS,
    MAX_MESSAGES,
    MessageIn,
    ProducerGroupIn,
    SingleMessageTransactionIn,
    TransactionIn,
    parse_producer_group,
    parse_transaction,
)
from app.web import create_app
from tests.callbacks import answer, wait_until
from tests.conftest import LiveServer, make_settings
from tests.front_client import front
from tests.fuzz import CHECKS, REGISTER, SEED, check_problem, open_schema
from tests.integration.checker_harness import Harness

HTTP_METHODS = {"get", "put", "post", "delete", "patch", "head", "options", "trace"}


@pytest.fixture(scope="module")
def sqlite_app(sqlite_template: Path, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    path = tmp_path_factory.mktemp("openapi") / "txmsg.db"
    shutil.copy(sqlite_template, path)
    app = create_app(make_settings(f"sqlite:///{path}", max_body_bytes=1024))
    yield app
    app.extensions["txmsg"].close()


def _served(app) -> dict[str, set[str]]:  # type: ignore[no-untyped-def]
    """The methods the front serves on each route's path, as its answer to OPTIONS says."""
    client = front(app)
    routes: dict[str, set[str]] = {}
    for route in ROUTES:
        r = client.open(re.sub(r"\{[^{}]+\}", "x-1", route.path), method="OPTIONS")
        assert r.status_code == 200, route.path
        routes[route.path] = set(r.headers["Allow"].split(", ")) - {"HEAD", "OPTIONS"}
    return routes


def _documented(doc: dict) -> dict[str, set[str]]:
    return {path: {m.upper() for m in item if m in HTTP_METHODS}
            for path, item in doc["paths"].items()}


def test_every_route_is_documented_with_its_methods_and_nothing_else(sqlite_app) -> None:  # type: ignore[no-untyped-def]
    routes = _served(sqlite_app)
    assert "/v1/producer-groups/{group}/transactions/{transaction_id}/commit" in routes
    assert _documented(openapi_document()) == routes


def test_the_document_is_valid_openapi_3_1() -> None:
    doc = openapi_document()
    assert doc["openapi"].startswith("3.1")
    validate(doc)


def test_the_validator_would_catch_a_broken_document() -> None:
    doc = openapi_document()
    doc["components"]["parameters"]["limit"]["in"] = "body"  # Swagger 2, not OpenAPI 3
    with pytest.raises(OpenAPIValidationError):
        validate(doc)


def test_every_error_response_is_problem_json() -> None:
    doc = openapi_document()
    problem = doc["components"]["schemas"]["Problem"]
    assert set(problem["required"]) == {"type", "title", "status", "detail", "code", "instance"}
    assert problem["properties"]["errors"]["type"] == "array"
    seen = set()
    for path, item in doc["paths"].items():
        for method, op in item.items():
            if method not in HTTP_METHODS:
                continue
            for status, response in op["responses"].items():
                if int(status) >= 400:
                    seen.add(status)
                    assert response["content"] == {"application/problem+json": {
                        "schema": {"$ref": "#/components/schemas/Problem"}}}, (path, method)
            # a bad path parameter is a 400 wherever there is one
            if "{" in path:
                assert "400" in op["responses"], (path, method)
    assert seen == {"400", "401", "403", "404", "409", "413", "422", "503"}
    for name in ("RouteNotFound", "MethodNotAllowed", "PayloadTooLarge"):
        assert "application/problem+json" in doc["components"]["responses"][name]["content"]


def test_the_document_carries_the_contract_details() -> None:
    doc = openapi_document()
    params = doc["components"]["parameters"]
    assert params["limit"]["schema"] == {"type": "integer", "minimum": 1, "maximum": 1000,
                                         "default": 100}
    assert params["from_offset"]["schema"]["minimum"] == 0
    assert params["state"]["schema"]["enum"] == ["PREPARED", "COMMITTED", "ROLLED_BACK",
                                                 "DISCARDED"]
    assert params["group"]["schema"]["pattern"] == r"^[A-Za-z0-9_%|-]{1,127}$"
    schemas = doc["components"]["schemas"]
    assert set(schemas["CommittedMessage"]["properties"]) == {
        "offset", "message_id", "transaction_id", "producer_group", "keys", "tag",
        "ordering_key", "properties", "body", "body_base64", "created_at", "committed_at"}
    assert set(schemas["SentTransaction"]["required"]) == {
        "transaction_id", "producer_group", "state", "created_at", "messages"}
    assert {"transaction_id", "producer_group", "state", "check_times", "created_at",
            "resolved_at", "messages"} <= set(schemas["Transaction"]["required"])
    check = doc["webhooks"]["transactionCheck"]["post"]
    assert check["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/CheckRequest"}
    assert set(schemas["CheckRequest"]["required"]) == {
        "producer_group", "transaction_id", "check_times", "created_at", "messages"}
    resolution = schemas["CheckResponse"]["properties"]["resolution"]
    assert resolution == {"$ref": "#/components/schemas/Resolution"}
    assert schemas["Resolution"]["enum"] == ["COMMIT", "ROLLBACK", "UNKNOWN"]


def test_component_schemas_are_the_models() -> None:
    """Requests are described by the models that validate them, field for field and limit
    for limit; the single-message form has a message's fields and a send's options."""
    schemas = openapi_document()["components"]["schemas"]
    for model in (MessageIn, TransactionIn, ProducerGroupIn, SingleMessageTransactionIn):
        assert set(schemas[model.__name__]["properties"]) == set(model.model_fields)
        assert schemas[model.__name__]["additionalProperties"] is False
    assert set(SingleMessageTransactionIn.model_fields) == (
        set(MessageIn.model_fields) | set(TransactionIn.model_fields) - {"messages"})
    assert schemas["MessageIn"]["properties"]["keys"]["maxItems"] == MAX_KEYS
    assert schemas["TransactionIn"]["properties"]["messages"]["maxItems"] == MAX_MESSAGES
    assert schemas["ProducerGroupIn"]["properties"]["check_urls"]["maxItems"] == MAX_CHECK_URLS
    send = openapi_document()["paths"]["/v1/producer-groups/{group}/transactions"]["post"]
    assert send["requestBody"]["content"]["application/json"]["schema"] == {"oneOf": [
        {"$ref": "#/components/schemas/TransactionIn"},
        {"$ref": "#/components/schemas/SingleMessageTransactionIn"}]}


def test_the_examples_are_valid_requests() -> None:
    """Each request example passes both the document's schema and the model's validation."""
    paths = openapi_document()["paths"]
    for path, parse in (("/v1/producer-groups/{group}", parse_producer_group),
                        ("/v1/producer-groups/{group}/transactions",
                         functools.partial(parse_transaction, max_body_bytes=1024))):
        op = next(op for op in paths[path].values() if "requestBody" in op)
        media = op["requestBody"]["content"]["application/json"]
        for example in media["examples"].values():
            parse(example["value"])
            conforms_to(media["schema"], example["value"])


def test_the_app_serves_the_document(sqlite_app) -> None:  # type: ignore[no-untyped-def]
    r = front(sqlite_app).get("/openapi.json")
    assert r.status_code == 200 and r.mimetype == "application/json"
    assert r.json == openapi_document()


def _call(client, step: tuple[str, str, Any, int]) -> None:  # type: ignore[no-untyped-def]
    method, path, json, status = step
    r = client.open(path, method=method, json=json)
    assert r.status_code == status, r.json


@pytest.fixture(scope="module")
def fuzz_app(sqlite_app):  # type: ignore[no-untyped-def]
    """The app as served (Granian, in this process) in the state the fuzz starts from
    (``tests.fuzz.SEED``)."""
    client = front(sqlite_app)
    for step in SEED:
        _call(client, step)
    server = LiveServer(sqlite_app)
    yield server
    server.stop()


@pytest.mark.slow
@open_schema.parametrize()
@settings(max_examples=40, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
def test_app_conforms_to_its_document(case, fuzz_app) -> None:  # type: ignore[no-untyped-def]
    """Positive and negative cases: no 5xx, documented statuses, content types and bodies,
    schema-invalid input refused, every error problem+json with a code."""
    if case.method == "POST":  # a fuzzed DELETE may have removed the group
        _call(front(fuzz_app.app), REGISTER)
    check_problem(case.call_and_validate(base_url=fuzz_app.url, checks=CHECKS))


def conforms(instance: Any, schema_name: str) -> None:
    conforms_to({"$ref": f"#/components/schemas/{schema_name}"}, instance)


def conforms_to(schema: dict[str, Any], instance: Any) -> None:
    validator = Draft202012Validator(
        {"components": openapi_document()["components"], **schema},
        format_checker=Draft202012Validator.FORMAT_CHECKER)
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
              for e in validator.iter_errors(instance)]
    assert not errors, (schema, errors, instance)


def test_checks_and_states_the_fuzzer_cannot_reach_conform(harness: Harness) -> None:
    """Check callbacks (the document's webhook), and answers about DISCARDED, resumed and
    committed transactions, against their schemas, on both stores."""
    h = harness
    cb = h.callback(answer("UNKNOWN"))
    h.register("shop", [cb.url])
    sent = h.send("shop", "order-1", check_url=cb.url, messages=[
        {"topic": "orders", "body": "text", "keys": ["k1"], "tag": "t", "ordering_key": "o",
         "properties": {"p": "v"}},
        {"topic": "payments", "body_base64": base64.b64encode(b"\x00\xff").decode()}])
    conforms(sent, "SentTransaction")
    h.start_checker()
    wait_until(lambda: h.state("shop", "order-1") == "DISCARDED", what="discard")
    assert [c["check_times"] for c in cb.checks][:3] == [1, 2, 3]
    for check in cb.checks:
        conforms(check, "CheckRequest")
    assert {"body", "body_base64"} == {k for m in cb.checks[0]["messages"] for k in m
                                       if k.startswith("body")}

    c = h.client
    base = "/v1/producer-groups/shop/transactions"
    conforms(h.txn("shop", "order-1"), "Transaction")
    page = c.get("/v1/topics/TRANS_CHECK_MAX_TIME_TOPIC/messages").json
    assert len(page["messages"]) == 2
    conforms(page, "TopicPage")
    conforms(c.get(f"/v1/messages/{sent['messages'][1]['message_id']}").json, "Message")
    conforms(c.post(f"{base}/order-1/resume-check").json, "ResumedTransaction")
    conforms(c.get(f"{base}?state=PREPARED").json, "TransactionList")
    for _ in range(2):  # the first commit and its repetition
        r = c.post(f"{base}/order-1/commit")
        assert r.status_code == 200
        conforms(r.json, "CommittedTransaction")
    conforms(h.txn("shop", "order-1"), "Transaction")
    conforms(c.get("/v1/topics/orders/messages").json, "TopicPage")
    conforms(c.get(f"/v1/messages/{sent['messages'][0]['message_id']}").json, "Message")
    conforms(c.get("/v1/topics").json, "TopicList")
    conforms(c.get(f"{base}?limit=1").json, "TransactionList")
    retry = c.post(base, json={"transaction_id": "order-1", "check_url": cb.url, "messages": [
        {"topic": "orders", "body": "text", "keys": ["k1"], "tag": "t", "ordering_key": "o",
         "properties": {"p": "v"}},
        {"topic": "payments", "body_base64": base64.b64encode(b"\x00\xff").decode()}]})
    assert retry.status_code == 200
    conforms(retry.json, "SentTransaction")
    h.send("shop", "order-2")
    conforms(c.post(f"{base}/order-2/rollback").json, "RolledBackTransaction")
    conforms(c.get("/v1/producer-groups/shop").json, "ProducerGroup")
    conforms(c.get("/healthz").json, "Health")
    conforms(c.get("/readyz").json, "Ready")


def test_conforms_sees_extra_missing_and_mistyped_fields() -> None:
    conforms({"status": "ok"}, "Health")
    for bad in ({"status": "ok", "extra": 1}, {}, {"status": 1}):
        with pytest.raises(AssertionError):
            conforms(bad, "Health")
    with pytest.raises(AssertionError):
        conforms({"topics": [{"topic": "t", "next_offset": 0}], "created_at": "yesterday"},
                 "TopicList")
