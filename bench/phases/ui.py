"""Benchmark: how long each dashboard page takes with a large history stored, on PostgreSQL.

In a database of its own (dropped at the end), rows are generated in SQL, consistent with
the schema: 100,000 transactions in 10 producer groups, 10 messages each (1,000,000
half messages); 95 % committed (their messages in the committed log of 8 topics, dense
offsets, commit times spread over the last 72 hours), 1 % rolled back, 4 % PREPARED,
0.1 % DISCARDED (appended to the discard topic), with an op log row per resolution and
check log rows for a tenth of them, over the last two hours. Then ``txmsg serve
--no-checker`` (access control off, on loopback) serves the pages, with
``SUBSCRIPTIONS_PER_TOPIC`` subscriptions on each topic from its earliest offset (more
than the overview shows, all with a backlog), and each page is
loaded ``--loads`` times over one keep-alive connection after a warm-up load: the median
and the slowest time to the answer's last byte, which on loopback is the server's time::

    python -m bench.phases.ui [--transactions 100000] [--loads 9]
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import time

import psycopg
import requests

from bench.harness.pgdb import bench_database, libpq_url
from bench.harness.service import serve

GROUPS = 10
TOPICS = 8
PER_TXN = 10
SUBSCRIPTIONS_PER_TOPIC = 8
GOAL_MS = 200.0

GENERATE = """
DO $$ BEGIN
  IF current_setting('is_superuser') = 'on' THEN
    PERFORM set_config('session_replication_role', 'replica', true);
  END IF;
END $$;

INSERT INTO producer_group (name, check_urls, check_timeout_ms, created_at, updated_at)
SELECT 'bench-' || g, '["http://127.0.0.1:9/check"]', 3000, now(), now()
FROM generate_series(0, {groups} - 1) g;

-- state by t: every 1000th DISCARDED, t % 100 in 1..4 PREPARED, 5 ROLLED_BACK, else COMMITTED
INSERT INTO txn (id, producer_group, transaction_id, state, fingerprint, message_count,
                 check_url, check_immunity_seconds, check_times, next_check_at, created_at,
                 resolved_at)
SELECT t, 'bench-' || (t % {groups}), 'tx-' || t,
       CASE WHEN t % 1000 = 0 THEN 'DISCARDED' WHEN t % 100 BETWEEN 1 AND 4 THEN 'PREPARED'
            WHEN t % 100 = 5 THEN 'ROLLED_BACK' ELSE 'COMMITTED' END,
       md5(t::text), {per_txn}, NULL, 0,
       CASE WHEN t % 1000 = 0 THEN 15 ELSE 0 END,
       now() + interval '1 day',
       now() - (1 - t::float8 / {txns}) * interval '72 hours' - interval '1 second',
       CASE WHEN t % 1000 = 0 OR t % 100 BETWEEN 1 AND 4 THEN NULL
            ELSE now() - (1 - t::float8 / {txns}) * interval '72 hours' END
FROM generate_series(1, {txns}) t;

INSERT INTO half_message (id, message_id, txn_id, seq, topic, tag, keys, properties, body,
                          body_is_text, created_at)
SELECT g, upper(md5(g::text)), (g - 1) / {per_txn} + 1, (g - 1) % {per_txn},
       'topic-' || ((g - 1) % {topics}), 'created', '["k-' || g || '"]', '{{}}',
       convert_to('{{"order": ' || g || ', "lines": ["' || repeat('item ', 16) || '"]}}',
                  'UTF8'),
       g % 50 <> 0, now() - (1 - g::float8 / ({txns} * {per_txn})) * interval '72 hours'
FROM generate_series(1, {txns} * {per_txn}) g;

INSERT INTO message_log (topic, queue_offset, half_message_id, properties, committed_at)
SELECT h.topic, row_number() OVER (PARTITION BY h.topic ORDER BY h.id) - 1, h.id, NULL,
       t.resolved_at
FROM half_message h JOIN txn t ON t.id = h.txn_id WHERE t.state = 'COMMITTED';

