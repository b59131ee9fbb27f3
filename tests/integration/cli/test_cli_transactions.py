"""`txmsg transactions list|show|resume|commit|rollback` on both stores: the API's rules
and errors, through the API's lifecycle; readable tables, or one JSON document."""

from __future__ import annotations

import json
import shlex
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from app.storage import transactions
from app.storage.schema import op_log
from app.web import create_app
from tests.conftest import make_settings
from tests.front_client import front
from tests.integration.helpers import Txmsg, discard_after_one_check, finish, register, send

GROUP = "orders-svc"
LIST_KEYS = {"transaction_id", "producer_group", "state", "check_times", "created_at",
             "resolved_at", "check_url", "check_immunity_seconds", "message_count",
             "next_check_at"}  # next_check_at: while PREPARED


@pytest.fixture
def api(database_url: str) -> Iterator[Any]:
    app = create_app(make_settings(database_url))
    try:
        yield app
    finally:
        app.extensions["txmsg"].close()


@pytest.fixture
def txmsg(database_url: str) -> Txmsg:
    return Txmsg(database_url)


def sources(app: Any, txid: str) -> list[tuple[str, str]]:
    with app.extensions["txmsg"].engine.connect() as conn:
        row = transactions.get_txn(conn, GROUP, txid)
        assert row is not None
        return [(r.op, r.source) for r in conn.execute(
            select(op_log).where(op_log.c.txn_id == row.id).order_by(op_log.c.id))]


def test_list_filters_by_group_and_state_oldest_first(api: Any, txmsg: Txmsg) -> None:
    client = front(api)
    register(client)
    register(client, "billing")
    for i in range(3):
        assert send(client, transaction_id=f"tx-{i}").status_code == 201
    assert send(client, "billing", transaction_id="bill-0").status_code == 201
    assert finish(client, "tx-1", "commit").status_code == 200

    everything = json.loads(txmsg.run("transactions", "list", "--json").stdout)
    assert [(t["producer_group"], t["transaction_id"]) for t in everything] == [
        (GROUP, "tx-0"), (GROUP, "tx-1"), (GROUP, "tx-2"), ("billing", "bill-0")]
    assert set(everything[0]) == LIST_KEYS
    assert everything == json.loads(client.get(f"/v1/producer-groups/{GROUP}/transactions")
                                    .data)["transactions"] + [json.loads(client.get(
                                        "/v1/producer-groups/billing/transactions").data)
                                        ["transactions"][0]]
    prepared = json.loads(txmsg.run("transactions", "list", "--group", GROUP, "--state",
                                    "prepared", "--json").stdout)
    assert [t["transaction_id"] for t in prepared] == ["tx-0", "tx-2"]
    first = json.loads(txmsg.run("transactions", "list", "--limit", "2", "--json").stdout)
    assert [t["transaction_id"] for t in first] == ["tx-0", "tx-1"]

    lines = txmsg.run("transactions", "list", "--state", "COMMITTED").stdout.splitlines()
    assert lines[0].split() == ["producer_group", "transaction_id", "state", "check_times",
                                "message_count", "created_at", "resolved_at"]
    assert len(lines) == 2 and lines[1].split()[:5] == [GROUP, "tx-1", "COMMITTED", "0", "1"]
    assert lines[0].index("state") == lines[1].index("COMMITTED")  # aligned columns
    assert txmsg.run("transactions", "list", "--group", "nobody").stdout.split() == \
        lines[0].split()  # the header alone


@pytest.mark.parametrize(("args", "code"), [
    (("list", "--state", "DONE"), "invalid_query_parameter"),
    (("list", "--group", "no spaces"), "invalid_producer_group"),
    (("show", GROUP, "missing"), "transaction_not_found"),
    (("show", "no spaces", "tx-0"), "invalid_producer_group"),
    (("commit", GROUP, "missing"), "transaction_not_found"),
    (("rollback", GROUP, "x" * 129), "invalid_transaction_id"),
    (("resume", GROUP, "missing"), "transaction_not_found"),
])
def test_refusals_are_one_line_on_stderr(api: Any, txmsg: Txmsg, args: tuple[str, ...],
                                          code: str) -> None:
    register(front(api))
    result = txmsg.run("transactions", *args, code=1)
    assert result.stdout == ""
    assert result.stderr.startswith(f"txmsg: {code}: ") and result.stderr.count("\n") == 1


