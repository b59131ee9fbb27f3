"""Benchmark: how long each dashboard page takes with a large history stored, on PostgreSQL.

In a database of its own (dropped at the end), rows are written through the service's
own write path (``bench.harness.seed``): 100,000 transactions in 10 producer groups, 10
messages each (1,000,000 half messages); 95 % committed (their messages in the committed
log of 8 topics, dense offsets, commit times spread over the last 72 hours in steps of
``STEP``), 1 % rolled back, 4 % PREPARED, 0.1 % DISCARDED (appended to the discard topic
after 15 checks), with an op log row per resolution and a check for a tenth of them, over
the last two hours. Then ``txmsg serve
--no-checker`` (access control off, on loopback) serves the pages, with
``SUBSCRIPTIONS_PER_TOPIC`` subscriptions on each topic from its earliest offset (more
than the overview shows, all with a backlog), and each page is
loaded ``--loads`` times over one keep-alive connection after a warm-up load: the median
and the slowest time to the answer's last byte, which on loopback is the server's time::

    python -m bench.phases.ui [--transactions 100000] [--loads 9]
"""

from __future__ import annotations

import argparse
import statistics
import time
from base64 import b64encode
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import psycopg
import requests

from app.domain.messages import MessageIn
from app.vocabulary import Op
from bench.harness import seed
from bench.harness.pgdb import bench_database, libpq_url
from bench.harness.service import serve

GROUPS = 10
TOPICS = 8
PER_TXN = 10
SUBSCRIPTIONS_PER_TOPIC = 8
GOAL_MS = 200.0

STEP = timedelta(minutes=10)  # sends and resolutions are written at times this far apart
CHECK_URL = "http://127.0.0.1:9/check"


def _state(t: int) -> Op | None:
    """Transaction t's end: every 1000th discarded, t % 100 in 1..4 left PREPARED, 5
    rolled back, the others committed."""
    if t % 1000 == 0:
        return Op.DISCARD
    if 1 <= t % 100 <= 4:
        return None
    return Op.ROLLBACK if t % 100 == 5 else Op.COMMIT


def _message(g: int) -> MessageIn:
    body = f'{{"order": {g}, "lines": ["{"item " * 16}"]}}'
    fields = {"topic": f"topic-{(g - 1) % TOPICS}", "tag": "created", "keys": [f"k-{g}"]}
    if g % 50 == 0:  # a binary body every fiftieth
        return MessageIn.model_validate({**fields, "body_base64": b64encode(body.encode())
                                         .decode()})
    return seed.text(body=body, **fields)  # type: ignore[arg-type]


def _checks(t: int, now: datetime) -> tuple[seed.Check, ...]:
    """A tenth checked once in the last two hours; the discarded 15 times, timing out."""
    if t % 1000 == 0:
        return tuple(seed.Check("TIMEOUT", now - timedelta(hours=3) + n * timedelta(seconds=30),
                                CHECK_URL, "timed out", 3000.0) for n in range(1, 16))
    if t % 10 == 0:
        result = ("COMMIT", "UNKNOWN", "TIMEOUT")[t % 3]
        return (seed.Check(result, now - (t % 7200) * timedelta(seconds=1), CHECK_URL,
                           duration_ms=4.2),)
    return ()


def _txns(txns: int, group: int, now: datetime) -> Iterator[seed.Txn]:
    """The transactions t of group bench-(t % GROUPS) in order: sent over the last 72
    hours, resolved a second later (a discard after 8 minutes)."""
    first = now - timedelta(hours=72)
    for t in range(group or GROUPS, txns + 1, GROUPS):
        sent = first + (now - first) * (t / txns) - timedelta(seconds=1)
        sent = first + (sent - first) // STEP * STEP
        op = _state(t)
        resolved = sent + (timedelta(minutes=8) if op is Op.DISCARD else timedelta(seconds=1))
        yield seed.Txn(
            f"tx-{t}", [_message((t - 1) * PER_TXN + s + 1) for s in range(PER_TXN)],
            sent_at=sent, first_check_delay=(now + timedelta(days=1) - sent).total_seconds(),
            op=op, resolved_at=resolved, source="checker" if op is Op.DISCARD else "api",
            checks=_checks(t, now))


