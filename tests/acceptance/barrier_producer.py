"""A producer process for the barrier's crash tests: one ``local_transaction`` that stops
at a step, writes ``<control>/<step>`` and waits for a line on stdin (or a SIGKILL).

    python -m tests.acceptance.barrier_producer URL GROUP DATABASE_URL TOPIC TXID STEP CONTROL

STEP: after_send, in_block, after_local_commit, after_commit, or none. At the end it
prints the transaction's state as the SDK saw it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine
from txmsg_client import Producer, message
from txmsg_client.barrier import Barrier

from tests.acceptance.barrier_orders import orders


def main(url: str, group: str, database_url: str, topic: str, txid: str, step: str,
         control: str) -> None:
    def pause(at: str) -> None:
        if at == step:
            (Path(control) / at).write_text("")
            sys.stdin.readline()

    producer = Producer(url, group, timeout=5)
    barrier = Barrier(create_engine(database_url))
    send, commit = producer.send, producer.commit

    def sending(*args: Any, **kwargs: Any) -> dict[str, Any]:
        sent = send(*args, **kwargs)
        pause("after_send")
        return sent

    def committing(transaction_id: str) -> dict[str, Any]:
        pause("after_local_commit")
        return commit(transaction_id)

    producer.send = sending  # type: ignore[method-assign]
    producer.commit = committing  # type: ignore[method-assign]
    with producer.local_transaction(barrier, message(topic, txid), transaction_id=txid) as local:
        local.connection.execute(orders.insert().values(transaction_id=txid))
        pause("in_block")
    pause("after_commit")
    print(local.state, flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:8])
