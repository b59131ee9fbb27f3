"""An order service on Flask whose txmsg check endpoint answers from the barrier.

    TXMSG_URL=http://127.0.0.1:8080 python clients/python/examples/flask_orders.py

It places an order (its row and its message, all or nothing), then plays two producers
that die: one after sending (the check rolls its message back), one after its database
commit (the check commits its message), and prints each transaction's state.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time

import requests
from flask import Flask, request
from sqlalchemy import Column, Integer, MetaData, String, Table, create_engine
from txmsg_client import Producer, message
from txmsg_client.barrier import Barrier
from txmsg_client.callback import checker_app
from werkzeug.middleware.dispatcher import DispatcherMiddleware
from werkzeug.serving import make_server

TXMSG_URL = os.environ.get("TXMSG_URL", "http://127.0.0.1:8080")
DATABASE_URL = os.environ.get("DATABASE_URL", f"sqlite:///{tempfile.mkdtemp()}/orders.db")

metadata = MetaData()
orders = Table("orders", metadata, Column("id", Integer, primary_key=True),
               Column("item", String(100), nullable=False))
engine = create_engine(DATABASE_URL)
barrier = Barrier(engine, metadata=metadata)  # txmsg_barrier beside the orders
producer = Producer(TXMSG_URL, "flask-orders")
check_endpoint = checker_app(barrier.checker)

app = Flask(__name__)
app.wsgi_app = DispatcherMiddleware(app.wsgi_app, {"/txmsg/check": check_endpoint})  # type: ignore[method-assign]


@app.post("/orders")
def place_order() -> dict[str, str]:
    """The order row and its message: both or neither."""
    item = request.args["item"]
    with producer.local_transaction(barrier, message("orders", item)) as local:
        local.connection.execute(orders.insert().values(item=item))
    return {"transaction_id": local.transaction_id, "state": local.state}


def settled(transaction_id: str) -> str:
    while (state := producer.get(transaction_id)["state"]) == "PREPARED":
        time.sleep(0.2)
    return state


def main() -> None:
    metadata.create_all(engine)  # or Alembic, with barrier.table in it
    server = make_server("127.0.0.1", 0, app, threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_port}"
    registered = producer.register([f"{base}/txmsg/check"])
    check_endpoint.signing_secret = registered["signing_secret"]

    print(requests.post(f"{base}/orders", params={"item": "book"}, timeout=10).json()["state"])

    died_after_send = producer.send(message("orders", "lamp"))
    died_after_commit = producer.send(message("orders", "desk"))
    with barrier.begin(producer.group, died_after_commit["transaction_id"]) as conn:
        conn.execute(orders.insert().values(item="desk"))
    print(settled(died_after_send["transaction_id"]))  # the check: ROLLBACK
    print(settled(died_after_commit["transaction_id"]))  # the check: COMMIT
    server.shutdown()


if __name__ == "__main__":
    main()
