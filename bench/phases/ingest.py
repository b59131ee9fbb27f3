"""Benchmark: `txmsg ingest` against a plain Spark JDBC job and ``COPY``, on the same rows.

N committed messages in 4 topics are written through the service's own write path
(``bench.harness.seed``), in a database of their own on the PostgreSQL server,
dropped at the end. Then, in interleaved rounds (medians reported, since the machine's
load drifts), each a process of its own as a user runs it:

- ``txmsg ingest --output DIR`` into a fresh directory;
- ``bench.phases.plain_spark``: the same rows through Spark's JDBC source into Parquet by hand;
- ``COPY (SELECT * FROM committed_messages) TO STDOUT`` into this process.

Wall time (Spark's start included), peak RSS of the process tree (Python and the JVM),
output size. Finally incremental runs, in ``--incremental-rounds`` rounds: ``--incremental``
new rows committed, ``txmsg ingest`` again on the last round's output, and next to it the
floor such a run is measured against, a fresh process that starts Spark (same settings as
the plain job), counts ``spark.range(1)`` and stops, once with Spark's default JVM and once
with the JVM options `txmsg ingest` gives a short run::

    python -m bench.phases.ingest [--rows 1000000] [--rounds 3] [--database-url postgresql://...]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg

from app.domain.messages import MessageIn
from bench.harness import seed
from bench.harness.pgdb import bench_database, clean_env, libpq_url, txmsg_command
from bench.harness.procs import Sampler
from spark_outbox.dataset import OutputDir
from spark_outbox.plan import TopicRange

TOPICS = 4  # message g goes to topic (g-1) % TOPICS, at offset (g-1) // TOPICS: dense
PER_TXN = 4  # messages per transaction
PLAIN_PARTITIONS = 4
GROUP = "bench"
# for smoke runs: a JVM without the optimising compiler starts about twice as fast
QUICK_JVM = {"JAVA_TOOL_OPTIONS": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"}

COPY = "COPY (SELECT * FROM committed_messages WHERE topic LIKE 'bench-%') TO STDOUT"


def _txns(first: int, rows: int) -> Iterator[seed.Txn]:
    """Messages ``first+1 .. first+rows`` (``first`` a multiple of PER_TXN), PER_TXN to a
    transaction: message g on topic bench-((g-1) % TOPICS), so each topic's offsets are dense."""
    for start in range(first + 1, first + rows + 1, PER_TXN):
        numbers = range(start, min(start + PER_TXN, first + rows + 1))
        yield seed.Txn(f"tx-{(start - 1) // PER_TXN + 1}", [_message(g) for g in numbers])


def _message(g: int) -> MessageIn:
    fields: dict[str, object] = {"topic": f"bench-{(g - 1) % TOPICS}", "keys": [f"k-{g}"],
                                 "properties": {"n": str(g)}}
    if g % 2 == 0:
        fields["tag"] = "even"
    body = f"{'message body ' * 8}{g}"
    if g % 10 == 0:  # a binary body every tenth
        return MessageIn.model_validate({**fields, "body_base64": _b64(body.encode())})
    return seed.text(body=body, **fields)  # type: ignore[arg-type]


