"""Backup and restore with pgBackRest, as docs/runbook.md gives it: the commands of its
"Backup and restore" section are read from the page and run here, on a private
PostgreSQL cluster (tests/faults/cluster.py) whose WAL is archived to a pgBackRest
repository in a temporary directory, with `txmsg serve` under load.

A producer commits steadily while the full backup is taken; some transactions are left
``PREPARED`` (their check callback answers "unknown"). A target time T is read from the
database's clock in the middle of the traffic; the load goes on past it; then the store
is restored to T and served again. The contract: the restored store serves at once,
every commit acknowledged before T is there with its offsets, every topic's offsets are
dense, and the transactions unresolved at T are checked again (and resolve).

Clocks: T is the server's ``clock_timestamp()`` (recovery stops at the first commit
record stamped after it); the client's times are taken on the same machine, and a
margin of a second on either side of T leaves the commits in between undecided.
"""

from __future__ import annotations

import re
import shlex
import shutil
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pytest
import requests
from sqlalchemy import create_engine, text

from tests.acceptance.conftest import Served, run_txmsg, start_serve
from tests.callbacks import CallbackServer, answer, wait_until
from tests.databases import IN_CI
from tests.faults.cluster import PgCluster, chown_to_postgres, unavailable_reason

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

RUNBOOK = Path(__file__).resolve().parents[2] / "docs" / "runbook.md"
SECTION = "## Backup and restore (pgBackRest)"
STANZA = "txmsg"
GROUP = "shop"
# a second on either side of T: commits acknowledged before T - MARGIN are restored,
# those sent after T + MARGIN are not
MARGIN = 1.0
HELD = 3  # transactions left PREPARED on each side of T
CHECKS = {"TXMSG_TRANSACTION_TIMEOUT_SECONDS": "1", "TXMSG_CHECK_INTERVAL_SECONDS": "1",
          "TXMSG_CHECK_MAX_TIMES": "1000", "TXMSG_CHECKER_POLL_SECONDS": "0.1"}
# bounds, not goals: a restore of this small cluster takes seconds
RESOLVE_SECONDS = 30
READY_SECONDS = 30


def runbook_section() -> str:
    page = RUNBOOK.read_text()
    start = page.index(SECTION)
    end = page.find("\n## ", start + len(SECTION))
    return page[start:end if end != -1 else len(page)]


def fenced(language: str) -> list[str]:
    """The section's fenced blocks in ``language``, in order."""
    return re.findall(rf"^```{language}\n(.*?)^```$", runbook_section(),
                      re.MULTILINE | re.DOTALL)


def commands(block: str) -> list[list[str]]:
    """A shell block's commands, as words: comments dropped, continued lines joined."""
    lines = re.sub(r"\\\n", " ", block).splitlines()
    return [words for words in (shlex.split(line, comments=True) for line in lines) if words]


def stanza_config(cluster: PgCluster, repo: Path) -> str:
    """The runbook's pgbackrest.conf with this cluster's paths and port; the lock and log
    files in the cluster's directory, not the machine's."""
    own = {"repo1-path": str(repo), "pg1-path": str(cluster.data), "pg1-port": str(cluster.port)}
    lines = []
    for line in fenced("ini")[0].splitlines():
        key = line.split("=", 1)[0]
        lines.append(f"{key}={own.pop(key)}" if key in own else line)
        if line == "[global]":
            lines += [f"lock-path={cluster.root / 'lock'}", f"log-path={cluster.root}"]
        elif line == f"[{STANZA}]":
            lines.append(f"pg1-socket-path={cluster.root}")
    assert not own, f"the runbook's stanza does not set {sorted(own)}"
    return "\n".join(lines) + "\n"


@pytest.fixture
def archived_cluster() -> Iterator[PgCluster]:
    """A private cluster archiving its WAL (the runbook's settings) to a pgBackRest
    repository in its own directory; stopped and removed whatever the test did."""
    reason = unavailable_reason()
    if reason is None and shutil.which("pgbackrest") is None:
        reason = "no pgbackrest (Debian: scripts/ensure-system-deps.sh installs it)"
    if reason is not None:
        if IN_CI:
            pytest.fail(f"the backup test cannot run in CI: {reason}")
        pytest.skip(f"the backup test needs PostgreSQL and pgBackRest: {reason}")
    cluster = PgCluster.create(prefix="txmsg-backup-pg-", settings=fenced("ini")[1])
    try:
        repo = cluster.root / "repo"
        repo.mkdir()
        chown_to_postgres(repo)
        config = cluster.root / "pgbackrest.conf"
        config.write_text(stanza_config(cluster, repo))
        # the server's archive_command and restore_command find it there too
        cluster.env["PGBACKREST_CONFIG"] = str(config)
        cluster.start()
        yield cluster
    finally:
        cluster.destroy()


