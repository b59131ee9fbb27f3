"""`make bench` in its quick mode: every figure is produced (benchmarks measure; no
assertion here is about speed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from tests.databases import PG_ADMIN_URL

ROOT = Path(__file__).resolve().parents[2]


# the quick run takes about a minute on a quiet machine, four with its 2 cores shared
@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.timeout(600)
def test_quick_bench_reports_every_figure(pg_database: str, tmp_path: Path) -> None:
    # pg_database: PostgreSQL is reachable (else skipped, or failed in CI)
    out = tmp_path / "results.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TXMSG_")}
    env["TXMSG_BENCH_PG_URL"] = PG_ADMIN_URL
    proc = subprocess.Popen([sys.executable, "-m", "bench.run", "--quick", "--out", str(out)],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        stdout, stderr = proc.communicate(timeout=480)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, stdout[-3000:] + stderr[-3000:]
    r = json.loads(out.read_text())
    assert r["errors"] == {}
    m = r["machine"]
    assert m["cores"] >= 1 and m["ram_bytes"] > 0 and m["cpu_model"]
    assert m["postgresql"]["version"].startswith("PostgreSQL")

    def positive(*path: str) -> float:
        node = r
        for key in path:
            node = node[key]
        assert isinstance(node, int | float) and node > 0, (path, node)
        return node

    positive("a_raw_single_insert", "per_second")
    positive("retention_throughput", "b_on_over_off")
    positive("retention_throughput", "d_on_over_off")
    positive("retention_drain", "emptied_seconds")
    positive("retention_drain", "commit_ms_max")
    positive("b_txmsg_send_commit", "per_second")
    positive("c_raw_batch_insert", "per_second")
    positive("d_txmsg_batch_send_commit", "messages_per_second")
    positive("b_access_control_on", "per_second")
    positive("d_access_control_on", "messages_per_second")
    for key in ("a_raw_single_insert", "b_txmsg_send_commit", "c_raw_batch_insert",
                "d_txmsg_batch_send_commit", "b_access_control_on", "d_access_control_on"):
        assert r[key]["errors"] == 0, r[key]
    # group commit really grouped: more requests than database transactions
    batches = r["b_txmsg_send_commit"]["group_commit"]
    assert sum(w["requests"] for w in batches.values()) > \
        sum(w["transactions"] for w in batches.values()) > 0
    e = r["e_commit_latency_half_peak"]
    assert e["errors"] == 0 and e["ops"] > 0
    assert 0 < e["commit_ms"]["p50"] <= e["commit_ms"]["p99"]
    assert e["service_rss"]["samples"] > 1 and e["service_rss"]["baseline"] > 0
    f = r["f_due_scan"]
    assert f["pending_only"]["rows"] == f["with_resolved"]["rows"] == 200
    assert f["pending_only"]["query"]
    positive("f_due_scan", "ratio")
    assert "ix_txn_due" in f["plan"]
    g = r["g_receive_ack"]
    assert g["errors"] == 0 and g["messages_per_second"] > 0 and g["batch"] == 100
    # (o) ordered consumption: each type beside shared on the same keyed messages
    for key, kind in (("o_shared_same_messages", "shared"), ("o_key_shared_1000_keys", "key_shared"),
                      ("o_shared_10_keys", "shared"), ("o_key_shared_10_keys", "key_shared"),
                      ("o_shared_one_consumer", "shared"),
                      ("o_failover_one_consumer", "failover")):
        assert r[key]["type"] == kind and r[key]["errors"] == 0, r[key]
        assert r[key]["messages_per_second"] > 0 and r[key]["load_average"], key
    assert r["o_key_shared_1000_keys"]["keys"] == 1000 and r["o_key_shared_10_keys"]["keys"] == 10
    assert r["o_failover_one_consumer"]["clients"] == 1
    assert r["o_failover_one_consumer"]["ack"].startswith("cumulative")
    backlog = r["o_receive_vs_backlog"]
    assert backlog["large"]["backlog"] > backlog["small"]["backlog"]
    assert 0 < backlog["small"]["median_ms"] and 0 < backlog["large"]["median_ms"]
    h = r["h_delivery_latency_half_peak"]
    assert h["errors"] == 0 and h["delivered"] == h["committed"] > 0
    assert h["delivery_ms"]["p50"] <= h["delivery_ms"]["p99"]
    idle = r["idle_long_polls"]
    assert idle["answered_during_window"] == 0  # they were still waiting
    assert idle["with"]["rss_max"] > 0 and idle["without"]["rss_max"] > 0
    c = r["checker_memory"]
    assert c["large"]["checks_delivered"] > 0 and c["large"]["rss_peak"] > 0
    assert c["reference"]["rss_peak"] > 0
    for name in ("b_over_a", "d_over_c", "f_scan_ratio", "commit_p50_ms", "commit_p99_ms",
                 "serve_rss_max_deviation", "checker_peak_rss_large_over_reference",
                 "access_control_overhead_b", "access_control_overhead_d", "g_over_d",
                 "delivery_p50_ms", "delivery_p99_ms", "idle_polls_service_rss_delta_bytes",
                 "idle_polls_service_cpu_seconds_delta", "o_key_shared_over_shared",
                 "o_failover_over_shared", "o_receive_large_over_small_backlog"):
        assert r["ratios"][name] is not None, name
    assert set(r["goals"]) >= {"b_over_a", "d_over_c", "f_scan_ratio", "commit_p99_ms",
                               "access_control_overhead_b", "g_over_d", "delivery_p99_ms",
                               "o_key_shared_over_shared", "o_failover_over_shared"}
    # PgQueuer beside txmsg, in the same rounds, CPU per 1,000 messages on each side
    assert r["pgqueuer"]["version"]
    for key in ("p_pgqueuer_publish_single", "p_pgqueuer_publish_batched", "p_pgqueuer_consume"):
        assert r[key]["errors"] == 0 and r[key]["messages_per_second"] > 0, r[key]
        assert r[key]["load_average"], key
    assert r["p_pgqueuer_publish_batched"]["batch"] == r["p_pgqueuer_consume"]["batch"] == 100
    assert r["p_pgqueuer_consume"]["clients"] == g["clients"]
    comparison = r["pgqueuer_comparison"]
    for measure in ("publish_single", "publish_batched", "consume"):
        row = comparison[measure]
        for side in ("txmsg", "pgqueuer"):
            cpu = row[side]["cpu_ms_per_1000_messages"]
            assert cpu["clients"] > 0 and cpu["postgres"] > 0, (measure, side, cpu)
        assert row["txmsg"]["cpu_ms_per_1000_messages"]["service"] > 0, measure
        assert "service" not in row["pgqueuer"]["cpu_ms_per_1000_messages"]
        assert row["txmsg_over_pgqueuer"] > 0
    assert comparison["publish_single"]["raw"]["messages_per_second"] > 0
    sweep = r["latency_by_concurrency"]
    for side in ("txmsg", "pgqueuer"):
        assert set(sweep[side]) == {str(c) for c in r["plan"]["sweep_clients"]}
        for point in sweep[side].values():
            assert point["errors"] == 0 and 0 < point["latency_ms"]["p50"] <= \
                point["latency_ms"]["p99"]
    assert set(r["goals"]) >= {"b_over_pgqueuer_single", "d_over_pgqueuer_batched",
                               "g_over_pgqueuer_consume"}
    # (l) one client, each route beside its floors: no lone request waited for a batch.
    # CPU is read in ticks of 10 ms, which 50 quick requests may not reach: only a number
    lone = r["l_one_client"]
    for route in ("send", "commit", "read one", "get transaction"):
        figures = lone["this tree"][route]
        assert 0 < figures["p50_ms"] <= figures["p99_ms"] and figures["cpu_ms"] >= 0, route
    assert lone["this tree"]["mean batch"] == {"send": 1.0, "finish": 1.0}
    assert lone["PostgreSQL alone (psycopg, the floor)"]["INSERT + COMMIT"]["p50_ms"] > 0
    bare = lone["Granian alone (a bare ASGI app, the floor)"]["bare ASGI answer"]
    assert 0 < bare["p50_ms"] <= bare["p99_ms"] and bare["cpu_ms"] >= 0
    assert set(r["goals"]) >= {"lone_pair_p50_ms", "lone_read_p50_ms",
                               "b_service_cpu_ms_per_pair"}
    assert r["ratios"]["lone_pair_p50_ms"] == \
        round(lone["this tree"]["send + commit"]["p50_ms"], 3)
    # and `make bench` draws them
    charts = tmp_path / "images"
    drawn = subprocess.run([sys.executable, "-m", "bench.report.charts", "--results", str(out),
                            "--out-dir", str(charts)], cwd=ROOT, capture_output=True,
                           text=True, timeout=120, check=False)
    assert drawn.returncode == 0, drawn.stderr[-3000:]
    for name in ("bench-throughput.png", "bench-cpu.png", "bench-latency.png"):
        assert (charts / name).read_bytes().startswith(b"\x89PNG"), name
    # the benchmark's own databases are gone
    admin = create_engine(PG_ADMIN_URL)
    with admin.connect() as conn:
        left = conn.execute(text("SELECT count(*) FROM pg_database WHERE datname LIKE :p"),
                            {"p": f"txmsg_bench_{proc.pid}_%"}).scalar_one()
    admin.dispose()
    assert left == 0