def test_show_has_messages_and_check_history(api: Any, txmsg: Txmsg) -> None:
    client = front(api)
    register(client)
    assert send(client, transaction_id="tx-0", messages=[
        {"topic": "orders", "body": "one", "keys": ["k1", "k2"], "tag": "created"},
        {"topic": "audit", "body_base64": "AAE="}]).status_code == 201
    discard_after_one_check(api, "tx-0")

    shown = json.loads(txmsg.run("transactions", "show", GROUP, "tx-0", "--json").stdout)
    through_api = json.loads(client.get(f"/v1/producer-groups/{GROUP}/transactions/tx-0").data)
    assert {k: v for k, v in shown.items() if k != "checks"} == through_api
    assert shown["state"] == "DISCARDED" and shown["check_times"] == 1
    assert [(c["check_times"], c["result"], c["url"], c["detail"]) for c in shown["checks"]] == [
        (1, "TIMEOUT", "http://127.0.0.1:9/check", "timed out")]

    text = txmsg.run("transactions", "show", GROUP, "tx-0").stdout
    assert "state:                  DISCARDED" in text.splitlines()
    messages = text.split("messages (2):\n")[1].split("\n\n")[0].splitlines()
    assert messages[0].split() == ["message_id", "topic", "offset", "tag", "keys"]
    assert messages[1].split()[1:] == ["orders", "-", "created", "k1,k2"]
    assert messages[2].split()[1:] == ["audit", "-", "-", "-"]
    check_lines = text.split("checks (1):\n")[1].splitlines()
    assert check_lines[1].split()[0] == "1" and "TIMEOUT" in check_lines[1]


def test_resume_commit_rollback_follow_the_api_rules(api: Any, txmsg: Txmsg) -> None:
    client = front(api)
    register(client)
    for txid in ("tx-0", "tx-1"):
        assert send(client, transaction_id=txid).status_code == 201
    discard_after_one_check(api, "tx-0")

    assert txmsg.run("transactions", "resume", GROUP, "tx-0").stdout == \
        f"{GROUP} tx-0: PREPARED\n"
    resumed = json.loads(client.get(f"/v1/producer-groups/{GROUP}/transactions/tx-0").data)
    assert (resumed["state"], resumed["check_times"]) == ("PREPARED", 0)
    refused = txmsg.run("transactions", "resume", GROUP, "tx-0", code=1)
    assert refused.stderr == ("txmsg: invalid_state_transition: cannot resume transaction "
                              "'tx-0': it is PREPARED\n")

    committed = json.loads(txmsg.run("transactions", "commit", GROUP, "tx-0", "--json").stdout)
    assert committed["state"] == "COMMITTED"
    read = json.loads(client.get("/v1/topics/orders/messages").data)["messages"]
    assert [(m["message_id"], m["offset"]) for m in read] == [
        (m["message_id"], m["offset"]) for m in committed["messages"]]
    # a repeat answers the same, as the API's does, and says that nothing changed
    assert json.loads(txmsg.run("transactions", "commit", GROUP, "tx-0", "--json").stdout) \
        == committed == json.loads(finish(client, "tx-0", "commit").data)
    again = txmsg.run("transactions", "commit", GROUP, "tx-0").stdout.splitlines()
    assert again[0] == f"{GROUP} tx-0: COMMITTED (already; nothing changed)"
    assert again[1].split() == ["message_id", "topic", "offset"]
    assert again[2].split() == [read[0]["message_id"], "orders", "0"]
    assert txmsg.run("transactions", "rollback", GROUP, "tx-0", code=1).stderr == (
        "txmsg: invalid_state_transition: cannot rollback transaction 'tx-0': "
        "it is COMMITTED\n")

    assert json.loads(txmsg.run("transactions", "rollback", GROUP, "tx-1", "--json").stdout) \
        == {"transaction_id": "tx-1", "state": "ROLLED_BACK"}
    assert txmsg.run("transactions", "commit", GROUP, "tx-1", code=1).stderr.startswith(
        "txmsg: invalid_state_transition: ")
    assert sources(api, "tx-0") == [("DISCARD", "check"), ("RESUME", "cli"), ("COMMIT", "cli")]
    assert sources(api, "tx-1") == [("ROLLBACK", "cli")]