def generate(url: str, txns: int) -> float:
    started = time.perf_counter()
    now = datetime.now(UTC)
    with seed.engine_of(url) as engine:
        for g in range(GROUPS):
            seed.register(engine, f"bench-{g}", CHECK_URL)
            seed.write(engine, f"bench-{g}", _txns(txns, g, now))
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
    return time.perf_counter() - started


def discarded(txns: int) -> tuple[str, str]:
    """(group, transaction id) of the last discarded transaction."""
    t = txns // 1000 * 1000
    return f"bench-{t % GROUPS}", f"tx-{t}"


def first_message_id(base: str, txns: int) -> str:
    """The id of the last discarded transaction's first message, as the API shows it."""
    group, txid = discarded(txns)
    r = requests.get(f"{base}/v1/producer-groups/{group}/transactions/{txid}", timeout=60)
    r.raise_for_status()
    return str(r.json()["messages"][0]["message_id"])


def pages(txns: int, message_id: str = "") -> list[tuple[str, str]]:
    """(name, path) of every page, at places a large history makes hardest;
    ``message_id``: ``first_message_id``'s."""
    group, txid = discarded(txns)
    return [
        ("overview", "/ui/"),
        ("transactions", "/ui/transactions"),
        ("transactions by group and state", f"/ui/transactions?group={group}&state=PREPARED"),
        ("transactions by state (rare)", "/ui/transactions?state=DISCARDED"),
        ("discarded", "/ui/discarded"),
        ("search by transaction id", f"/ui/transactions?q=tx-{txns // 2 + 7}"),
        ("search by message id", f"/ui/transactions?q={message_id}"),
        ("transaction (15 checks)", f"/ui/transactions/{group}/{txid}"),
        ("confirmation", f"/ui/transactions/{group}/{txid}/resume-check"),
        ("topics", "/ui/topics"),
        ("topic, latest page", "/ui/topics/topic-3"),
        ("topic, from offset 0", "/ui/topics/topic-3?from_offset=0"),
        ("topic, from the middle", f"/ui/topics/topic-3?from_offset={txns * PER_TXN // 16}"),
        ("message", f"/ui/messages/{message_id}"),
        ("groups", "/ui/groups"),
        ("tokens", "/ui/tokens"),
    ]


def subscribe(base: str) -> None:
    session = requests.Session()
    for t in range(TOPICS):
        for n in range(SUBSCRIPTIONS_PER_TOPIC):
            r = session.put(f"{base}/v1/topics/topic-{t}/subscriptions/sub-{n}",
                            json={"initial_position": "earliest"}, timeout=60)
            if r.status_code != 201:
                raise RuntimeError(f"subscription: {r.status_code} {r.text[:300]}")


def measure(base: str, path: str, loads: int) -> tuple[float, float]:
    """Median and slowest milliseconds of ``loads`` loads (after one warm-up)."""
    session = requests.Session()
    times = []
    for n in range(loads + 1):
        started = time.perf_counter()
        r = session.get(f"{base}{path}", timeout=60)
        took = (time.perf_counter() - started) * 1000
        if r.status_code != 200:
            raise RuntimeError(f"{path}: {r.status_code} {r.text[:300]}")
        if n:
            times.append(took)
    return statistics.median(times), max(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--transactions", type=int, default=100_000)
    parser.add_argument("--loads", type=int, default=9)
    args = parser.parse_args()
    with bench_database() as url:
        seconds = generate(url, args.transactions)
        with psycopg.connect(libpq_url(url)) as conn:
            counts = {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()
                      for t in ("txn", "half_message", "message_log", "check_log", "op_log")}
        print(f"generated in {seconds:.0f} s: "
              + ", ".join(f"{t} {n[0] if n else 0:,}" for t, n in counts.items()))
        with serve(url) as server:
            base = f"http://127.0.0.1:{server.port}"
            subscribe(base)
            message_id = first_message_id(base, args.transactions)
            print(f"{'page':<36} {'median ms':>10} {'slowest ms':>11}")
            worst = 0.0
            for name, path in pages(args.transactions, message_id):
                median, slowest = measure(base, path, args.loads)
                worst = max(worst, median)
                print(f"{name:<36} {median:>10.1f} {slowest:>11.1f}")
            print(f"slowest median {worst:.1f} ms (goal < {GOAL_MS:.0f} ms)")


if __name__ == "__main__":
    main()
