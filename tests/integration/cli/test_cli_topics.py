"""`txmsg topics list|show|retention` on both stores: the same records and rules as
/v1/topics, a readable table or one JSON document."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from app.web import create_app
from tests.conftest import make_settings
from tests.front_client import front
from tests.integration.helpers import Txmsg, finish, register, send

DEFAULT = 259200


@pytest.fixture
def client(database_url: str) -> Iterator[Any]:
    app = create_app(make_settings(database_url))
    try:
        client = front(app)
        register(client)
        for i, topic in enumerate(("orders", "orders", "audit")):
            assert send(client, transaction_id=f"tx-{i}", topic=topic, body="x").status_code == 201
            assert finish(client, f"tx-{i}", "commit").status_code == 200
        yield client
    finally:
        app.extensions["txmsg"].close()


@pytest.fixture
def txmsg(database_url: str) -> Txmsg:
    return Txmsg(database_url)


def api_topic(client: Any, topic: str) -> dict[str, Any]:
    r = client.get(f"/v1/topics/{topic}")
    assert r.status_code == 200, r.json
    return r.json  # type: ignore[no-any-return]


def test_list_and_show(client: Any, txmsg: Txmsg) -> None:
    listed = json.loads(txmsg.run("topics", "list", "--json").stdout)
    assert listed == [api_topic(client, "audit"), api_topic(client, "orders")]
    assert listed[1] == {"topic": "orders", "first_offset": 0, "next_offset": 2,
                         "retention_seconds": DEFAULT, "retention_default": True}
    assert json.loads(txmsg.run("topics", "show", "orders", "--json").stdout) == listed[1]

    lines = txmsg.run("topics", "list").stdout.splitlines()
    assert lines[0].split() == ["topic", "first_offset", "next_offset", "retention_seconds"]
    assert lines[1].split() == ["audit", "0", "1", str(DEFAULT), "(default)"]
    assert lines[2].split() == ["orders", "0", "2", str(DEFAULT), "(default)"]
    assert lines[0].index("next_offset") == lines[2].index("2")
    assert txmsg.run("topics", "show", "audit").stdout.splitlines() == [
        "topic:             audit", "first_offset:      0", "next_offset:       1",
        f"retention_seconds: {DEFAULT} (default)"]


def test_retention_set_and_back_to_default(client: Any, txmsg: Txmsg) -> None:
    lines = txmsg.run("topics", "retention", "orders", "3600").stdout.splitlines()
    assert lines[-1] == "retention_seconds: 3600"
    assert api_topic(client, "orders")["retention_seconds"] == 3600
    made = json.loads(txmsg.run("topics", "retention", "new-topic", "60", "--json").stdout)
    assert made == {"topic": "new-topic", "first_offset": 0, "next_offset": 0,
                    "retention_seconds": 60, "retention_default": False}
    back = json.loads(txmsg.run("topics", "retention", "orders", "default", "--json").stdout)
    assert back == api_topic(client, "orders")
    assert (back["retention_seconds"], back["retention_default"]) == (DEFAULT, True)


@pytest.mark.parametrize(("args", "code"), [
    (("show", "nope"), "topic_not_found"),
    (("show", "RMQ_SYS_TRANS_HALF_TOPIC"), "reserved_topic"),
    (("show", "no spaces"), "invalid_topic"),
    (("retention", "orders", "59"), "out_of_range"),
    (("retention", "orders", "31536001"), "out_of_range"),
    (("retention", "orders", "1h"), "invalid_type"),
    (("retention", "RMQ_SYS_x", "3600"), "reserved_topic"),
])
def test_refusals_are_one_line_and_change_nothing(client: Any, txmsg: Txmsg,
                                                  args: tuple[str, ...], code: str) -> None:
    before = txmsg.run("topics", "list", "--json").stdout
    result = txmsg.run("topics", *args, code=1)
    assert result.stdout == ""
    assert result.stderr.startswith(f"txmsg: {code}: ") and result.stderr.count("\n") == 1
    assert txmsg.run("topics", "list", "--json").stdout == before


def test_the_console_script(client: Any, txmsg: Txmsg) -> None:
    listed = json.loads(txmsg.script("topics", "list", "--json").stdout)
    assert [t["topic"] for t in listed] == ["audit", "orders"]
    set_ = json.loads(txmsg.script("topics", "retention", "audit", "600", "--json").stdout)
    assert set_ == {**listed[0], "retention_seconds": 600, "retention_default": False}
    assert json.loads(txmsg.script("topics", "show", "audit", "--json").stdout) == set_
    refused = txmsg.script("topics", "show", "nope", code=1)
    assert refused.stdout == "" and refused.stderr == "txmsg: topic_not_found: no topic 'nope'\n"