def test_a_discarded_transaction_committed_late_from_the_cli(api: Any, txmsg: Txmsg) -> None:
    client = front(api)
    register(client)
    assert send(client, transaction_id="tx-0").status_code == 201
    discard_after_one_check(api, "tx-0")
    out = txmsg.run("transactions", "commit", GROUP, "tx-0").stdout.splitlines()
    assert out[0] == f"{GROUP} tx-0: COMMITTED"
    assert [m["body"] for m in json.loads(client.get("/v1/topics/orders/messages").data)
            ["messages"]] == ["hello"]


def test_the_console_script(api: Any, txmsg: Txmsg) -> None:
    client = front(api)
    register(client)
    for txid in ("tx-0", "tx-1"):
        assert send(client, transaction_id=txid).status_code == 201
    listed = json.loads(txmsg.script("transactions", "list", "--json").stdout)
    assert [t["transaction_id"] for t in listed] == ["tx-0", "tx-1"]
    assert set(listed[0]) == LIST_KEYS
    committed = json.loads(txmsg.script("transactions", "commit", GROUP, "tx-0", "--json").stdout)
    assert [m["offset"] for m in committed["messages"]] == [0]
    shown = json.loads(txmsg.script("transactions", "show", GROUP, "tx-0", "--json").stdout)
    assert shown["state"] == "COMMITTED" and shown["messages"][0]["offset"] == 0
    assert shown["checks"] == []
    refused = txmsg.script("transactions", "rollback", GROUP, "tx-0", code=1)
    assert refused.stdout == "" and refused.stderr == (
        "txmsg: invalid_state_transition: cannot rollback transaction 'tx-0': "
        "it is COMMITTED\n")
    unknown = txmsg.script("transactions", "show", GROUP, "nope", code=1)
    assert unknown.stderr == ("txmsg: transaction_not_found: no transaction 'nope' in "
                              "producer group 'orders-svc'\n")


@pytest.mark.parametrize("args", [("transactions", "list"),
                                  ("transactions", "commit", GROUP, "tx-0"),
                                  ("topics", "list")])
def test_a_database_down_is_one_line_not_a_traceback(args: tuple[str, ...]) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    down = Txmsg(f"postgresql+psycopg://postgres@127.0.0.1:{port}/txmsg")
    result = down.run(*args, code=1)
    assert result.stderr.startswith("txmsg: database_unavailable: ")
    assert result.stderr.count("\n") == 1 and result.stdout == ""


def test_the_operations_page_example(api: Any, txmsg: Txmsg) -> None:
    """docs/operations.md's example, command by command, on a discarded transaction."""
    page = (Path(__file__).resolve().parents[3] / "docs" / "operations.md").read_text()
    example = page.split("For example, the discarded transactions", 1)[1]
    commands = [shlex.split(line) for line in example.split("```sh\n", 1)[1]
                .split("```", 1)[0].splitlines()]
    assert [c[:3] for c in commands] == [["txmsg", "transactions", "list"],
                                         ["txmsg", "transactions", "show"],
                                         ["txmsg", "transactions", "resume"]]
    client = front(api)
    register(client, "order-service")
    assert send(client, "order-service", transaction_id="order-42").status_code == 201
    discard_after_one_check(api, "order-42", "order-service")
    listed, shown, resumed = (txmsg.run(*command[1:]).stdout for command in commands)
    assert listed.splitlines()[1].split()[:3] == ["order-service", "order-42", "DISCARDED"]
    assert "TIMEOUT" in shown.split("checks (1):\n", 1)[1]
    assert resumed == "order-service order-42: PREPARED\n"
