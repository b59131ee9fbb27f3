"""The producer SDK against the real API over HTTP, on both stores."""

from __future__ import annotations

from typing import Any

import pytest
import requests
from txmsg_client import Producer, Resolution, TransactionResult, TxmsgError, message
from txmsg_client.callback import CheckerServer

from tests.callbacks import wait_until
from tests.conftest import LiveServer
from tests.front_client import front


@pytest.fixture
def producer(live_server: LiveServer) -> Producer:
    p = Producer(live_server.url, "shop")
    p.register(["http://127.0.0.1:9/check"], check_timeout_ms=500)
    return p


def test_register_send_commit_rollback_read(producer: Producer) -> None:
    one = producer.send(message("orders", "first", keys=["o-1"]), transaction_id="t-1")
    assert one["state"] == "PREPARED" and one["transaction_id"] == "t-1"
    assert producer.send(message("orders", "first", keys=["o-1"]),
                         transaction_id="t-1") == one  # a retried send
    many = producer.send([message("orders", "second"), message("audit", b"\x01")],
                         check_url="http://127.0.0.1:9/mine", check_immunity_seconds=60)
    assert len(many["messages"]) == 2
    assert producer.get(many["transaction_id"])["check_url"] == "http://127.0.0.1:9/mine"

    committed = producer.commit(many["transaction_id"])
    assert committed["state"] == "COMMITTED"
    assert [(m["topic"], m["offset"]) for m in committed["messages"]] == \
        [("orders", 0), ("audit", 0)]
    assert producer.rollback("t-1")["state"] == "ROLLED_BACK"
    page = producer.read("orders")
    assert [m["body"] for m in page["messages"]] == ["second"] and page["next_offset"] == 1
    assert producer.read("audit")["messages"][0]["body_base64"] == "AQ=="


def test_service_errors_raise_txmsg_error(producer: Producer, live_server: LiveServer) -> None:
    with pytest.raises(TxmsgError) as err:
        producer.commit("no-such")
    assert (err.value.status, err.value.code) == (404, "transaction_not_found")
    assert err.value.problem["status"] == 404 and "no-such" in err.value.detail

    producer.send(message("orders", "x"), transaction_id="t-1")
    producer.rollback("t-1")
    with pytest.raises(TxmsgError) as err:
        producer.commit("t-1")
    assert (err.value.status, err.value.code) == (409, "invalid_state_transition")

    with pytest.raises(TxmsgError) as err:
        Producer(live_server.url, "unregistered").send(message("orders", "x"))
    assert (err.value.status, err.value.code) == (422, "unregistered_producer_group")

    with pytest.raises(TxmsgError) as err:
        producer.send({"topic": "bad topic", "body": "x"})
    assert err.value.status == 400 and err.value.code == "invalid_topic"


def test_send_in_transaction_follows_the_local_transaction(producer: Producer) -> None:
    seen: list[dict[str, Any]] = []

    def local(outcome: Resolution) -> Any:
        def run(sent: dict[str, Any]) -> Resolution:
            seen.append(sent)
            return outcome
        return run

    done = producer.send_in_transaction(message("orders", "a"), local(Resolution.COMMIT),
                                        transaction_id="a")
    assert isinstance(done, TransactionResult)
    assert (done.state, done.resolution) == ("COMMITTED", Resolution.COMMIT)
    assert done.messages[0]["offset"] == 0 and seen[0]["transaction_id"] == "a"
    assert producer.send_in_transaction(message("orders", "b"),
                                        local(Resolution.ROLLBACK)).state == "ROLLED_BACK"
    left = producer.send_in_transaction(message("orders", "c"), local(Resolution.UNKNOWN))
    assert left.state == "PREPARED" and producer.get(left.transaction_id)["state"] == "PREPARED"

    def failing(sent: dict[str, Any]) -> Resolution:
        seen.append(sent)
        raise RuntimeError("local transaction failed")

    with pytest.raises(RuntimeError):
        producer.send_in_transaction(message("orders", "d"), failing)
    assert producer.get(seen[-1]["transaction_id"])["state"] == "PREPARED"  # for the check

    # a conflict is the caller's to know (the same id was rolled back before)
    with pytest.raises(TxmsgError) as err:
        producer.send_in_transaction(message("orders", "b2"), local(Resolution.ROLLBACK),
                                     transaction_id="z")
        producer.send_in_transaction(message("orders", "b2"), local(Resolution.COMMIT),
                                     transaction_id="z")
    assert err.value.status == 409
    assert [m["body"] for m in producer.read("orders")["messages"]] == ["a"]


