"""The SDK's barrier: local transaction + message pairs per second, with and without it.

    python -m bench.phases.barrier [--seconds 8] [--rounds 2]

Against a real ``txmsg serve`` on a PostgreSQL database of its own, the producer's own
database a second PostgreSQL database on the same server. Each pair is a send, a database
transaction inserting one order row, and a commit: "plain" runs them by hand (what a
producer does with a hand-written checker), "barrier" with ``Producer.local_transaction``
(the same plus the barrier row). 1 and 32 client threads, rounds interleaved, medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import sql as pgsql
from sqlalchemy import Column, Integer, MetaData, String, Table, create_engine
from txmsg_client import Producer, message
from txmsg_client.barrier import Barrier

from bench.harness.pgdb import admin_url, bench_database, libpq_url, sqlalchemy_url
from bench.harness.service import serve

metadata = MetaData()
orders = Table("bench_orders", metadata, Column("id", Integer, primary_key=True),
               Column("transaction_id", String(128), nullable=False))


@contextmanager
def producer_database() -> Iterator[str]:
    admin = libpq_url(admin_url())
    name = f"txmsg_bench_producer_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(pgsql.SQL("CREATE DATABASE {}").format(pgsql.Identifier(name)))
    try:
        yield sqlalchemy_url(admin.rsplit("/", 1)[0] + "/" + name)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(pgsql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
                         .format(pgsql.Identifier(name)))


def plain_pair(producer: Producer, barrier: Barrier, body: str) -> None:
    sent = producer.send(message("bench-orders", body))
    with barrier.engine.begin() as conn:
        conn.execute(orders.insert().values(transaction_id=sent["transaction_id"]))
    producer.commit(sent["transaction_id"])


def barrier_pair(producer: Producer, barrier: Barrier, body: str) -> None:
    with producer.local_transaction(barrier, message("bench-orders", body)) as local:
        local.connection.execute(orders.insert().values(transaction_id=local.transaction_id))


def measure(url: str, barrier: Barrier, pair: Callable[[Producer, Barrier, str], None],
            clients: int, seconds: float) -> float:
    """Pairs per second over ``seconds`` with ``clients`` threads."""
    done = [0] * clients
    stop = threading.Event()

    def client(n: int) -> None:
        with Producer(url, "bench-barrier") as producer:
            while not stop.is_set():
                pair(producer, barrier, "x")
                done[n] += 1

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    start = time.monotonic()
    for thread in threads:
        thread.start()
    stop.wait(seconds)
    stop.set()
    for thread in threads:
        thread.join()
    return sum(done) / (time.monotonic() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    results: dict[str, list[float]] = {}
    with bench_database() as txmsg_url, producer_database() as producer_url:
        engine = create_engine(producer_url, pool_size=40, max_overflow=0)
        barrier = Barrier(engine)
        barrier.create_table()
        metadata.create_all(engine)
        with serve(txmsg_url) as server:
            url = f"http://127.0.0.1:{server.port}"
            with Producer(url, "bench-barrier") as producer:
                producer.register(["http://127.0.0.1:9/check"])
            for _ in range(args.rounds):
                for clients in (1, 32):
                    for name, pair in (("plain", plain_pair), ("barrier", barrier_pair)):
                        rate = measure(url, barrier, pair, clients, args.seconds)
                        results.setdefault(f"{name} {clients}", []).append(rate)
        engine.dispose()
    summary: dict[str, Any] = {k: round(statistics.median(v), 1) for k, v in results.items()}
    for clients in (1, 32):
        summary[f"barrier/plain {clients}"] = round(
            summary[f"barrier {clients}"] / summary[f"plain {clients}"], 3)
    summary["rounds"] = {k: [round(r, 1) for r in v] for k, v in results.items()}
    summary["load_average"] = os.getloadavg()
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
