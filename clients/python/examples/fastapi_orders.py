"""An order service on FastAPI whose txmsg check endpoint answers from the barrier.

    TXMSG_URL=http://127.0.0.1:8080 python clients/python/examples/fastapi_orders.py

It places an order (its row and its message, all or nothing), then plays two producers
that die: one after sending (the check rolls its message back), one after its database
commit (the check commits its message), and prints each transaction's state.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import tempfile

import httpx
import uvicorn
from fastapi import FastAPI
from sqlalchemy import Column, Integer, MetaData, String, Table
from sqlalchemy.ext.asyncio import create_async_engine
from txmsg_client import message
from txmsg_client.aio import AsyncBarrier, AsyncProducer, asgi_checker_app

TXMSG_URL = os.environ.get("TXMSG_URL", "http://127.0.0.1:8080")
DATABASE_URL = os.environ.get(
    "DATABASE_URL", f"sqlite+aiosqlite:///{tempfile.mkdtemp()}/orders.db")

metadata = MetaData()
orders = Table("orders", metadata, Column("id", Integer, primary_key=True),
               Column("item", String(100), nullable=False))
engine = create_async_engine(DATABASE_URL)
barrier = AsyncBarrier(engine, metadata=metadata)  # txmsg_barrier beside the orders
producer = AsyncProducer(TXMSG_URL, "fastapi-orders")
check_endpoint = asgi_checker_app(barrier.checker)

app = FastAPI()
app.add_route("/txmsg/check", check_endpoint, methods=["POST"])  # an ASGI app as a route


@app.post("/orders")
async def place_order(item: str) -> dict[str, str]:
    """The order row and its message: both or neither."""
    async with producer.local_transaction(barrier, message("orders", item)) as local:
        await local.connection.execute(orders.insert().values(item=item))
    return {"transaction_id": local.transaction_id, "state": local.state}


async def settled(transaction_id: str) -> str:
    while (state := (await producer.get(transaction_id))["state"]) == "PREPARED":
        await asyncio.sleep(0.2)
    return state


async def main() -> None:
    async with engine.begin() as conn:
        await conn.run_sync(metadata.create_all)  # or Alembic, with barrier.table in it
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    serving = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.05)
    registered = await producer.register([f"http://127.0.0.1:{port}/txmsg/check"])
    check_endpoint.signing_secret = registered["signing_secret"]

    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
        print((await client.post("/orders", params={"item": "book"})).json()["state"])

    died_after_send = await producer.send(message("orders", "lamp"))
    died_after_commit = await producer.send(message("orders", "desk"))
    async with barrier.begin(producer.group, died_after_commit["transaction_id"]) as conn:
        await conn.execute(orders.insert().values(item="desk"))
    print(await settled(died_after_send["transaction_id"]))  # the check: ROLLBACK
    print(await settled(died_after_commit["transaction_id"]))  # the check: COMMIT

    server.should_exit = True
    await serving
    await producer.aclose()
    await engine.dispose()


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
