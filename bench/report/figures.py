"""The figures of a run: what its results compare (txmsg against the raw floor and
PgQueuer), its ratios, and the goals they are held to. Where the results go: ``OUT``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parents[1] / "out" / "results.json"

GOALS = {"b_over_a": (">=", 0.25), "d_over_c": (">=", 0.3), "f_scan_ratio": ("<=", 1.5),
         "commit_p99_ms": ("<=", 25.0), "serve_rss_max_deviation": ("<=", 0.2),
         "access_control_overhead_b": ("<=", 0.05), "ingest_over_plain_spark": ("<=", 1.1),
         "b_retention_on_over_off": (">=", 0.9), "d_retention_on_over_off": (">=", 0.9),
         "g_over_d": (">=", 1.0), "delivery_p99_ms": ("<=", 50.0),
         # issue #24: txmsg against PgQueuer on the same machine and server
         "b_over_pgqueuer_single": (">=", 0.7), "d_over_pgqueuer_batched": (">=", 0.6),
         "g_over_pgqueuer_consume": (">=", 1.3),
         # issue #24: one client (l), and the service's CPU per pair in (b)
         "lone_pair_p50_ms": ("<=", 1.5), "lone_read_p50_ms": ("<=", 1.0),
         "b_service_cpu_ms_per_pair": ("<=", 0.2),
         # (o) ordered consumption: key_shared (1,000 keys) and failover (one consumer,
         # cumulative acks) against shared on the same messages
         "o_key_shared_over_shared": (">=", 0.7), "o_failover_over_shared": (">=", 0.7)}

# The comparison with PgQueuer: per measure, the result each side's figure comes from
COMPARED = {
    "publish_single": {"raw": "a_raw_single_insert", "txmsg": "b_txmsg_send_commit",
                       "pgqueuer": "p_pgqueuer_publish_single"},
    "publish_batched": {"raw": "c_raw_batch_insert", "txmsg": "d_txmsg_batch_send_commit",
                        "pgqueuer": "p_pgqueuer_publish_batched"},
    "consume": {"txmsg": "g_receive_ack", "pgqueuer": "p_pgqueuer_consume"},
}


def comparison(r: dict[str, Any]) -> dict[str, Any]:
    """Per measure, each side's messages/s, the median rounds, and its CPU per 1,000
    messages (client, service, PostgreSQL, and the whole machine's busy time)."""
    batch = r["plan"]["batch_rows"]
    out: dict[str, Any] = {}
    for measure, sides in COMPARED.items():
        row: dict[str, Any] = {}
        for side, key in sides.items():
            result = r.get(key)
            if not isinstance(result, dict):
                continue
            per_unit_msgs = batch if key == "d_txmsg_batch_send_commit" else 1
            cpu = result.get("cpu_ms_per_unit") or {}
            row[side] = {
                "messages_per_second": result.get("messages_per_second",
                                                  result.get("per_second")),
                "rounds": result.get("rounds", []),
                "cpu_ms_per_1000_messages": {
                    part: round(cpu[part] * 1000 / per_unit_msgs, 1)
                    for part in ("clients", "service", "postgres", "machine") if part in cpu},
                "load_average": result.get("load_average")}
        if "txmsg" in row and "pgqueuer" in row:
            row["txmsg_over_pgqueuer"] = ratio(row["txmsg"]["messages_per_second"],
                                               row["pgqueuer"]["messages_per_second"])
        out[measure] = row
    return out


def get(results: dict[str, Any], *path: str) -> Any:
    node: Any = results
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node


def ratio(x: Any, y: Any) -> float | None:
    return round(x / y, 3) if isinstance(x, int | float) and isinstance(y, int | float) and y \
        else None


def ratios(r: dict[str, Any]) -> dict[str, Any]:
    return {
        "b_over_a": ratio(get(r, "b_txmsg_send_commit", "per_second"),
                          get(r, "a_raw_single_insert", "per_second")),
        "d_over_c": ratio(get(r, "d_txmsg_batch_send_commit", "messages_per_second"),
                          get(r, "c_raw_batch_insert", "per_second")),
        "f_scan_ratio": get(r, "f_due_scan", "ratio"),
        "commit_p50_ms": get(r, "e_commit_latency_half_peak", "commit_ms", "p50"),
        "commit_p99_ms": get(r, "e_commit_latency_half_peak", "commit_ms", "p99"),
        "serve_rss_max_deviation": get(r, "e_commit_latency_half_peak", "service_rss",
                                       "max_deviation"),
        "checker_peak_rss_large_over_reference": get(r, "checker_memory", "peak_rss_ratio"),
        # 1 - on/off: the share of (b) and (d) that checking tokens costs
        "access_control_overhead_b": overhead(
            get(r, "b_access_control_on", "per_second"),
            get(r, "b_txmsg_send_commit", "per_second")),
        "access_control_overhead_d": overhead(
            get(r, "d_access_control_on", "messages_per_second"),
            get(r, "d_txmsg_batch_send_commit", "messages_per_second")),
        # on/off - 1 of the service's CPU per pair, which a loaded machine disturbs less
        "access_control_service_cpu_overhead_b": overhead(
            get(r, "b_txmsg_send_commit", "cpu_ms_per_unit", "service"),
            get(r, "b_access_control_on", "cpu_ms_per_unit", "service"), inverse=True),
        "ingest_over_plain_spark": get(r, "ingest", "ingest_over_plain_spark"),
        "ingest_over_copy": get(r, "ingest", "ingest_over_copy"),
        "ingest_incremental_over_spark_start": get(r, "ingest", "incremental",
                                                   "over_spark_floor"),
        "b_retention_on_over_off": get(r, "retention_throughput", "b_on_over_off"),
        "d_retention_on_over_off": get(r, "retention_throughput", "d_on_over_off"),
        "retention_drain_seconds": get(r, "retention_drain", "emptied_seconds"),
        "retention_drain_commit_max_ms": get(r, "retention_drain", "commit_ms_max"),
        "b_over_pgqueuer_single": get(r, "pgqueuer_comparison", "publish_single",
                                      "txmsg_over_pgqueuer"),
        "d_over_pgqueuer_batched": get(r, "pgqueuer_comparison", "publish_batched",
                                       "txmsg_over_pgqueuer"),
        "g_over_pgqueuer_consume": get(r, "pgqueuer_comparison", "consume",
                                       "txmsg_over_pgqueuer"),
        "lone_pair_p50_ms": rounded(get(r, "l_one_client", "this tree", "send + commit",
                                        "p50_ms")),
        "lone_read_p50_ms": rounded(get(r, "l_one_client", "this tree", "read one", "p50_ms")),
        "b_service_cpu_ms_per_pair": get(r, "b_txmsg_send_commit", "cpu_ms_per_unit",
                                         "service"),
        "g_over_d": ratio(get(r, "g_receive_ack", "messages_per_second"),
                          get(r, "d_txmsg_batch_send_commit", "messages_per_second")),
        "delivery_p50_ms": get(r, "h_delivery_latency_half_peak", "delivery_ms", "p50"),
        "delivery_p99_ms": get(r, "h_delivery_latency_half_peak", "delivery_ms", "p99"),
        "o_key_shared_over_shared": get(r, "o_ordered", "key_shared_over_shared"),
        "o_key_shared_10_keys_over_shared": get(r, "o_ordered",
                                                "key_shared_10_keys_over_shared"),
        "o_failover_over_shared": get(r, "o_ordered", "failover_over_shared"),
        "o_receive_large_over_small_backlog": get(r, "o_receive_vs_backlog",
                                                  "large_over_small"),
        "idle_polls_service_rss_delta_bytes": get(r, "idle_long_polls", "rss_delta_bytes"),
        "idle_polls_service_cpu_seconds_delta": get(r, "idle_long_polls",
                                                    "service_cpu_seconds_delta"),
    }


def overhead(x: Any, y: Any, inverse: bool = False) -> float | None:
    """1 - x/y: what a throughput x loses against y; ``inverse``: y/x - 1, what a cost y
    adds to x."""
    share = ratio(y, x) if inverse else ratio(x, y)
    if share is None:
        return None
    return round(share - 1 if inverse else 1 - share, 3)


def goals(figures: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for name, (op, bound) in GOALS.items():
        value = figures.get(name)
        met = None if value is None else (value >= bound if op == ">=" else value <= bound)
        out[name] = {"goal": f"{op} {bound}", "value": value, "met": met}
    return out


def rounded(value: Any) -> float | None:
    return round(value, 3) if isinstance(value, int | float) else None


def mib(value: Any) -> float | None:
    return round(value / 2**20, 1) if isinstance(value, int | float) else None
