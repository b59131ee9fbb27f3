"""`txmsg subscriptions list|show|create|delete|seek` on both stores: the same descriptions and rules as
/v1/topics/{topic}/subscriptions, a readable table or one JSON document."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from app.web import create_app
from tests.conftest import make_settings
from tests.front_client import front
from tests.integration.helpers import Txmsg, finish, register, send


@pytest.fixture
def client(database_url: str) -> Iterator[Any]:
    app = create_app(make_settings(database_url))
    try:
        client = front(app)
        register(client)
        for i, topic in enumerate(("orders", "orders", "orders", "audit")):
            assert send(client, transaction_id=f"tx-{i}", topic=topic, body="x").status_code == 201
            assert finish(client, f"tx-{i}", "commit").status_code == 200
        for topic, name in (("orders", "billing"), ("orders", "audit-trail"),
                            ("audit", "archive")):
            r = client.put(f"/v1/topics/{topic}/subscriptions/{name}",
                           json={"initial_position": "earliest"})
            assert r.status_code == 201, r.json
        yield client
    finally:
        app.extensions["txmsg"].close()


@pytest.fixture
def txmsg(database_url: str) -> Txmsg:
    return Txmsg(database_url)


def api_subs(client: Any, topic: str) -> list[dict[str, Any]]:
    r = client.get(f"/v1/topics/{topic}/subscriptions")
    assert r.status_code == 200, r.json
    return r.json["subscriptions"]  # type: ignore[no-any-return]


def test_list_as_the_api_describes(client: Any, txmsg: Txmsg) -> None:
    listed = json.loads(txmsg.run("subscriptions", "list", "--json").stdout)
    assert listed == api_subs(client, "audit") + api_subs(client, "orders")
    assert [(s["topic"], s["subscription"], s["backlog"]) for s in listed] == [
        ("audit", "archive", 1), ("orders", "audit-trail", 3), ("orders", "billing", 3)]
    only = json.loads(txmsg.run("subscriptions", "list", "--topic", "orders", "--json").stdout)
    assert only == api_subs(client, "orders")
    assert json.loads(txmsg.run("subscriptions", "list", "--topic", "nope", "--json")
                      .stdout) == []

    assert client.post("/v1/topics/orders/subscriptions/billing/receive",
                       json={"max_messages": 1, "consumer": "worker-1"}).status_code == 200
    lines = txmsg.run("subscriptions", "list").stdout.splitlines()
    assert lines[0].split() == ["topic", "subscription", "type", "tag_filter", "consumers",
                                "backlog", "in_flight", "ack_cursor", "created_at"]
    assert [line.split()[:8] for line in lines[1:]] == [
        ["audit", "archive", "shared", "*", "0", "1", "0", "0"],
        ["orders", "audit-trail", "shared", "*", "0", "3", "0", "0"],
        ["orders", "billing", "shared", "*", "1", "3", "1", "0"]]
    assert lines[0].index("backlog") == lines[1].index("1")


def test_create_show_delete_as_the_api(client: Any, txmsg: Txmsg) -> None:
    created = json.loads(txmsg.run(
        "subscriptions", "create", "orders", "ordered", "--type", "key_shared",
        "--tag-filter", "paid || shipped", "--consumer-timeout-ms", "5000",
        "--ack-timeout-ms", "2000", "--max-redeliveries", "3", "--initial-position",
        "earliest", "--dead-letter-topic", "orders-dlq", "--json").stdout)
    r = client.get("/v1/topics/orders/subscriptions/ordered")
    assert r.status_code == 200 and created == r.json
    assert {k: created[k] for k in ("type", "tag_filter", "consumer_timeout_ms",
                                    "ack_timeout_ms", "max_redeliveries",
                                    "dead_letter_topic", "backlog", "waiting")} == {
        "type": "key_shared", "tag_filter": "paid||shipped", "consumer_timeout_ms": 5000,
        "ack_timeout_ms": 2000, "max_redeliveries": 3, "dead_letter_topic": "orders-dlq",
        "backlog": 0, "waiting": 0}  # none of the three is tagged paid or shipped
    assert json.loads(txmsg.run("subscriptions", "create", "orders", "ordered",
                                "--max-redeliveries", "5", "--json").stdout)[
        "max_redeliveries"] == 5  # an existing one: the options given are changed

    for consumer in ("a", "b"):
        assert client.post("/v1/topics/orders/subscriptions/billing/receive",
                           json={"max_messages": 1, "consumer": consumer}).status_code == 200
    shown = json.loads(txmsg.run("subscriptions", "show", "orders", "billing",
                                 "--json").stdout)
    assert shown == client.get("/v1/topics/orders/subscriptions/billing").json
    assert [(c["name"], c["in_flight"], c["active"]) for c in shown["consumers"]] == [
        ("a", 1, True), ("b", 1, True)]
    lines = txmsg.run("subscriptions", "show", "orders", "billing").stdout.splitlines()
    assert "type:                shared" in lines and "waiting:             0" in lines
    header = lines.index("consumers:") + 1
    assert lines[header].split() == ["name", "last_seen", "in_flight", "active"]
    assert [(line.split()[0], line.split()[2:]) for line in lines[header + 1:]] == [
        ("a", ["1", "True"]), ("b", ["1", "True"])]
    assert txmsg.run("subscriptions", "show", "orders", "ordered").stdout.splitlines()[
        -1] == "consumers: none"

    assert txmsg.run("subscriptions", "delete", "orders", "ordered").stdout == (
        "deleted subscription 'ordered' on topic 'orders'\n")
    assert client.get("/v1/topics/orders/subscriptions/ordered").status_code == 404
    gone = txmsg.run("subscriptions", "show", "orders", "ordered", code=1)
    assert gone.output == ("txmsg: subscription_not_found: no subscription 'ordered' on "
                           "topic 'orders'\n")
    assert txmsg.run("subscriptions", "delete", "orders", "ordered", code=1).output.startswith(
        "txmsg: subscription_not_found: ")


@pytest.mark.parametrize(("args", "code"), [
    (("--type", "round_robin"), "invalid_value"),
    (("--tag-filter", "a||"), "invalid_tag_filter"),
    (("--consumer-timeout-ms", "1"), "out_of_range"),
    (("--ack-timeout-ms", "x"), "invalid_type"),
    (("--max-redeliveries", "-1"), "out_of_range"),
    (("--initial-position", "middle"), "invalid_value"),
    (("--dead-letter-topic", "RMQ_SYS_TRANS_HALF_TOPIC"), "reserved_topic"),
    (("--dead-letter-topic", "orders"), "invalid_dead_letter_topic"),
])
def test_create_refusals_create_nothing(client: Any, txmsg: Txmsg, args: tuple[str, ...],
                                        code: str) -> None:
    before = api_subs(client, "orders")
    result = txmsg.run("subscriptions", "create", "orders", "new", *args, code=1)
    assert result.output.startswith(f"txmsg: {code}: ") and result.output.count("\n") == 1
    assert api_subs(client, "orders") == before


def test_seek_through_the_console_script(client: Any, txmsg: Txmsg) -> None:
    done = txmsg.script("subscriptions", "seek", "orders", "billing", "2", "--json")
    described = json.loads(done.stdout)
    assert (described["ack_cursor"], described["backlog"]) == (2, 1)
    assert [s for s in api_subs(client, "orders") if s["subscription"] == "billing"] == [
        described]
    lines = txmsg.run("subscriptions", "seek", "orders", "billing", "0").stdout.splitlines()
    assert "backlog:      3" in lines
    unknown = txmsg.script("subscriptions", "seek", "orders", "nope", "1", code=1)
    assert unknown.stdout == ""
    assert unknown.stderr.strip().splitlines() == [
        "txmsg: subscription_not_found: no subscription 'nope' on topic 'orders'"]


@pytest.mark.parametrize(("args", "code"), [
    (("orders", "nope", "1"), "subscription_not_found"),
    (("nope", "billing", "1"), "subscription_not_found"),
    (("--", "orders", "billing", "-1"), "out_of_range"),
    (("orders", "billing", "4"), "offset_out_of_range"),  # the topic's next offset is 3
    (("orders", "billing", str(2**63 - 1)), "offset_out_of_range"),
    (("orders", "billing", str(2**63)), "out_of_range"),
    (("orders", "billing", "x"), "invalid_type"),
    (("RMQ_SYS_TRANS_HALF_TOPIC", "billing", "1"), "reserved_topic"),
    (("no spaces", "billing", "1"), "invalid_topic"),
])
def test_seek_refusals_change_nothing(client: Any, txmsg: Txmsg, args: tuple[str, ...],
                                      code: str) -> None:
    before = api_subs(client, "orders")
    result = txmsg.run("subscriptions", "seek", *args, code=1)
    assert result.output.startswith(f"txmsg: {code}: ") and result.output.count("\n") == 1
    assert api_subs(client, "orders") == before
