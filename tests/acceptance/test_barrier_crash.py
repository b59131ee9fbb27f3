"""The barrier's promise, with real processes: whatever dies when, the message is committed
if and only if the producer's local work was, exactly once, and no check is answered
UNKNOWN. On each producer database (SQLite, PostgreSQL, MySQL/MariaDB if reachable: its
tests skip otherwise), against one real ``txmsg serve`` whose checks come after 1 s.

A producer (``tests.acceptance.barrier_producer``, a process of its own) stops at a step
and is killed there with SIGKILL; the checks are answered by ``barrier.checker`` in this
process, which records every answer.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, select, text
from txmsg_client import Producer, Resolution
from txmsg_client.barrier import Barrier, RolledBackByCheck
from txmsg_client.callback import CheckerServer

from tests.acceptance.barrier_orders import metadata, orders
from tests.acceptance.conftest import Served, start_serve
from tests.callbacks import wait_until
from tests.databases import scratch_pg_database

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
MYSQL_ADMIN_URL = os.environ.get("TXMSG_TEST_MYSQL_URL", "mysql+pymysql://root@127.0.0.1:3306/test")
STEPS = {"after_send": "ROLLED_BACK", "in_block": "ROLLED_BACK",
         "after_local_commit": "COMMITTED", "after_commit": "COMMITTED"}
SERVE_ENV = {"TXMSG_TRANSACTION_TIMEOUT_SECONDS": "1", "TXMSG_CHECK_INTERVAL_SECONDS": "0.5"}


class Service:
    """The module's ``txmsg serve``, which a test may kill and start again."""

    def __init__(self, where: Path) -> None:
        self.where = where
        self.env = {**SERVE_ENV, "TXMSG_DATABASE_URL": f"sqlite:///{where / 'txmsg.db'}"}
        self.served: Served = start_serve(self.env, where)
        self.url = self.served.url

    def restart(self) -> None:
        self.served = start_serve(self.env, self.where, port=self.served.port)


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    made = Service(tmp_path_factory.mktemp("barrier-serve"))
    yield made
    made.served.stop()


@contextmanager
def scratch_mysql_database() -> Iterator[str]:
    admin = create_engine(MYSQL_ADMIN_URL, isolation_level="AUTOCOMMIT")
    name = f"txmsg_barrier_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    try:
        with admin.connect() as conn:
            conn.execute(text(f"CREATE DATABASE `{name}`"))
    except Exception as exc:  # noqa: BLE001 - any failure to reach MariaDB
        admin.dispose()
        pytest.skip(f"MySQL/MariaDB unreachable: {exc}")
    try:
        yield MYSQL_ADMIN_URL.rsplit("/", 1)[0] + "/" + name
    finally:
        with admin.connect() as conn:
            conn.execute(text(f"DROP DATABASE IF EXISTS `{name}`"))
        admin.dispose()


@pytest.fixture(params=["sqlite", "postgresql", "mysql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The producer's own database."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'producer.db'}"
    elif request.param == "postgresql":
        with scratch_pg_database("txmsg_barrier") as url:
            yield url
    else:
        with scratch_mysql_database() as url:
            yield url


class Recording:
    """``barrier.checker``, recording each answer; ``asked`` is set at each check."""

    def __init__(self, barrier: Barrier) -> None:
        self.barrier = barrier
        self.answers: list[tuple[str, Resolution]] = []
        self.asked = threading.Event()

    def check(self, transaction: dict[str, Any]) -> Resolution:
        self.asked.set()
        answer = self.barrier.checker.check(transaction)
        self.answers.append((transaction["transaction_id"], answer))
        return answer


@pytest.fixture
def producer_side(service: Service, database_url: str) -> Iterator[tuple[Producer, Recording]]:
    """A new group whose checks ``Recording`` answers from the producer's database."""
    engine = create_engine(database_url, pool_size=10)
    barrier = Barrier(engine, wait_seconds=8)  # a check waits that long for an open one
    barrier.create_table()
    metadata.create_all(engine)
    recording = Recording(barrier)
    with CheckerServer(recording) as callback, \
            Producer(service.url, f"g-{uuid.uuid4().hex[:8]}") as producer:
        callback.signing_secret = producer.register(
            [callback.url], check_timeout_ms=10_000)["signing_secret"]
        yield producer, recording
    engine.dispose()


class Child:
    """The producer process, stopping at ``step``."""

    def __init__(self, service: Service, producer: Producer, database_url: str, topic: str,
                 step: str, control: Path) -> None:
        self.txid = f"{step}-{uuid.uuid4().hex[:8]}"
        self.step, self.control = step, control
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.acceptance.barrier_producer", service.url,
             producer.group, database_url, topic, self.txid, step, str(control)],
            cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True)

    def wait_at_step(self) -> None:
        wait_until(lambda: (self.control / self.step).exists() or self.proc.poll() is not None,
                   timeout=60, what=f"the producer to reach {self.step}")
        assert self.proc.poll() is None, self.proc.communicate()

    def kill(self) -> None:
        self.proc.kill()
        self.proc.communicate(timeout=30)

    def go_on(self) -> str:
        out, err = self.proc.communicate("\n", timeout=60)
        assert self.proc.returncode == 0, err
        return out.strip()