def generate(url: str, rows: int, first: int = 0) -> float:
    """Commit messages ``first+1 .. first+rows`` through the service's write path;
    seconds taken."""
    started = time.perf_counter()
    with seed.engine_of(url) as engine:
        if first == 0:
            seed.register(engine, GROUP, "http://127.0.0.1:9/check")
        seed.write(engine, GROUP, _txns(first, rows))
    if first == 0:
        with psycopg.connect(libpq_url(url), autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE")
    return time.perf_counter() - started


def copy_out(url: str) -> dict[str, Any]:
    """COPY the committed rows to this process."""
    started = time.perf_counter()
    size = lines = 0
    with psycopg.connect(libpq_url(url)) as conn, conn.cursor() as cur, cur.copy(COPY) as copy:
        for block in copy:
            size += len(block)
            lines += bytes(block).count(b"\n")
    return {"seconds": time.perf_counter() - started, "rows": lines, "bytes": size}


def _timed(command: list[str], env: dict[str, str], label: str) -> dict[str, Any]:
    """Run ``command``, echoing its output on stderr; wall time, peak RSS and stdout."""
    started = time.perf_counter()
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    out: list[str] = []
    with Sampler(proc.pid, interval=0.25) as sampler:
        assert proc.stdout is not None
        for line in proc.stdout:
            out.append(line)
            print(f"   [{label}] {line.rstrip()}", file=sys.stderr, flush=True)
        proc.wait()
    if proc.returncode != 0:
        raise RuntimeError(f"{label} failed ({proc.returncode}): {''.join(out[-5:])}")
    peak = max((s["rss"] for s in sampler.samples), default=0)
    return {"seconds": time.perf_counter() - started, "peak_rss_bytes": peak,
            "output": "".join(out)}


def ingest_once(url: str, out: Path, **env: str) -> dict[str, Any]:
    """``txmsg ingest --output out``, as a user runs it."""
    done = _timed([*txmsg_command(), "ingest", "--output", str(out)],
                  clean_env(TXMSG_DATABASE_URL=url, **env), "txmsg ingest")
    text = done.pop("output")
    total = re.search(r"txmsg ingest: ([\d,]+) rows from \d+ topic\(s\) in ([\d.]+) s", text)
    started = re.search(r"started in ([\d.]+) s", text)
    stages = re.search(r"^  time: (.*)$", text, re.MULTILINE)
    if not total or not started:
        raise RuntimeError(f"unexpected txmsg ingest output: {text[-500:]}")
    steps = re.findall(r"([A-Za-z ]+) ([\d.]+) s", stages.group(1)) if stages else []
    return {**done, "rows": int(total.group(1).replace(",", "")),
            "run_seconds": float(total.group(2)),
            "spark_startup_seconds": float(started.group(1)),
            "stages": {k.strip(): float(v) for k, v in steps}, "output_bytes": _size(out)}


def plain_once(url: str, out: Path, upper_bound: int, **env: str) -> dict[str, Any]:
    """The hand-written Spark job of ``bench.phases.plain_spark`` on the same rows."""
    done = _timed([sys.executable, "-m", "bench.phases.plain_spark", "--database-url", url,
                   "--output", str(out), "--upper-bound", str(upper_bound),
                   "--partitions", str(PLAIN_PARTITIONS)], clean_env(**env), "plain Spark job")
    timings = json.loads(done.pop("output").strip().splitlines()[-1])
    return {**done, "spark_startup_seconds": timings["startup_seconds"],
            "job_seconds": timings["job_seconds"], "output_bytes": _size(out)}


def seed_checkpoint(url: str, lake: Path) -> None:
    """A checkpoint at every topic's watermark, as a full ingest would leave it (for
    incremental runs on a large database without ingesting it all first)."""
    with psycopg.connect(libpq_url(url)) as conn:
        marks = conn.execute("SELECT topic, next_offset FROM topic_watermarks").fetchall()
    lake.mkdir(parents=True)
    OutputDir(lake).commit([TopicRange(topic, 0, int(end)) for topic, end in marks])


def trivial_once(url: str, short_jvm: bool = False, **env: str) -> dict[str, Any]:
    """A fresh process: Spark's start, ``spark.range(1).count()``, stop (``short_jvm``:
    with the JVM options of a short `txmsg ingest` run)."""
    done = _timed([sys.executable, "-m", "bench.phases.plain_spark", "--database-url", url,
                   "--trivial", *(["--short-jvm"] if short_jvm else [])], clean_env(**env),
                  "Spark start+stop" + (", short-run JVM" if short_jvm else ""))
    timings = json.loads(done.pop("output").strip().splitlines()[-1])
    return {**done, "spark_startup_seconds": timings["startup_seconds"]}


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*.parquet"))


def _median(runs: list[dict[str, Any]], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def run(database_url: str | None = None, rows: int = 1_000_000, rounds: int = 3,
        incremental: int = 1_000, quick: bool = False,
        incremental_rounds: int = 2) -> dict[str, Any]:
    """Generate ``rows`` committed messages on the PostgreSQL server of ``database_url``
    (an admin URL; default TXMSG_BENCH_PG_URL or the local server), then time, in
    ``rounds`` interleaved rounds, `txmsg ingest`, the plain Spark job and COPY; then
    ``incremental_rounds`` incremental runs of ``incremental`` new rows each (none if 0),
    each next to a trivial Spark start+stop. ``quick``: the Spark processes on a
    fast-starting JVM, for smoke runs. The figures, as a dict."""
    jvm = QUICK_JVM if quick else {}
    if rows % PER_TXN or rows < 1:
        raise ValueError(f"rows must be a positive multiple of {PER_TXN}")
    work = Path(tempfile.mkdtemp(prefix="txmsg-bench-ingest-"))
    ingests: list[dict[str, Any]] = []
    plains: list[dict[str, Any]] = []
    copies: list[dict[str, Any]] = []
    try:
        with bench_database(database_url) as url:
            generated = generate(url, rows)
            print(f"generated {rows:,} committed messages in {generated:.1f} s",
                  file=sys.stderr, flush=True)
            upper = -(-rows // TOPICS)
            for k in range(rounds):
                for d in work.iterdir():
                    shutil.rmtree(d)
                ingests.append(ingest_once(url, work / f"lake-{k}", **jvm))
                plains.append(plain_once(url, work / f"plain-{k}", upper, **jvm))
                copies.append(copy_out(url))
            agains: list[dict[str, Any]] = []
            trivials: list[dict[str, Any]] = []
            shorts: list[dict[str, Any]] = []
            loads: list[float] = []
            lake = work / f"lake-{max(rounds - 1, 0)}"
            if rounds == 0:
                seed_checkpoint(url, lake)
            for k in range(incremental_rounds if incremental else 0):
                generate(url, incremental, first=rows + k * incremental)
                loads.append(os.getloadavg()[0])
                agains.append(ingest_once(url, lake, **jvm))
                trivials.append(trivial_once(url, **jvm))
                shorts.append(trivial_once(url, short_jvm=True, **jvm))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if rounds == 0:
        if any(r["rows"] != incremental for r in agains):
            raise RuntimeError(f"incremental runs gave {[r['rows'] for r in agains]} rows")
        result = {"rows": rows, "topics": TOPICS, "rounds": 0,
                  "incremental": _incremental(incremental, agains, trivials, shorts, loads)
                  if agains else None}
        _print_incremental(result, incremental, agains, loads)
        return result
    for name, got in [("txmsg ingest", [r["rows"] for r in ingests]),
                      ("COPY", [c["rows"] for c in copies]),
                      ("incremental", [r["rows"] for r in agains])]:
        want = incremental if name == "incremental" else rows
        if any(n != want for n in got):
            raise RuntimeError(f"{name} gave {got} rows, expected {want}")
    ingest_s, plain_s = _median(ingests, "seconds"), _median(plains, "seconds")
    copy_s = _median(copies, "seconds")
    result = {
        "rows": rows, "topics": TOPICS, "rounds": rounds,
        "ingest_seconds": round(ingest_s, 2),
        "ingest_rows_per_second": round(rows / ingest_s),
        "ingest_spark_startup_seconds": round(_median(ingests, "spark_startup_seconds"), 2),
        "ingest_stages_seconds": {k: round(statistics.median(r["stages"].get(k, 0.0)
                                                             for r in ingests), 2)
                                  for k in ingests[0]["stages"]},
        "ingest_peak_rss_bytes": max(r["peak_rss_bytes"] for r in ingests),
        "ingest_output_bytes": ingests[-1]["output_bytes"],
        "plain_spark_seconds": round(plain_s, 2),
        "plain_spark_startup_seconds": round(_median(plains, "spark_startup_seconds"), 2),
        "plain_spark_peak_rss_bytes": max(r["peak_rss_bytes"] for r in plains),
        "plain_spark_output_bytes": plains[-1]["output_bytes"],
        "copy_seconds": round(copy_s, 2),
        "copy_megabytes": round(copies[-1]["bytes"] / 1e6, 1),
        # each round's ratio, then their median: both ran under the same load in a round
        "ingest_over_plain_spark": round(statistics.median(
            i["seconds"] / p["seconds"] for i, p in zip(ingests, plains, strict=True)), 3),
        "ingest_over_copy": round(ingest_s / copy_s, 2),
        "rounds_seconds": {"ingest": [round(r["seconds"], 1) for r in ingests],
                           "plain_spark": [round(r["seconds"], 1) for r in plains],
                           "copy": [round(c["seconds"], 1) for c in copies]},
        "incremental": _incremental(incremental, agains, trivials, shorts, loads) if agains else None,
    }
    print(f"{rows:,} rows, medians of {rounds} interleaved rounds, wall time with Spark's "
          f"start:\n"
          f"  txmsg ingest     {ingest_s:7.1f} s  {rows / ingest_s:>10,.0f} rows/s  "
          f"peak RSS {result['ingest_peak_rss_bytes'] / 2**20:,.0f} MiB  "
          f"Parquet {result['ingest_output_bytes'] / 1e6:,.0f} MB\n"
          f"  plain Spark job  {plain_s:7.1f} s  {rows / plain_s:>10,.0f} rows/s  "
          f"peak RSS {result['plain_spark_peak_rss_bytes'] / 2**20:,.0f} MiB  "
          f"Parquet {result['plain_spark_output_bytes'] / 1e6:,.0f} MB\n"
          f"  COPY TO STDOUT   {copy_s:7.1f} s  {rows / copy_s:>10,.0f} rows/s\n"
          f"  ingest / plain Spark job = {result['ingest_over_plain_spark']:.2f}x "
          f"(median of the rounds' ratios), "
          f"ingest / COPY = {ingest_s / copy_s:.2f}x", flush=True)
    _print_incremental(result, incremental, agains, loads)
    return result


def _print_incremental(result: dict[str, Any], incremental: int,
                       agains: list[dict[str, Any]], loads: list[float]) -> None:
    if not agains:
        return
    inc = result["incremental"]
    print(f"  incremental: {incremental:,} new rows, median of {len(agains)} rounds "
          f"(1-min load average {', '.join(f'{x:.1f}' for x in loads)}):\n"
          f"    txmsg ingest           {inc['seconds']:7.1f} s  "
          f"(Spark's start {inc['spark_startup_seconds']:.1f} s, the run "
          f"{inc['run_seconds']:.1f} s)\n"
          f"    Spark start+stop       {inc['spark_floor_seconds']:7.1f} s  "
          f"(spark.range(1).count() in a fresh process)\n"
          f"    Spark start+stop       {inc['spark_floor_short_jvm_seconds']:7.1f} s  "
          f"(the same, with the JVM options of a short txmsg ingest run)\n"
          f"    incremental / Spark start+stop = {inc['over_spark_floor']:.2f}x, "
          f"{inc['over_spark_floor_short_jvm']:.2f}x with the same JVM options "
          f"(medians of the rounds' ratios)", flush=True)


def _incremental(rows: int, agains: list[dict[str, Any]], trivials: list[dict[str, Any]],
                 shorts: list[dict[str, Any]], loads: list[float]) -> dict[str, Any]:
    return {
        "rows": rows, "rounds": len(agains),
        "seconds": round(_median(agains, "seconds"), 2),
        "spark_startup_seconds": round(_median(agains, "spark_startup_seconds"), 2),
        "run_seconds": round(_median(agains, "run_seconds"), 2),
        "stages": {k: round(statistics.median(r["stages"].get(k, 0.0) for r in agains), 2)
                   for k in agains[0]["stages"]},
        "spark_floor_seconds": round(_median(trivials, "seconds"), 2),
        "over_spark_floor": round(statistics.median(
            a["seconds"] / t["seconds"] for a, t in zip(agains, trivials, strict=True)), 3),
        "spark_floor_short_jvm_seconds": round(_median(shorts, "seconds"), 2),
        "over_spark_floor_short_jvm": round(statistics.median(
            a["seconds"] / t["seconds"] for a, t in zip(agains, shorts, strict=True)), 3),
        "rounds_seconds": {"ingest": [round(r["seconds"], 1) for r in agains],
                           "spark_floor": [round(r["seconds"], 1) for r in trivials],
                           "spark_floor_short_jvm": [round(r["seconds"], 1) for r in shorts]},
        "load_average_1min": [round(x, 2) for x in loads],
    }


def _main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3,
                        help="full ingests; 0: none, the incremental runs start from a "
                             "checkpoint at the watermarks")
    parser.add_argument("--incremental", type=int, default=1_000,
                        help="new rows for each incremental run at the end")
    parser.add_argument("--incremental-rounds", type=int, default=2,
                        help="incremental runs, each next to a trivial Spark start+stop")
    parser.add_argument("--database-url", default=None,
                        help="PostgreSQL admin URL (default: TXMSG_BENCH_PG_URL or local)")
    args = parser.parse_args()
    print(json.dumps(run(args.database_url, args.rows, args.rounds, args.incremental,
                         incremental_rounds=args.incremental_rounds), indent=1))


if __name__ == "__main__":
    _main()
