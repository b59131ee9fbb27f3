"""Benchmark: the lake kept current (#41), beside `txmsg ingest`, in one run.

- catch-up: N committed messages (4 topics), then in interleaved rounds a batch
  `txmsg ingest` into a fresh directory and a Structured Streaming query on the `txmsg`
  source with Trigger.AvailableNow into Parquet (a process each, Spark's start included):
  messages per second of each, and their ratio;
- freshness: `txmsg ingest --follow --interval 1` while a producer commits a steady rate
  (sends + commits through `txmsg serve`): each (topic, offset)'s time from its commit's
  answer to its row being readable in the lake (a reader polls the dataset's new files);
- memory: the follow's process tree RSS (Python and the JVM) sampled while it runs.

    python -m bench.phases.streaming [--rows 1000000] [--rounds 2] [--rate 500] [--seconds 60]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import requests

from bench.harness.pgdb import bench_database, clean_env, libpq_url, txmsg_command
from bench.harness.procs import Sampler
from bench.phases.ingest import generate, ingest_once

STREAM_SCRIPT = """
import sys
from pyspark.sql import SparkSession
from spark_outbox import streaming
from spark_outbox.session import SESSION_CONF
builder = SparkSession.builder.appName("txmsg-stream-bench").master("local[*]")
for k, v in SESSION_CONF.items():
    builder = builder.config(k, v)
spark = builder.getOrCreate()
streaming.register(spark)
url, out, checkpoint = sys.argv[1:4]
query = (spark.readStream.format("txmsg").option("url", url)
         .option("startingOffsets", "earliest").load()
         .writeStream.format("parquet").option("checkpointLocation", checkpoint)
         .trigger(availableNow=True).start(out))
