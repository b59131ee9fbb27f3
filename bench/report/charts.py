"""``python -m bench.report.charts``: the figures of bench/out/results.json as PNGs for the docs.

  bench-throughput.png   messages/s per measure: raw PostgreSQL, txmsg, PgQueuer (the
                         median round as a bar, every round as a dot)
  bench-cpu.png          CPU ms per 1,000 messages: client, service, PostgreSQL, stacked
  bench-latency.png      publishing one message at a time: p50 and p99 of each call by
                         concurrency, txmsg against PgQueuer

matplotlib on its Agg backend (no display needed). Each chart's title carries the
machine's load average while it was measured: on a shared machine the figures move with it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from bench.report.figures import OUT

DOCS_IMAGES = Path(__file__).resolve().parents[2] / "docs" / "images"
SIDES = {"raw": ("raw PostgreSQL", "#999999"), "txmsg": ("txmsg", "#1f77b4"),
         "pgqueuer": ("PgQueuer", "#ff7f0e")}
MEASURES = {"publish_single": "publish one at a time", "publish_batched": "publish 100 at a time",
            "consume": "consume: 100 a batch + ack"}
CPU_PARTS = {"clients": ("client", "#6baed6"), "service": ("service", "#2171b5"),
             "postgres": ("PostgreSQL", "#fd8d3c")}


def draw(results: dict[str, Any], out_dir: Path) -> list[Path]:
    """The charts this ``results`` has figures for; the files written."""
    import matplotlib

    matplotlib.use("Agg")
    out_dir.mkdir(parents=True, exist_ok=True)
    comparison = results.get("pgqueuer_comparison") or {}
    written = []
    if any(comparison.values()):
        written.append(_throughput(results, comparison, out_dir / "bench-throughput.png"))
        written.append(_cpu(results, comparison, out_dir / "bench-cpu.png"))
    if results.get("latency_by_concurrency"):
        written.append(_latency(results, out_dir / "bench-latency.png"))
    return written


def _subtitle(results: dict[str, Any]) -> str:
    m = results.get("machine", {})
    version = str(m.get("postgresql", {}).get("version", "")).split(" on ")[0].split(" (")[0]
    start = m.get("load_average_at_start") or [None]
    end = results.get("load_average_at_end") or [None]
    return (f"{m.get('cores')} cores, {version}, {results.get('started_at', '')}; "
            f"1-min load average {start[0]} at the start, {end[0]} at the end")


def _throughput(results: dict[str, Any], comparison: dict[str, Any], path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(MEASURES), figsize=(12, 4.2))
    for ax, (measure, title) in zip(axes, MEASURES.items(), strict=True):
        row = comparison.get(measure, {})
        sides = [s for s in SIDES if s in row]
        for x, side in enumerate(sides):
            colour = SIDES[side][1]
            value = row[side]["messages_per_second"] or 0
            ax.bar(x, value, color=colour, width=0.6)
            ax.annotate(f"{value:,.0f}", (x, value), ha="center", va="bottom", fontsize=9)
            rounds = row[side].get("rounds") or []
            ax.scatter([x] * len(rounds), rounds, color="black", s=10, zorder=3)
        ax.set_xticks(range(len(sides)), [SIDES[s][0] for s in sides])
        ax.set_title(title, fontsize=10)
        ax.set_ylabel("messages/s")
        ax.margins(y=0.15)
    fig.suptitle("Throughput (bar: median round; dots: each round)\n" + _subtitle(results),
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _cpu(results: dict[str, Any], comparison: dict[str, Any], path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(MEASURES), figsize=(12, 4.2))
    for ax, (measure, title) in zip(axes, MEASURES.items(), strict=True):
        row = comparison.get(measure, {})
        sides = [s for s in SIDES if s in row]
        for x, side in enumerate(sides):
            cpu = row[side]["cpu_ms_per_1000_messages"]
            bottom = 0.0
            for part, (_, colour) in CPU_PARTS.items():
                value = cpu.get(part, 0.0)
                ax.bar(x, value, bottom=bottom, color=colour, width=0.6)
                bottom += value
            ax.annotate(f"{bottom:,.0f}", (x, bottom), ha="center", va="bottom", fontsize=9)
        ax.set_xticks(range(len(sides)), [SIDES[s][0] for s in sides])
        ax.set_title(title, fontsize=10)
        ax.set_ylabel("CPU ms per 1,000 messages")
        ax.margins(y=0.15)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for _, c in CPU_PARTS.values()]
    fig.legend(handles, [label for label, _ in CPU_PARTS.values()], loc="upper right",
               fontsize=9)
    fig.suptitle("CPU per 1,000 messages (PgQueuer has no service)\n" + _subtitle(results),
                 fontsize=10)
    fig.tight_layout(rect=(0, 0, 0.93, 1))
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _latency(results: dict[str, Any], path: Path) -> Path:
    import matplotlib.pyplot as plt

    sweep = results["latency_by_concurrency"]
    from matplotlib.ticker import FuncFormatter, NullFormatter

    fig, ax = plt.subplots(figsize=(10, 5))
    for side in ("txmsg", "pgqueuer"):
        points = sorted((int(c), r) for c, r in sweep.get(side, {}).items())
        if not points:
            continue
        label, colour = SIDES[side]
        clients = [c for c, _ in points]
        for q, style in (("p50", "-o"), ("p99", "--s")):
            ax.plot(clients, [r["latency_ms"].get(q) for _, r in points], style, color=colour,
                    label=f"{label} {q}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    levels = sorted({int(c) for side in sweep.values() if isinstance(side, dict)
                     for c in side if c.isdigit()})
    ax.set_xticks(levels, [str(c) for c in levels])
    ax.xaxis.set_minor_formatter(NullFormatter())
    plain = FuncFormatter(lambda v, _: f"{v:g}")
    ax.yaxis.set_major_formatter(plain)
    ax.yaxis.set_minor_formatter(plain)
    ax.set_xlabel("concurrent clients")
    ax.set_ylabel("ms per message published\n(txmsg: send + commit; PgQueuer: enqueue)")
    ax.legend(fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.set_title("Publish one at a time: latency by concurrency\n" + _subtitle(results),
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.report.charts", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--results", type=Path, default=OUT)
    p.add_argument("--out-dir", type=Path, default=DOCS_IMAGES)
    args = p.parse_args(argv)
    written = draw(json.loads(args.results.read_text()), args.out_dir)
    for path in written:
        print(path)
    if not written:
        print(f"no figures to draw in {args.results}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
