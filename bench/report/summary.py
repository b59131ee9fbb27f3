"""What a run prints: a phase's one-line brief as it ends, and the summary at the end."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from bench.phases import lone
from bench.report.figures import get, mib, rounded


def brief(result: Any) -> str:
    if not isinstance(result, dict):
        return str(result)[:200]
    keys = ("per_second", "messages_per_second", "achieved_rate", "commit_ms", "ratio",
            "peak_rss_ratio", "pending", "b_on_over_off", "d_on_over_off", "emptied_seconds",
            "commit_ms_worst_chunk_p99", "commit_ms_max", "ran_dry", "delivery_ms",
            "rss_delta_bytes", "service_cpu_seconds_delta", "postgres_cpu_seconds_delta",
            "key_shared_over_shared", "key_shared_10_keys_over_shared",
            "failover_over_shared", "large_over_small")
    return ", ".join(f"{k}={result[k]}" for k in keys if k in result)[:300]


def summary(r: dict[str, Any], out_path: Path) -> None:
    m = r["machine"]
    print(f"\ntxmsg benchmark: {m['cores']} cores, {(m['ram_bytes'] or 0) / 2**30:.1f} GiB, "
          f"{m['cpu_model']}, {m['postgresql']['version'].split(' on ')[0]}, "
          f"{r['plan']['clients']} clients")
    rows = [
        ("(a) raw INSERT commits/s", get(r, "a_raw_single_insert", "per_second")),
        ("(b) txmsg send+commit pairs/s", get(r, "b_txmsg_send_commit", "per_second")),
        ("(c) raw 100-row INSERT rows/s", get(r, "c_raw_batch_insert", "per_second")),
        ("(d) txmsg 100-msg txns, msgs/s",
         get(r, "d_txmsg_batch_send_commit", "messages_per_second")),
        ("(b) with access control on, pairs/s (overhead)",
         (f"{get(r, 'b_access_control_on', 'per_second')} "
         f"({get(r, 'ratios', 'access_control_overhead_b')}; service CPU per pair "
         f"+{get(r, 'ratios', 'access_control_service_cpu_overhead_b')})")),
        ("(d) with access control on, msgs/s (overhead)",
         (f"{get(r, 'd_access_control_on', 'messages_per_second')} "
         f"({get(r, 'ratios', 'access_control_overhead_d')})")),
        ("(e) commit p50 / p99 ms at half peak",
         (f"{get(r, 'e_commit_latency_half_peak', 'commit_ms', 'p50')} / "
         f"{get(r, 'e_commit_latency_half_peak', 'commit_ms', 'p99')}")),
        ("(l) one client p50 ms: send / commit / read one",
         " / ".join(str(rounded(get(r, "l_one_client", "this tree", route, "p50_ms")))
                    for route in ("send", "commit", "read one"))),
        ("(l) service CPU ms per request: send / commit / read",
         " / ".join(str(rounded(get(r, "l_one_client", "this tree", route, "cpu_ms")))
                    for route in ("send", "commit", "read one"))),
        ("(l) floors p50 ms: INSERT+COMMIT / bare ASGI",
         (f"{rounded(get(r, 'l_one_client', lone.FLOORS[0], 'INSERT + COMMIT', 'p50_ms'))} / "
          f"{rounded(get(r, 'l_one_client', lone.FLOORS[1], 'bare ASGI answer', 'p50_ms'))} "
          f"(bare ASGI CPU "
          f"{rounded(get(r, 'l_one_client', lone.FLOORS[1], 'bare ASGI answer', 'cpu_ms'))})")),
        ("retention: (b) / (d) on over off",
         (f"{get(r, 'retention_throughput', 'b_on_over_off')} / "
          f"{get(r, 'retention_throughput', 'd_on_over_off')}")),
        ("retention: (b) / (d) median of each round's on over off",
         (f"{get(r, 'retention_throughput', 'b_paired_on_over_off')} / "
          f"{get(r, 'retention_throughput', 'd_paired_on_over_off')}")),
        ("retention: expired rows emptied in s (commit max ms)",
         (f"{get(r, 'retention_drain', 'emptied_seconds')} "
          f"({get(r, 'retention_drain', 'commit_ms_max')})")),
        ("(g) receive+ack msgs/s, 4 consumers (g/d)",
         (f"{get(r, 'g_receive_ack', 'messages_per_second')} "
          f"({get(r, 'ratios', 'g_over_d')})")),
        ("(o) key_shared 1,000 keys / shared, msgs/s (ratio)",
         (f"{get(r, 'o_key_shared_1000_keys', 'messages_per_second')} / "
          f"{get(r, 'o_shared_same_messages', 'messages_per_second')} "
          f"({get(r, 'ratios', 'o_key_shared_over_shared')})")),
        ("(o) key_shared 10 keys / shared, msgs/s",
         (f"{get(r, 'o_key_shared_10_keys', 'messages_per_second')} / "
          f"{get(r, 'o_shared_10_keys', 'messages_per_second')}")),
        ("(o) failover / shared, 1 consumer, msgs/s (ratio)",
         (f"{get(r, 'o_failover_one_consumer', 'messages_per_second')} / "
          f"{get(r, 'o_shared_one_consumer', 'messages_per_second')} "
          f"({get(r, 'ratios', 'o_failover_over_shared')})")),
        ("(o) key_shared receive+ack median ms, small / large backlog",
         (f"{get(r, 'o_receive_vs_backlog', 'small', 'median_ms')} / "
          f"{get(r, 'o_receive_vs_backlog', 'large', 'median_ms')} "
          f"({get(r, 'o_receive_vs_backlog', 'small', 'backlog')} / "
          f"{get(r, 'o_receive_vs_backlog', 'large', 'backlog')} messages)")),
        ("(h) delivery p50 / p99 ms at half (b) peak",
         (f"{get(r, 'h_delivery_latency_half_peak', 'delivery_ms', 'p50')} / "
          f"{get(r, 'h_delivery_latency_half_peak', 'delivery_ms', 'p99')}")),
        (f"{get(r, 'idle_long_polls', 'polls')} idle long polls: service CPU s without / with",
         (f"{get(r, 'idle_long_polls', 'without', 'service_cpu_seconds')} / "
          f"{get(r, 'idle_long_polls', 'with', 'service_cpu_seconds')} in "
          f"{get(r, 'idle_long_polls', 'window_seconds')} s")),
        ("idle long polls: service RSS MiB without / with",
         (f"{mib(get(r, 'idle_long_polls', 'without', 'rss_max'))} / "
          f"{mib(get(r, 'idle_long_polls', 'with', 'rss_max'))}")),
        ("(f) due scan ms, pending only / with resolved",
         (f"{get(r, 'f_due_scan', 'pending_only', 'median_ms')} / "
         f"{get(r, 'f_due_scan', 'with_resolved', 'median_ms')}")),
        ("ingest s: txmsg ingest / plain Spark / COPY",
         (f"{get(r, 'ingest', 'ingest_seconds')} / {get(r, 'ingest', 'plain_spark_seconds')}"
          f" / {get(r, 'ingest', 'copy_seconds')}")),
        ("ingest over plain Spark job / over COPY",
         (f"{get(r, 'ingest', 'ingest_over_plain_spark')} / "
          f"{get(r, 'ingest', 'ingest_over_copy')}")),
        ("ingest 1,000 new rows / Spark start+stop, s",
         (f"{get(r, 'ingest', 'incremental', 'seconds')} / "
          f"{get(r, 'ingest', 'incremental', 'spark_floor_seconds')}")),
    ]
    partial = r["plan"]["subscriptions_only"] or r["plan"]["retention_only"] \
        or r["plan"]["pgqueuer_only"] or r["plan"].get("ordered_only")
    for label, value in rows:
        if partial and not re.search(r"\d", str(value)):
            continue  # a phase this run leaves out
        print(f"  {label:46s} {value}")
    for measure, row in r.get("pgqueuer_comparison", {}).items():
        for side in ("raw", "txmsg", "pgqueuer"):
            if side in row:
                cpu = row[side]["cpu_ms_per_1000_messages"]
                print(f"  {measure + ' ' + side + ' msgs/s':46s} "
                      f"{row[side]['messages_per_second']} (CPU ms per 1,000: "
                      + ", ".join(f"{k} {v}" for k, v in cpu.items()) + ")")
    for name, g in r["goals"].items():
        if partial and g["met"] is None:
            continue
        mark = {True: "met", False: "MISSED", None: "n/a"}[g["met"]]
        print(f"  {name:46s} {g['value']} (goal {g['goal']}): {mark}")
    for name, err in r["errors"].items():
        print(f"  ERROR in {name}: {err}")
    print(f"  results: {out_path}")