query.awaitTermination()
spark.stop()
"""


def stream_once(url: str, out: Path, env: dict[str, str]) -> dict[str, Any]:
    script = out.parent / "stream_query.py"
    script.write_text(STREAM_SCRIPT)
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, str(script), url, str(out),
                             str(out.parent / "checkpoint")], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    with Sampler(proc.pid, interval=0.25) as sampler:
        _, err = proc.communicate(timeout=3600)
    took = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"stream query failed: {err[-2000:]}")
    rows = pq.ParquetDataset(str(out)).read(columns=["offset"]).num_rows
    peak = max((x["rss"] for x in sampler.samples), default=0)
    return {"seconds": took, "rows": rows, "peak_rss_bytes": peak}


def catch_up(url: str, rows: int, rounds: int, env: dict[str, str]) -> dict[str, Any]:
    batch: list[dict[str, Any]] = []
    stream: list[dict[str, Any]] = []
    for r in range(rounds):
        order = ("batch", "stream") if r % 2 == 0 else ("stream", "batch")
        for kind in order:
            with tempfile.TemporaryDirectory() as tmp:
                out = Path(tmp) / "lake"
                if kind == "batch":
                    batch.append({k: v for k, v in ingest_once(url, out, **env).items()
                                  if k != "stages"})
                else:
                    stream.append(stream_once(url, out, clean_env(PYSPARK_PYTHON=sys.executable)))
            print(f"  round {r + 1} {kind}: {(batch if kind == 'batch' else stream)[-1]}",
                  flush=True)
    b = statistics.median(x["seconds"] for x in batch)
    s = statistics.median(x["seconds"] for x in stream)
    ratios = [bx["seconds"] / sx["seconds"] for bx, sx in zip(batch, stream, strict=True)]
    return {"rows": rows, "batch_s": b, "stream_s": s, "batch_per_s": rows / b,
            "stream_per_s": rows / s, "ratio_of_medians": b / s,
            "median_ratio": statistics.median(ratios), "rounds": {"batch": batch,
                                                                  "stream": stream}}


def freshness(url: str, database_url: str, rate: int, seconds: float,
              env: dict[str, str]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        lake = Path(tmp) / "lake"
        port = _free_port()
        serve_env = clean_env(TXMSG_DATABASE_URL=database_url)
        serve = subprocess.Popen([*txmsg_command(), "serve", "--port", str(port), "--no-checker"],
                                 env=serve_env, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL, start_new_session=True)
        base = f"http://127.0.0.1:{port}"
        _wait(lambda: requests.get(f"{base}/readyz", timeout=1).status_code == 200, 60)
        requests.put(f"{base}/v1/producer-groups/fresh",
                     json={"check_urls": ["http://127.0.0.1:9/check"]}, timeout=10)
        follow = subprocess.Popen([*txmsg_command(), "ingest", "--output", str(lake), "--follow",
                                   "--interval", "1", "--topics", "fresh"],
                                  env=serve_env, stdout=open(Path(tmp) / "follow.log", "w"),
                                  stderr=subprocess.STDOUT, start_new_session=True)
        committed: dict[int, float] = {}
        seen: dict[int, float] = {}
        rss: list[tuple[float, int]] = []
        stop = threading.Event()

        threads = 16
        warm = requests.post(f"{base}/v1/producer-groups/fresh/transactions",
                             json={"topic": "fresh", "body": "warm"}, timeout=10).json()
        requests.post(f"{base}/v1/producer-groups/fresh/transactions/"
                      f"{warm['transaction_id']}/commit", timeout=10)
        _wait(lambda: any(_final(f) for f in lake.rglob("*.parquet")), 180)

        def produce() -> None:
            session = requests.Session()
            gap = threads / rate
            due = time.monotonic()
            end = due + seconds
            while time.monotonic() < end and not stop.is_set():
                sent = session.post(f"{base}/v1/producer-groups/fresh/transactions",
                                    json={"topic": "fresh", "body": "x" * 100},
                                    timeout=10).json()
                done = session.post(f"{base}/v1/producer-groups/fresh/transactions/"
                                    f"{sent['transaction_id']}/commit", timeout=10).json()
                committed[done["messages"][0]["offset"]] = time.monotonic()
                due += gap
                pause = due - time.monotonic()
                if pause > 0:
                    time.sleep(pause)

        def read() -> None:
            known: set[str] = set()
            while not stop.is_set():
                try:
                    files = list(lake.rglob("*.parquet"))
                except OSError:  # a run's staging removed while it was walked: next look
                    files = []
                for f in files:
                    if str(f) in known or not _final(f):
                        continue
                    try:
                        offsets = pq.read_table(f, columns=["offset"]).column("offset")
                    except Exception:  # noqa: BLE001 - a file being written: next look
                        continue
                    known.add(str(f))
                    now = time.monotonic()
                    for o in offsets.to_pylist():
                        seen.setdefault(o, now)
                time.sleep(0.1)

        with Sampler(follow.pid, interval=5) as sampler:
            producers = [threading.Thread(target=produce) for _ in range(threads)]
            reader = threading.Thread(target=read)
            reader.start()
            for p in producers:
                p.start()
            while any(p.is_alive() for p in producers):
                time.sleep(1)
            try:
                _wait(lambda: set(committed) <= set(seen), 60)
            except TimeoutError:
                print("missing", len(set(committed) - set(seen)), "of", len(committed),
                      "follow:", follow.poll(), (Path(tmp) / "follow.log").read_text()[-3000:])
                raise
            stop.set()
            reader.join()
            rss = [(x["t"], round(x["rss"] / 2**20)) for x in sampler.samples]
        for proc in (follow, serve):
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=60)
        committed.pop(0, None)  # the warm-up's
        lags = sorted(seen[o] - committed[o] for o in committed if o in seen)
        return {"messages": len(committed), "rate_per_s": len(committed) / seconds,
                "p50_s": lags[len(lags) // 2], "p99_s": lags[int(len(lags) * 0.99)],
                "max_s": lags[-1], "missing": len(set(committed) - set(seen)), "rss_mb": rss}


def _final(path: Path) -> bool:
    """A file of the dataset itself, not of a run's staging (hidden or underscored)."""
    return not any(part.startswith(("_", ".")) for part in path.parts[-4:])


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(condition: Any, timeout: float) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            if condition():
                return
        except Exception:  # noqa: BLE001 - not up yet
            pass
        time.sleep(0.2)
    raise TimeoutError("timed out")


def run(database_url: str | None = None, rows: int = 1_000_000, rounds: int = 2,
        rate: int = 500, seconds: float = 60, catch_up_too: bool = True) -> dict[str, Any]:
    """The phase in ``make bench``: ``database_url`` is the server's admin URL (each part
    makes a database of its own there)."""
    result: dict[str, Any] = {"load_start": os.getloadavg()}
    if catch_up_too:
        with bench_database(database_url) as url:
            result["seeded_seconds"] = generate(url, rows)
            result["catch_up"] = catch_up(url, rows, rounds, {})
            print(json.dumps({k: v for k, v in result["catch_up"].items() if k != "rounds"}),
                  flush=True)
    with bench_database(database_url) as url:
        result["freshness"] = freshness(libpq_url(url), url, rate, seconds, {})
        print(json.dumps(result["freshness"]), flush=True)
    result["load_end"] = os.getloadavg()
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--rate", type=int, default=500, help="messages committed per second")
    p.add_argument("--seconds", type=float, default=60)
    p.add_argument("--skip-catch-up", action="store_true")
    p.add_argument("--database-url", help="the PostgreSQL server's admin URL")
    args = p.parse_args()
    print(f"load at start: {os.getloadavg()}", flush=True)
    result = run(args.database_url, args.rows, args.rounds, args.rate, args.seconds,
                 not args.skip_catch_up)
    print(f"load at end: {result['load_end']}", flush=True)


if __name__ == "__main__":
    main()
