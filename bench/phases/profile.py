"""Profile the serve worker under the (b) load with py-spy: ``python -m bench.phases.profile``.

Needs ``pip install py-spy`` (not a dependency of txmsg). Writes collapsed stacks to
bench/out/profile-<pid>.txt and prints the hottest functions (self and inclusive time).
"""

from __future__ import annotations

import argparse
import collections
import shutil
import subprocess
import sys
import threading
from pathlib import Path

from bench.harness.pgdb import bench_database
from bench.harness.procs import tree
from bench.harness.service import serve
from bench.phases import txmsg_load

OUT = Path(__file__).resolve().parents[1] / "out"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--messages", type=int, default=1)
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--idle", action="store_true", help="include idle (waiting) samples")
    parser.add_argument("--all-threads", action="store_true",
                        help="sample every thread, not only the one holding the GIL")
    parser.add_argument("setting", nargs="*", help="TXMSG setting overrides, e.g. web_workers=2")
    args = parser.parse_args()
    pyspy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    OUT.mkdir(exist_ok=True)
    settings = dict(s.split("=", 1) for s in args.setting)
    with bench_database() as db, serve(db, **settings) as server:
        workers = [p for p in tree(server.pid) if p != server.pid] or [server.pid]
        outputs = []
        procs = []
        for pid in workers:
            out = OUT / f"profile-{pid}.txt"
            outputs.append(out)
            cmd = [pyspy, "record", "--pid", str(pid), "--duration", str(int(args.seconds)),
                   "--format", "raw", "--output", str(out), "--threads", "--nonblocking"]
            if args.idle:
                cmd.append("--idle")
            if not args.all_threads:
                cmd.append("--gil")
            procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL))
        result: dict = {}
        load = threading.Thread(target=lambda: result.update(txmsg_load.pairs(
            server, args.clients, args.seconds, 1, messages=args.messages)))
        load.start()
        for p in procs:
            p.wait()
        load.join()
        print(result)
    for out in outputs:
        if out.exists():
            report(out, args.top)


def report(path: Path, top: int) -> None:
    own: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        count = int(n)
        frames = stack.split(";")
        total += count
        own[frames[-1]] += count
        for f in set(frames):
            incl[f] += count
    print(f"== {path.name}: {total} samples")
    print("-- self")
    for f, n in own.most_common(top):
        print(f"{100 * n / total:5.1f}%  {f}")
    print("-- inclusive")
    for f, n in incl.most_common(top):
        print(f"{100 * n / total:5.1f}%  {f}")


if __name__ == "__main__":
    main()