@dataclass
class Commit:
    transaction_id: str
    sent_at: float  # before the send
    acked_at: float  # once the commit answered
    offsets: dict[str, tuple[str, int]]  # message id -> (topic, offset)


def transactions_url(served: Served) -> str:
    return f"{served.url}/v1/producer-groups/{GROUP}/transactions"


def send(session: requests.Session, served: Served, transaction_id: str, n: int) -> None:
    messages = [{"topic": "orders", "body": f"order {n}"}]
    if n % 3 == 0:
        messages.append({"topic": "payments", "body": f"payment {n}"})
    r = session.post(transactions_url(served), timeout=30,
                     json={"transaction_id": transaction_id, "messages": messages})
    assert r.status_code == 201, r.text


def commit(session: requests.Session, served: Served, transaction_id: str,
           sent_at: float) -> Commit:
    r = session.post(f"{transactions_url(served)}/{transaction_id}/commit", timeout=30)
    assert r.status_code == 200 and r.json()["state"] == "COMMITTED", r.text
    return Commit(transaction_id, sent_at, time.time(),
                  {m["message_id"]: (m["topic"], m["offset"]) for m in r.json()["messages"]})


@dataclass
class Producer:
    """Sends and commits one transaction after another until stopped, recording each
    acknowledged commit."""

    served: Served
    commits: list[Commit] = field(default_factory=list)
    error: BaseException | None = None
    stopping: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        session = requests.Session()
        n = 0
        try:
            while not self.stopping.is_set():
                sent_at = time.time()
                send(session, self.served, f"p-{n}", n)
                self.commits.append(commit(session, self.served, f"p-{n}", sent_at))
                n += 1
                self.stopping.wait(0.01)
        except BaseException as exc:  # noqa: BLE001 - reported by stop()
            self.error = exc

    def last(self) -> Commit | None:
        """The latest acknowledged commit (the producer's failure, if it failed)."""
        if self.error is not None:
            raise AssertionError(f"the producer failed: {self.error!r}") from self.error
        return self.commits[-1] if self.commits else None

    def stop(self) -> list[Commit]:
        self.stopping.set()
        self.thread.join(timeout=60)
        assert not self.thread.is_alive(), "the producer did not stop"
        self.last()
        return self.commits


class Runbook:
    """Runs the runbook's commands on the private cluster: ``pgbackrest`` as the
    ``postgres`` user, ``systemctl`` as ``pg_ctl``, ``txmsg`` as the console script."""

    def __init__(self, cluster: PgCluster, url: str, env: dict[str, str],
                 workdir: Path) -> None:
        self.cluster, self.url, self.env, self.workdir = cluster, url, env, workdir
        self.served: Served | None = None

    def run(self, block: str, target: str | None = None) -> None:
        for command in commands(block):
            self.one(command, target)

    def one(self, words: list[str], target: str | None) -> None:
        if words[:3] == ["sudo", "-u", "postgres"] and words[3] == "pgbackrest":
            if target is not None:
                words = [f"--target={target}" if w.startswith("--target=") else w
                         for w in words]
            self.cluster.run(*words[3:])
        elif words[:3] == ["sudo", "systemctl", "stop"]:
            self.cluster.stop()
        elif words[:3] == ["sudo", "systemctl", "start"]:
            self.cluster.start()
        elif words[0] == "until" and any("pg_is_in_recovery()" in w for w in words):
            wait_until(self.promoted, timeout=READY_SECONDS, what="the promotion")
        elif words[:2] == ["txmsg", "migrate"]:
            done = run_txmsg(words[1:], self.env, self.workdir)
            assert done.returncode == 0, done.stderr
        elif words[:2] == ["txmsg", "serve"]:
            self.served = start_serve(self.env, self.workdir, *words[2:],
                                      timeout=READY_SECONDS)
        else:
            raise AssertionError(f"the test does not know the runbook's command {words}")

    def promoted(self) -> bool:
        engine = create_engine(self.url)
        try:
            with engine.connect() as conn:
                return not conn.execute(text("SELECT pg_is_in_recovery()")).scalar_one()
        finally:
            engine.dispose()


def test_the_runbook_gives_the_commands_of_a_backup_and_a_point_in_time_restore() -> None:
    backup, restore = fenced("sh")
    assert [c[-1] for c in commands(backup)] == ["stanza-create", "check", "backup", "info"]
    restore_command = next(c for c in commands(restore) if c[-1] == "restore")
    assert "--type=time" in restore_command and "--target-action=promote" in restore_command


