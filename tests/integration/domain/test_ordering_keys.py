"""A message's ordering key on both stores: given at send, in either body form, it is
shown wherever the message is (a topic's page, by id, its transaction, a receive, the
check callback's payload, a redrive's copy); a message without one shows null. The
refusals of bad keys and of a retry with another key are in ``bad_input_cases``."""

from __future__ import annotations

from typing import Any

from tests.callbacks import answer, wait_until
from tests.integration.checker_harness import Harness
from tests.integration.subscription_helpers import create, receive

GROUP = "shop"
TOPIC = "t"
KEYS = ["order-1", None, "é" * 256]


def _send(h: Harness, transaction_id: str, **extra: Any) -> dict[str, Any]:
    return h.send(GROUP, transaction_id, messages=[
        {"topic": TOPIC, "body": f"m{i}", **({} if k is None else {"ordering_key": k})}
        for i, k in enumerate(KEYS)], **extra)


def test_an_ordering_key_is_shown_wherever_its_message_is(harness: Harness) -> None:
    h = harness
    h.register(GROUP, ["http://127.0.0.1:9/check"])
    create(h.client)
    sent = _send(h, "keyed")
    ids = [m["message_id"] for m in sent["messages"]]
    assert [m["ordering_key"] for m in h.txn(GROUP, "keyed")["messages"]] == KEYS
    prepared = h.client.get(f"/v1/messages/{ids[0]}").json
    assert prepared["state"] == "PREPARED" and prepared["ordering_key"] == KEYS[0]
    assert h.op(GROUP, "keyed", "commit").status_code == 200

    assert [m["ordering_key"] for m in h.topic(TOPIC)] == KEYS
    assert [h.client.get(f"/v1/messages/{i}").json["ordering_key"] for i in ids] == KEYS
    assert [m["ordering_key"] for m in h.txn(GROUP, "keyed")["messages"]] == KEYS
    assert [m["ordering_key"] for m in receive(h.client)] == KEYS


def test_the_single_message_form_carries_an_ordering_key(harness: Harness) -> None:
    h = harness
    h.register(GROUP, ["http://127.0.0.1:9/check"])
    sends = f"/v1/producer-groups/{GROUP}/transactions"
    sent = h.client.post(sends, json={"transaction_id": "single", "topic": TOPIC, "body": "b",
                                      "ordering_key": "k-1"})
    assert sent.status_code == 201, sent.json
    assert h.txn(GROUP, "single")["messages"][0]["ordering_key"] == "k-1"
    message_id = sent.json["messages"][0]["message_id"]
    assert h.client.get(f"/v1/messages/{message_id}").json["ordering_key"] == "k-1"
    retry = h.client.post(sends, json={"transaction_id": "single", "messages": [
        {"topic": TOPIC, "body": "b", "ordering_key": "k-1"}]})
    assert retry.status_code == 200, retry.json


def test_a_check_payload_shows_the_ordering_keys(harness: Harness) -> None:
    h = harness
    cb = h.callback(answer("COMMIT"))
    h.register(GROUP, [cb.url])
    _send(h, "checked")
    h.start_checker()
    wait_until(lambda: h.state(GROUP, "checked") == "COMMITTED", what="commit by check")
    assert [m["ordering_key"] for m in cb.checks[0]["messages"]] == KEYS
