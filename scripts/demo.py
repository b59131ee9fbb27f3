"""`make demo`: the whole txmsg lifecycle on the embedded SQLite store, Spark included.

Starts `txmsg serve` (API + embedded check service) on a demo SQLite file, a producer
check callback, then shows: send → commit, send → rollback, a lost commit that the
check service recovers (COMMIT / ROLLBACK answered by the callback), a transaction
nobody answers for that lands in TRANS_CHECK_MAX_TIME_TOPIC, reads by offset, metrics,
and finally `txmsg ingest` into a Parquet lake read back with Spark.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import requests
from txmsg_client import Producer, Resolution, message
from txmsg_client.callback import CheckerServer

ROOT = Path(__file__).resolve().parent.parent
VAR = ROOT / "var" / "demo"
TXMSG = str(Path(sys.executable).parent / "txmsg")
ENV = {
    **{k: v for k, v in os.environ.items() if not k.startswith("TXMSG_")},
    "TXMSG_DATABASE_URL": f"sqlite:///{VAR / 'txmsg.db'}",
    "TXMSG_TRANSACTION_TIMEOUT_SECONDS": "1",
    "TXMSG_CHECK_INTERVAL_SECONDS": "1",
    "TXMSG_CHECK_MAX_TIMES": "3",
}


def say(title: str, payload: object = None) -> None:
    print(f"\n== {title}")
    if payload is not None:
        print(json.dumps(payload, indent=2)[:1500])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class OrderChecker:
    """What the producer's own database says about each order (its local transactions)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

    def check(self, transaction: dict) -> Resolution:
        self.calls.append((transaction["transaction_id"], transaction["check_times"]))
        txid = transaction["transaction_id"]
        if txid.startswith("paid-"):
            return Resolution.COMMIT
        if txid.startswith("cancelled-"):
            return Resolution.ROLLBACK
        return Resolution.UNKNOWN


def wait_for(predicate, timeout: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.25)
    raise SystemExit("demo: timed out waiting for the check service")


def main() -> int:
    shutil.rmtree(VAR, ignore_errors=True)
    VAR.mkdir(parents=True)
    checker = OrderChecker()
    callback = CheckerServer(checker)
    check_url = callback.url

    port = free_port()
    log = (VAR / "serve.log").open("w")
    serve = subprocess.Popen([TXMSG, "serve", "--port", str(port)], env=ENV, cwd=ROOT,
                             stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _ready(base), timeout=60)
        say(f"txmsg serve is up at {base} (SQLite {VAR / 'txmsg.db'}, check service embedded)")
        producer = Producer(base, "order-service")
        registration = producer.register([check_url], check_timeout_ms=1000)
        say("register the producer group's check callback", registration)
        callback.signing_secret = registration["signing_secret"]
        say("   the callback now answers only checks signed with the group's signing_secret")

        sent = producer.send(message("orders", '{"order": 1, "total": 42}', keys=["order-1"],
                                     tag="created"), transaction_id="order-1")
        say("1. send a half message (stored, invisible)", sent)
        say("   topic 'orders' before commit", producer.read("orders"))
        say("   commit → visible, with its offset", producer.commit("order-1"))

        producer.send(message("orders", '{"order": 2}'), transaction_id="order-2")
        say("2. send then roll back → never visible", producer.rollback("order-2"))
        say("   a commit after the rollback is refused (409 problem+json)",
            requests.post(f"{base}/v1/producer-groups/order-service/transactions/order-2/commit"
                          ).json())

        for txid in ("paid-3", "cancelled-4", "lost-5"):
            producer.send(message("orders", json.dumps({"order": txid})), transaction_id=txid)
        say("3. three producers 'crash' before committing: paid-3, cancelled-4, lost-5")
        wait_for(lambda: all(producer.get(t)["state"] != "PREPARED"
                             for t in ("paid-3", "cancelled-4", "lost-5")))
        say("   the check service asked the callback", checker.calls)
        for txid in ("paid-3", "cancelled-4", "lost-5"):
            t = producer.get(txid)
            print(f"   {txid}: {t['state']} after {t['check_times']} check(s)")

        say("4. committed messages of 'orders', by offset", producer.read("orders"))
        say("   TRANS_CHECK_MAX_TIME_TOPIC (unanswered after 3 checks)",
            producer.read("TRANS_CHECK_MAX_TIME_TOPIC"))
        metrics = requests.get(f"{base}/metrics").text
        say("5. metrics")
        print("\n".join(line for line in metrics.splitlines()
                        if line.startswith(("txmsg_half_messages", "txmsg_commit_messages_total",
                                            "txmsg_rollback_messages_total",
                                            "txmsg_discard_messages_total",
                                            "txmsg_checks_total"))))
    finally:
        serve.terminate()
        serve.wait(timeout=30)
        callback.close()

    lake = VAR / "lake"
    say(f"6. Spark: `txmsg ingest --output {lake}` (JDBC from the committed views → Parquet)")
    subprocess.run([TXMSG, "ingest", "--output", str(lake),
                    "--topics", "orders,TRANS_CHECK_MAX_TIME_TOPIC"], env=ENV, cwd=ROOT, check=True)
    say("   run it again: incremental, nothing new, nothing duplicated")
    subprocess.run([TXMSG, "ingest", "--output", str(lake), "--topics", "orders"],
                   env=ENV, cwd=ROOT, check=True)
    say("   the lake, read back with Spark")
    subprocess.run([sys.executable, "-m", "spark_outbox.show", str(lake)], cwd=ROOT, check=True)
    print("\ndemo done.")
    return 0


def _ready(base: str) -> bool:
    try:
        return requests.get(f"{base}/readyz", timeout=1).status_code == 200
    except requests.RequestException:
        return False


if __name__ == "__main__":
    sys.exit(main())