def test_a_restore_to_a_point_in_time_serves_what_was_acknowledged_before_it(
        archived_cluster: PgCluster, tmp_path: Path) -> None:
    cluster = archived_cluster
    url = cluster.create_database("txmsg")
    holds: dict[str, str | None] = {"resolution": None}  # None: "unknown"
    callback = CallbackServer(lambda _check: answer(holds["resolution"]))
    env = {"TXMSG_DATABASE_URL": url, **CHECKS}
    runbook = Runbook(cluster, url, env, tmp_path)
    backup, restore = fenced("sh")
    producer: Producer | None = None
    served: Served | None = None
    try:
        runbook.one(["txmsg", "migrate"], None)
        runbook.one(["txmsg", "serve", "--no-migrate"], None)
        served = runbook.served
        assert served is not None
        s = requests.Session()
        r = s.put(f"{served.url}/v1/producer-groups/{GROUP}",
                  json={"check_urls": [callback.url]})
        assert r.status_code == 200, r.text

        producer = load = Producer(served)
        runbook.run(backup)  # the full backup, online, under load
        for i in range(HELD):
            send(s, served, f"held-before-{i}", i)
        late_sent_at = time.time()
        send(s, served, "late", 0)

        def acked_after(moment: float) -> bool:
            last = load.last()
            return last is not None and last.sent_at > moment

        wait_until(lambda: acked_after(late_sent_at + MARGIN + 0.5), timeout=30,
                   what="commits after the held transactions")

        target = target_time(url)
        wait_until(lambda: time.time() > target.timestamp() + MARGIN + 0.2, timeout=10,
                   what="T + the margin")
        for i in range(HELD):
            send(s, served, f"held-after-{i}", i)
        late = commit(s, served, "late", late_sent_at)
        wait_until(lambda: acked_after(late.acked_at + 0.5), timeout=30,
                   what="commits after T")
        commits = load.stop()
        producer = None
        served.stop()
        served = None

        t = target.timestamp()
        before = [c for c in commits if c.acked_at < t - MARGIN]
        after = [c for c in commits if c.sent_at > t + MARGIN]
        assert len(before) >= 10 and after, (len(before), len(after))
        assert late.sent_at < t - MARGIN and late.acked_at > t + MARGIN

        holds["resolution"] = "COMMIT"
        checked_before_restore = len(callback.checks)
        runbook.run(restore, target=target.strftime("%Y-%m-%d %H:%M:%S.%f+00"))
        served = runbook.served
        assert served is not None
        assert requests.get(f"{served.url}/readyz", timeout=5).status_code == 200

        txs = transactions_url(served)
        for c in before:
            r = s.get(f"{txs}/{c.transaction_id}")
            assert r.status_code == 200 and r.json()["state"] == "COMMITTED", r.text
            assert {m["message_id"]: (m["topic"], m["offset"])
                    for m in r.json()["messages"]} == c.offsets
        for c in after:  # sent after T: gone
            r = s.get(f"{txs}/{c.transaction_id}")
            assert r.status_code == 404, r.text
        for i in range(HELD):
            assert s.get(f"{txs}/held-after-{i}").status_code == 404

        # unresolved at T: PREPARED again (held, and "late", committed after T), checked
        # again by the restored store's check service, and committed by the callback
        unresolved = [f"held-before-{i}" for i in range(HELD)] + ["late"]
        for transaction_id in unresolved:
            wait_until(lambda tid=transaction_id: s.get(f"{txs}/{tid}").json()["state"]
                       == "COMMITTED", timeout=RESOLVE_SECONDS, what=f"{transaction_id} checked")
        checked_after_restore = {c["transaction_id"]
                                 for c in callback.checks[checked_before_restore:]}
        assert set(unresolved) <= checked_after_restore

        # and it takes new transactions, after the restored ones
        send(s, served, "after-restore", 0)
        fresh = commit(s, served, "after-restore", time.time())
        assert_dense(url)
        for topic, offset in fresh.offsets.values():
            assert offset > max(o for c in before for t, o in c.offsets.values() if t == topic)
    finally:
        if producer is not None:
            producer.stopping.set()
            producer.thread.join(timeout=60)
        for running in (served, runbook.served):
            if running is not None:
                running.stop()
        callback.close()


def target_time(url: str) -> datetime:
    """Now by the database's clock (the one its commit records are stamped with)."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            now: datetime = conn.execute(text("SELECT clock_timestamp()")).scalar_one()
    finally:
        engine.dispose()
    return now.astimezone(UTC)


def assert_dense(url: str) -> None:
    """Every topic holds each offset from its first retained one to below its next (read
    in one snapshot: the check service may be committing transactions meanwhile)."""
    engine = create_engine(url, isolation_level="REPEATABLE READ")
    try:
        with engine.connect() as conn:
            tops = conn.execute(text(
                "SELECT o.topic, o.next_offset, coalesce(r.first_offset, 0)"
                " FROM topic_offset o LEFT JOIN topic_retention r USING (topic)")).all()
            assert {topic for topic, _, _ in tops} >= {"orders", "payments"}
            for topic, next_offset, first in tops:
                held = conn.execute(text(
                    "SELECT queue_offset FROM message_log WHERE topic = :t"
                    " ORDER BY queue_offset"), {"t": topic}).scalars().all()
                assert held == list(range(first, next_offset)), topic
    finally:
        engine.dispose()
