"""A transaction as a read shows it (``GET .../transactions/{id}``), on both stores: one
statement, and each message once, at its own place in its topic."""

from __future__ import annotations

from datetime import UTC, datetime

from app.domain.names import new_message_id
from app.storage import log
from app.storage.db import write_transaction
from app.web import create_app
from tests.conftest import make_settings
from tests.front_client import front
from tests.integration.helpers import finish, register, send, statements_run


def test_a_transaction_and_its_messages_are_read_in_one_statement(database_url: str) -> None:
    app = create_app(make_settings(database_url))
    client = front(app)
    try:
        register(client)
        sent = send(client, messages=[{"topic": "a", "body": "1"}, {"topic": "b", "body": "2"}])
        txid = sent.json["transaction_id"]
        with statements_run(app.extensions["txmsg"].engine) as statements:
            prepared = client.get(f"/v1/producer-groups/orders-svc/transactions/{txid}")
            assert finish(client, txid, "commit").status_code == 200
            statements.clear()
            committed = client.get(f"/v1/producer-groups/orders-svc/transactions/{txid}")
        assert len(statements) == 1, statements
        assert [(m["topic"], m.get("offset")) for m in prepared.json["messages"]] == [
            ("a", None), ("b", None)]
        assert [(m["topic"], m["offset"]) for m in committed.json["messages"]] == [
            ("a", 0), ("b", 0)]
        missing = client.get("/v1/producer-groups/orders-svc/transactions/nope")
        assert missing.status_code == 404
        assert missing.json["code"] == "transaction_not_found"
    finally:
        app.extensions["txmsg"].close()


def test_a_dead_letter_copy_back_on_its_topic_is_not_the_message(database_url: str) -> None:
    """A dead-letter copy refers to its source's half message; a chain of subscriptions can
    bring one back to the source's own topic. The transaction, and the message read by its
    id, show it once, at the offset its commit gave it."""
    app = create_app(make_settings(database_url))
    client = front(app)
    try:
        register(client)
        sent = send(client, messages=[{"topic": "a", "body": "1"}])
        txid = sent.json["transaction_id"]
        committed = finish(client, txid, "commit").json["messages"][0]
        engine = app.extensions["txmsg"].engine
        with write_transaction(engine) as conn:
            half_id = conn.exec_driver_sql("SELECT id FROM half_message").scalar_one()
            copied_at = log.append(conn, "a", [{
                "half_message_id": half_id, "message_id": new_message_id(),
                "properties": '{"ORIGIN_MESSAGE_ID": "x"}', "committed_at": datetime.now(UTC)}])
        assert copied_at == 1
        read = client.get(f"/v1/producer-groups/orders-svc/transactions/{txid}").json
        assert [(m["message_id"], m["offset"]) for m in read["messages"]] == [
            (committed["message_id"], committed["offset"])]
        message = client.get(f"/v1/messages/{committed['message_id']}").json
        assert (message["topic"], message["offset"]) == ("a", committed["offset"])
        again = finish(client, txid, "commit").json["messages"]  # a repeated commit's answer
        assert [(m["message_id"], m["offset"]) for m in again] == [
            (committed["message_id"], committed["offset"])]
    finally:
        app.extensions["txmsg"].close()