def settled(producer: Producer, txids: list[str]) -> dict[str, str]:
    """The states of ``txids`` once none of them is PREPARED."""
    def states() -> dict[str, str] | None:
        found = {t: producer.get(t)["state"] for t in txids}
        return None if "PREPARED" in found.values() else found
    return wait_until(states, timeout=60, what="the checks to resolve the transactions")


def assert_one_to_one(producer: Producer, recording: Recording, topic: str,
                      states: dict[str, str]) -> None:
    """Committed messages and order rows match one to one; no check answered UNKNOWN."""
    with recording.barrier.engine.connect() as conn:
        local = sorted(conn.execute(select(orders.c.transaction_id)).scalars())
    bodies = sorted(m["body"] for m in producer.read(topic, limit=1000)["messages"])
    committed = sorted(t for t, state in states.items() if state == "COMMITTED")
    assert local == committed
    assert bodies == committed  # each message once
    assert [a for a in recording.answers if a[1] is Resolution.UNKNOWN] == []


def test_a_producer_killed_at_any_step(service: Service, producer_side: Any,
                                       database_url: str, tmp_path: Path) -> None:
    producer, recording = producer_side
    topic = f"t-{uuid.uuid4().hex[:8]}"
    children = [Child(service, producer, database_url, topic, step, tmp_path) for step in STEPS]
    for child in children:
        child.wait_at_step()
        child.kill()
    states = settled(producer, [c.txid for c in children])
    assert {c.step: states[c.txid] for c in children} == STEPS
    assert_one_to_one(producer, recording, topic, states)
    checked = {t for t, _ in recording.answers}
    assert {c.step for c in children if c.txid in checked} >= {
        "after_send", "in_block", "after_local_commit"}


def test_the_service_killed_between_the_local_commit_and_its_commit(
        service: Service, producer_side: Any, database_url: str, tmp_path: Path) -> None:
    producer, recording = producer_side
    topic = f"t-{uuid.uuid4().hex[:8]}"
    child = Child(service, producer, database_url, topic, "after_local_commit", tmp_path)
    child.wait_at_step()
    service.served.kill()
    try:
        assert child.go_on() == "PREPARED"  # its commit did not get through, nothing raised
    finally:
        service.restart()
    states = settled(producer, [child.txid])
    assert states == {child.txid: "COMMITTED"}
    assert recording.answers == [(child.txid, Resolution.COMMIT)]
    assert_one_to_one(producer, recording, topic, states)


def test_a_check_while_the_local_transaction_is_open(service: Service, producer_side: Any,
                                                     database_url: str, tmp_path: Path) -> None:
    producer, recording = producer_side
    topic = f"t-{uuid.uuid4().hex[:8]}"
    child = Child(service, producer, database_url, topic, "in_block", tmp_path)
    child.wait_at_step()
    wait_until(recording.asked.is_set, timeout=60, what="the service's check")
    assert recording.answers == []  # the check waits for the local transaction
    assert child.go_on() == "COMMITTED"
    states = settled(producer, [child.txid])
    assert states == {child.txid: "COMMITTED"}
    wait_until(lambda: recording.answers, what="the check's answer")
    assert recording.answers == [(child.txid, Resolution.COMMIT)]
    assert_one_to_one(producer, recording, topic, states)


def test_eight_producer_threads_a_thousand_local_transactions(
        service: Service, producer_side: Any) -> None:
    """1,000 on PostgreSQL; 200 on SQLite and MySQL, to keep the module's time in bounds."""
    producer, recording = producer_side
    topic = f"t-{uuid.uuid4().hex[:8]}"
    dialect = recording.barrier.engine.dialect.name
    count = 1000 if dialect == "postgresql" else 200
    txids = iter(f"c-{n:04d}" for n in range(count))
    lock = threading.Lock()
    failed: list[str] = []
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        chance = random.Random(seed)
        with Producer(service.url, producer.group) as mine:
            while True:
                with lock:
                    txid = next(txids, None)
                if txid is None:
                    return
                try:
                    with mine.local_transaction(recording.barrier, {"topic": topic, "body": txid},
                                                transaction_id=txid) as local:
                        local.connection.execute(orders.insert().values(transaction_id=txid))
                        if chance.random() < 0.2:
                            raise LookupError(txid)
                except (LookupError, RolledBackByCheck):
                    # RolledBackByCheck: a local transaction that waited for the database
                    # longer than the service's transaction timeout (1 s) lost to the check
                    failed.append(txid)
                except BaseException as exc:  # noqa: BLE001 - reported below
                    errors.append(exc)
                    return

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert errors == []
    all_txids = [f"c-{n:04d}" for n in range(count)]
    with recording.barrier.engine.connect() as conn:
        local = set(conn.execute(select(orders.c.transaction_id)).scalars())
    messages: list[str] = []
    offset = 0
    while page := producer.read(topic, from_offset=offset, limit=1000)["messages"]:
        messages.extend(m["body"] for m in page)
        offset = page[-1]["offset"] + 1
    assert len(messages) == len(set(messages))
    assert set(messages) == local == set(all_txids) - set(failed)
    assert count * 0.1 < len(failed) < count * 0.4
    assert [a for a in recording.answers if a[1] is Resolution.UNKNOWN] == []