def test_an_unreachable_service_after_the_local_transaction_leaves_it_to_the_check(
        app: Any) -> None:
    server = LiveServer(app)
    p = Producer(server.url, "shop", timeout=2, retry_seconds=0.5)  # the commit tried 0.5 s
    p.register(["http://127.0.0.1:9/check"])

    def local(sent: dict[str, Any]) -> Resolution:
        server.stop()
        return Resolution.COMMIT

    result = p.send_in_transaction(message("orders", "x"), local, transaction_id="t-1")
    assert result.state == "PREPARED" and result.resolution is Resolution.COMMIT
    assert isinstance(result.end_error, requests.ConnectionError)
    state = front(app).get("/v1/producer-groups/shop/transactions/t-1").json["state"]
    assert state == "PREPARED"


class Orders:
    """The producer's local database: the check asks it what became of each order."""

    def __init__(self) -> None:
        self.paid: set[str] = set()

    def check(self, transaction: dict[str, Any]) -> Resolution:
        return Resolution.COMMIT if transaction["transaction_id"] in self.paid \
            else Resolution.UNKNOWN


def test_checker_app_answers_the_check_service(harness) -> None:
    """The RocketMQ flow end to end: the local transaction commits but the producer does
    not tell the service; the check asks the producer's checker, which says COMMIT."""
    orders = Orders()
    server = LiveServer(harness.app)
    try:
        with CheckerServer(orders) as callback, Producer(server.url, "shop") as producer:
            producer.register([callback.url])

            def place_order(sent: dict[str, Any]) -> Resolution:
                orders.paid.add(sent["transaction_id"])
                return Resolution.UNKNOWN  # e.g. crashed before committing

            result = producer.send_in_transaction(message("orders", "order 42"), place_order)
            harness.start_checker()
            wait_until(lambda: producer.get(result.transaction_id)["state"] == "COMMITTED")
            assert [m["body"] for m in producer.read("orders")["messages"]] == ["order 42"]
    finally:
        server.stop()


def test_a_producer_with_a_token_works_against_a_service_with_access_control(
        database_url: str) -> None:
    from app.web import create_app
    from tests.conftest import make_settings

    admin = "client-test-admin-token-0123456789"
    app = create_app(make_settings(database_url, admin_token=admin))
    server = LiveServer(app)
    try:
        made = requests.post(f"{server.url}/v1/tokens", timeout=10,
                             headers={"Authorization": f"Bearer {admin}"},
                             json={"name": "shop", "scopes": ["produce:shop"]}).json()
        with pytest.raises(TxmsgError) as err:
            Producer(server.url, "shop").register(["http://127.0.0.1:9/check"])
        assert (err.value.status, err.value.code) == (401, "unauthenticated")
        producer = Producer(server.url, "shop", token=made["token"])
        producer.register(["http://127.0.0.1:9/check"])
        sent = producer.send(message("orders", "x"))
        assert producer.commit(sent["transaction_id"])["state"] == "COMMITTED"
        with pytest.raises(TxmsgError) as err:
            producer.read("orders")  # producing is not consuming
        assert (err.value.status, err.value.code) == (403, "forbidden")
    finally:
        server.stop()
        app.extensions["txmsg"].close()
