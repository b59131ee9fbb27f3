"""A fault campaign: `txmsg serve` and `txmsg checker` processes on a private PostgreSQL
cluster under a recorded load, the faults done to them, and the final verdict.

Waits are bounded and generous (the machine may be slow); nothing asserts how fast
anything went, only that the service came back by itself within the bound.
"""

from __future__ import annotations

import re
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import requests

from tests.acceptance.conftest import Checker, Served, start_serve
from tests.callbacks import CallbackServer, Reply, wait_until
from tests.faults.cluster import PgCluster
from tests.faults.history import History, check_history
from tests.faults.load import Load, decided, plan_of, read_all, unresolved_abandoned

# a bound on recovery, not a speed goal: the service must come back by itself
RECOVERY_SECONDS = 90
OUTAGE_SECONDS = 1.0
# commits that must succeed on each server after each fault before the next
PROGRESS = 20

ENV = {"TXMSG_TRANSACTION_TIMEOUT_SECONDS": "1", "TXMSG_CHECK_INTERVAL_SECONDS": "1",
       "TXMSG_CHECKER_POLL_SECONDS": "0.2", "TXMSG_CHECKER_LEASE_SECONDS": "1"}


def check_callback() -> CallbackServer:
    """The producer's check endpoint: answers what ``decided`` says, a little slowly, so
    that a checker killed "mid-burst" has checks in flight."""
    return CallbackServer(lambda check: Reply(
        body=f'{{"resolution": "{decided(check["transaction_id"])}"}}'.encode(), delay=0.1))


class Campaign:
    def __init__(self, cluster: PgCluster, database_url: str, workdir: Path) -> None:
        self.cluster, self.workdir = cluster, workdir
        # TMPDIR: what a killed serve leaves behind (its metrics directory) stays in workdir
        self.env = {"TXMSG_DATABASE_URL": database_url, "TMPDIR": str(workdir), **ENV}
        self.history = History()
        self.servers: dict[str, Served] = {}
        self.checkers: list[Checker] = []
        self.violations: list[str] = []

    # -- processes -------------------------------------------------------------------
    def serve(self, name: str, *extra: str) -> Served:
        old = self.servers.get(name)
        served = start_serve(self.env, self.workdir, "--no-migrate", *extra,
                             port=old.port if old else None, timeout=RECOVERY_SECONDS)
        self.servers[name] = served
        return served

    def serve_many(self, names: list[str], *extra: str) -> dict[str, Served]:
        """Start several serve processes at once (each takes seconds to be ready)."""
        with ThreadPoolExecutor(len(names)) as pool:
            return dict(zip(names, pool.map(lambda name: self.serve(name, *extra), names),
                            strict=True))

    def checker(self) -> Checker:
        checker = Checker(self.env, self.workdir / f"checker-{len(self.checkers)}.log")
        self.checkers.append(checker)
        checker.wait_started(timeout=RECOVERY_SECONDS)
        return checker

    def close(self) -> None:
        """Kill every process (how they stop is not under test here)."""
        for served in self.servers.values():
            served.kill()
        for checker in self.checkers:
            checker.kill()

    # -- faults ----------------------------------------------------------------------
    def wait_for_progress(self, since: float, what: str) -> None:
        """Each server answers commits again (bounded: it must recover by itself)."""
        for name in self.servers:
            if not self.history.wait_for_successes(PROGRESS, since, RECOVERY_SECONDS, name):
                raise AssertionError(self.evidence(
                    [f"{name}: no {PROGRESS} commits within {RECOVERY_SECONDS} s {what}"]))

    def crash_database(self) -> None:
        """Crash PostgreSQL under load and start it again; every server must say it is not
        ready meanwhile, stay up, and serve again without a restart."""
        self.history.note("postgres crash")
        self.cluster.crash()
        with requests.Session() as s:
            for name, served in self.servers.items():
                try:
                    r = s.get(f"{served.url}/readyz", timeout=60)
                except requests.RequestException as exc:
                    self.violations.append(f"{name}: /readyz failed ({exc}) while PostgreSQL "
                                           "was down")
                    continue
                if r.status_code != 503:
                    self.violations.append(f"{name}: /readyz answered {r.status_code} "
                                           f"{r.text[:300]} while PostgreSQL was down")
        time.sleep(OUTAGE_SECONDS)
        self.cluster.start()
        up = self.history.note("postgres up")
        self.wait_for_progress(up, "after PostgreSQL came back")
        processes = {**{name: s.proc for name, s in self.servers.items()},
                     **{c.log.stem: c.proc for c in self.checkers[-1:]}}
        for name, proc in processes.items():
            if proc.poll() is not None:
                self.violations.append(f"{name} exited ({proc.returncode}) "
                                       "through the database outage")

    def kill_serve(self, name: str, *extra: str) -> None:
        """kill -9 a serve process under load and start it again on its port."""
        self.history.went_down(name)
        self.servers[name].kill()
        self.serve(name, *extra)
        self.history.came_up(name)
        self.wait_for_progress(self.history.note(f"{name} restarted"), f"after {name} restarted")

    def kill_checker_mid_check(self, callback: CallbackServer) -> None:
        """kill -9 the checker while a check callback is in flight, then start another."""
        wait_until(callback.in_flight, timeout=RECOVERY_SECONDS, what="a check in flight")
        self.history.note("checker killed")
        self.checkers[-1].kill()
        self.checker()

    # -- verdict ---------------------------------------------------------------------
    def finish(self, load: Load, url: str) -> dict[str, Any]:
        """Stop the load, let the check service resolve every abandoned transaction, read
        every topic and check the whole history; fail with the evidence."""
        load.stop()
        self.history.note("load stopped")
        try:
            wait_until(lambda: not unresolved_abandoned(url), timeout=RECOVERY_SECONDS,
                       what="the check service to resolve every abandoned transaction")
        except AssertionError as exc:
            self.violations.append(str(exc))
        final = read_all(url)
        self.violations += check_history(self.history, final, decided, plan_of)
        if self.violations:
            raise AssertionError(self.evidence(self.violations))
        return {"calls": self.history.summary(),
                "visible": {topic: len(messages) for topic, messages in final.items()}}

    def evidence(self, violations: list[str]) -> str:
        dumped = self.workdir / "history.jsonl"
        self.history.dump(dumped)
        parts = [f"{len(violations)} violations (history in {dumped}):", *violations[:30],
                 f"outcomes: {self.history.summary()}",
                 "events: " + ", ".join(f"{t:.3f} {e}" for t, e in self.history.events)]
        for served in self.servers.values():
            parts.append(f"--- {served.log.name}, errors:\n{_errors(served.log)}")
        for log in {c.log for c in self.checkers}:
            parts.append(f"--- {log.name}, errors:\n{_errors(log)}")
        parts.append(f"--- postgresql.log:\n{self.cluster.log_tail(20)}")
        return "\n".join(parts)


def _errors(log: Path, limit: int = 60) -> str:
    """The log's error lines and tracebacks, the last ``limit`` lines of them."""
    lines = log.read_text(errors="replace").splitlines()
    keep = [line for line in lines
            if re.search(r"ERROR|CRITICAL|Traceback|Error:|Exception", line)]
    return "\n".join(keep[-limit:])
