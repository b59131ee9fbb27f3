"""A consumer process of the ordered-consumption tests: receives from one subscription
under its name, logs every delivery and ack as JSON lines (flushed at once, so a kill -9
loses at most the line of the call in flight), and acts on each delivery at random: on
key_shared ack, nack or drop it (its lease runs out); on failover ack it cumulatively.

Usage: python -m tests.acceptance.ordered_consumer URL SUB_PATH NAME LOG MODE SEED"""

from __future__ import annotations

import json
import random
import sys
import time

import requests


def main() -> None:
    url, sub, name, log_path, mode, seed = sys.argv[1:7]
    rng = random.Random(int(seed))
    session = requests.Session()
    idle_since = time.monotonic()
    with open(log_path, "a", buffering=1) as log:
        def note(**event: object) -> None:
            log.write(json.dumps({"t": time.time_ns(), "consumer": name, **event}) + "\n")

        while not (time.monotonic() - idle_since > 3
                   and session.get(f"{url}{sub}", timeout=30).json()["backlog"] == 0):
            r = session.post(f"{url}{sub}/receive", timeout=30,
                             json={"max_messages": 5, "wait_ms": 500, "consumer": name})
            r.raise_for_status()
            messages = r.json()["messages"]
            if messages:
                idle_since = time.monotonic()
            for m in messages:
                note(event="received", offset=m["offset"], key=m["ordering_key"],
                     count=m["redelivery_count"])
            for m in messages:
                roll = rng.random() if mode == "key_shared" else 1.0
                if roll < 0.1:
                    session.post(f"{url}{sub}/nack", timeout=30,
                                 json={"offsets": [m["offset"]], "delay_ms": 0,
                                       "consumer": name}).raise_for_status()
                    continue
                if roll < 0.15:
                    continue  # dropped: its lease runs out
                body = ({"through": m["offset"]} if mode == "failover"
                        else {"offsets": [m["offset"]]})
                note(event="acking", offset=m["offset"])
                r = session.post(f"{url}{sub}/ack", timeout=30, json={**body, "consumer": name})
                r.raise_for_status()
                note(event="acked", offset=m["offset"], acked=r.json()["acked"])
                time.sleep(rng.random() * 0.01)


if __name__ == "__main__":
    main()