INSERT INTO message_log (topic, queue_offset, half_message_id, properties, committed_at)
SELECT 'TRANS_CHECK_MAX_TIME_TOPIC', row_number() OVER (ORDER BY h.id) - 1, h.id,
       '{{"REAL_TOPIC": "' || h.topic || '", "TRANSACTION_ID": "' || t.transaction_id
       || '", "PRODUCER_GROUP": "' || t.producer_group || '", "CHECK_TIMES": "15"}}',
       t.created_at + interval '8 minutes'
FROM half_message h JOIN txn t ON t.id = h.txn_id WHERE t.state = 'DISCARDED';

INSERT INTO topic_offset (topic, next_offset)
SELECT topic, max(queue_offset) + 1 FROM message_log GROUP BY topic;

INSERT INTO op_log (txn_id, op, source, check_times, created_at)
SELECT id, CASE state WHEN 'COMMITTED' THEN 'COMMIT' WHEN 'ROLLED_BACK' THEN 'ROLLBACK'
                      ELSE 'DISCARD' END, 'api', check_times,
       COALESCE(resolved_at, created_at + interval '8 minutes')
FROM txn WHERE state <> 'PREPARED';

-- a tenth of the transactions checked once in the last two hours, the discarded 15 times
INSERT INTO check_log (txn_id, check_times, result, url, detail, created_at, duration_ms)
SELECT t, 1, CASE WHEN t % 3 = 0 THEN 'COMMIT' WHEN t % 3 = 1 THEN 'UNKNOWN' ELSE 'TIMEOUT' END,
       'http://127.0.0.1:9/check', NULL, now() - (t % 7200) * interval '1 second', 4.2
FROM generate_series(10, {txns}, 10) t;
INSERT INTO check_log (txn_id, check_times, result, url, detail, created_at, duration_ms)
SELECT t, n, 'TIMEOUT', 'http://127.0.0.1:9/check', 'timed out',
       now() - interval '3 hours' + n * interval '30 seconds', 3000.0
FROM generate_series(1000, {txns}, 1000) t, generate_series(1, 15) n;

SELECT setval(pg_get_serial_sequence('txn', 'id'), {txns});
SELECT setval(pg_get_serial_sequence('half_message', 'id'), {txns} * {per_txn});
"""


def generate(url: str, txns: int) -> float:
    started = time.perf_counter()
    with psycopg.connect(libpq_url(url)) as conn:
        conn.execute(GENERATE.format(groups=GROUPS, topics=TOPICS, per_txn=PER_TXN, txns=txns))
        conn.commit()
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
    return time.perf_counter() - started


def pages(txns: int) -> list[tuple[str, str]]:
    """(name, path) of every page, at places a large history makes hardest."""
    discarded = txns // 1000 * 1000
    group = f"bench-{discarded % GROUPS}"
    message = f"{(discarded - 1) * PER_TXN + 1}"  # the discarded transaction's first
    message_id = hashlib.md5(message.encode()).hexdigest().upper()
    return [
        ("overview", "/ui/"),
        ("transactions", "/ui/transactions"),
        ("transactions by group and state", f"/ui/transactions?group={group}&state=PREPARED"),
        ("transactions by state (rare)", "/ui/transactions?state=DISCARDED"),
        ("discarded", "/ui/discarded"),
        ("search by transaction id", f"/ui/transactions?q=tx-{txns // 2 + 7}"),
        ("search by message id", f"/ui/transactions?q={message_id}"),
        ("transaction (15 checks)", f"/ui/transactions/{group}/tx-{discarded}"),
        ("confirmation", f"/ui/transactions/{group}/tx-{discarded}/resume-check"),
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
            print(f"{'page':<36} {'median ms':>10} {'slowest ms':>11}")
            worst = 0.0
            for name, path in pages(args.transactions):
                median, slowest = measure(base, path, args.loads)
                worst = max(worst, median)
                print(f"{name:<36} {median:>10.1f} {slowest:>11.1f}")
            print(f"slowest median {worst:.1f} ms (goal < {GOAL_MS:.0f} ms)")


if __name__ == "__main__":
    main()
