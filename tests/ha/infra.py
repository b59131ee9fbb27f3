"""The real infrastructure of the high-availability tests, on loopback ports chosen at run
time: etcd, PostgreSQL 15 nodes managed by Patroni (deploy/patroni/patroni.yml, each
node's own values in Patroni's environment variables, as docker-compose.yml's "ha"
profile sets them).

Every process runs in a session of its own; ``destroy`` kills them all and removes their
files, whatever state a failed test left them in.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import requests
from sqlalchemy import Connection, create_engine, text

from tests.callbacks import wait_until
from tests.conftest import free_port
from tests.faults.cluster import as_postgres, chown_to_postgres

ROOT = Path(__file__).resolve().parents[2]
PATRONI_CONFIG = ROOT / "deploy" / "patroni" / "patroni.yml"
PG_BINDIR = Path("/usr/lib/postgresql/15/bin")
# bounds, not goals: a node bootstraps or clones in seconds; a failover takes about
# Patroni's ttl + loop_wait (deploy/patroni/patroni.yml)
START_SECONDS = 120
FAILOVER_SECONDS = 60


def unavailable_reason() -> str | None:
    """Why etcd and Patroni cannot run here, or None when they can."""
    for tool in ("etcd", "patroni"):
        if shutil.which(tool) is None:
            return f"no {tool} (Debian: scripts/ensure-system-deps.sh installs it)"
    if not (PG_BINDIR / "postgres").exists():
        return f"no PostgreSQL 15 server in {PG_BINDIR}"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no postgres user to run PostgreSQL as"
    return None


def kill_session(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the process's whole session (started with start_new_session) and reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)


def log_tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


class Etcd:
    """A one-member etcd cluster: the store Patroni keeps its leader key in."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.client_port, self.peer_port = free_port(), free_port()
        self.log = root / "etcd.log"
        peer = f"http://127.0.0.1:{self.peer_port}"
        client = f"http://127.0.0.1:{self.client_port}"
        self.proc = subprocess.Popen(
            ["etcd", "--name", "etcd0", "--data-dir", str(root / "etcd"),
             "--listen-client-urls", client, "--advertise-client-urls", client,
             "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
             "--initial-cluster", f"etcd0={peer}"],
            stdout=self.log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True)
        wait_until(self._healthy, timeout=START_SECONDS, what="etcd to answer")

    @property
    def hosts(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    def _healthy(self) -> bool:
        assert self.proc.poll() is None, f"etcd exited: {log_tail(self.log)}"
        try:
            return requests.get(f"http://{self.hosts}/health", timeout=2).ok
        except requests.RequestException:
            return False

    def stop(self) -> None:
        kill_session(self.proc)


class PatroniNode:
    def __init__(self, root: Path, name: str, etcd: Etcd) -> None:
        self.name, self.etcd = name, etcd
        self.pg_port, self.api_port = free_port(), free_port()
        self.data = root / name
        self.log = root / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.pg_port}"

    def url(self, dbname: str) -> str:
        return f"postgresql+psycopg://postgres@{self.host}/{dbname}"

    def start(self) -> None:
        env = {**os.environ,
               "PATRONI_NAME": self.name,
               "PATRONI_RESTAPI_LISTEN": f"127.0.0.1:{self.api_port}",
               "PATRONI_RESTAPI_CONNECT_ADDRESS": f"127.0.0.1:{self.api_port}",
               "PATRONI_POSTGRESQL_LISTEN": self.host,
               "PATRONI_POSTGRESQL_CONNECT_ADDRESS": self.host,
               "PATRONI_POSTGRESQL_DATA_DIR": str(self.data),
               "PATRONI_ETCD3_HOSTS": self.etcd.hosts,
               "HOME": str(self.data.parent)}
        self.proc = subprocess.Popen(as_postgres("patroni", str(PATRONI_CONFIG)), env=env,
                                     stdout=self.log.open("ab"), stderr=subprocess.STDOUT,
                                     start_new_session=True)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def postmaster_pid(self) -> int | None:
        try:
            return int((self.data / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def kill_postgres(self) -> None:
        """SIGKILL the node's postmaster: its backends end, nothing is flushed."""
        pid = self.postmaster_pid()
        assert pid is not None, f"{self.name} runs no PostgreSQL"
        os.kill(pid, signal.SIGKILL)

    def kill(self) -> None:
        """SIGKILL the node's Patroni (PostgreSQL runs in a session of its own)."""
        if self.proc is not None:
            kill_session(self.proc)

    def destroy(self) -> None:
        self.kill()
        pid = self.postmaster_pid()
        if pid is not None:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


class PatroniCluster:
    """etcd and ``size`` Patroni nodes (synchronous_mode: one synchronous standby)."""

    def __init__(self, root: Path, size: int) -> None:
        self.root = root
        self.etcd = Etcd(root)
        self.nodes = [PatroniNode(root, f"pg{i}", self.etcd) for i in range(size)]

    @classmethod
    def create(cls, size: int = 2) -> PatroniCluster:
        # not under pytest's tmp_path: its parents are private to root
        root = Path(tempfile.mkdtemp(prefix="txmsg-ha-"))
        chown_to_postgres(root)
        cluster: PatroniCluster | None = None
        try:
            cluster = cls(root, size)
            for node in cluster.nodes:
                node.start()
            wait_until(cluster.replicating, timeout=START_SECONDS,
                       what="a leader and a synchronous standby")
        except BaseException:
            if cluster is not None:
                cluster.destroy()
            else:
                shutil.rmtree(root, ignore_errors=True)
            raise
        return cluster

    def url(self, dbname: str, **query: str) -> str:
        """The libpq multi-host URL of every node, for the primary (read-write)."""
        hosts = "&".join(f"host={node.host}" for node in self.nodes)
        extra = "".join(f"&{k}={v}" for k, v in query.items())
        return (f"postgresql+psycopg://postgres@/{dbname}?{hosts}"
                f"&target_session_attrs=read-write{extra}")

    def members(self) -> list[dict[str, Any]]:
        """Patroni's view of the cluster, from any node that answers."""
        for node in self.nodes:
            if not node.alive():
                continue
            try:
                r = requests.get(f"{node.api}/cluster", timeout=2)
            except requests.RequestException:
                continue
            if r.ok:
                members: list[dict[str, Any]] = r.json()["members"]
                return members
        return []

    def node(self, role: str) -> PatroniNode | None:
        """The node with this role ("leader", "sync_standby", "replica") running, if any."""
        for member in self.members():
            if member["role"] == role and member["state"] in ("running", "streaming"):
                return next(n for n in self.nodes if n.name == member["name"])
        return None

    def replicating(self) -> bool:
        for node in self.nodes:
            assert node.alive(), f"{node.name} exited: {log_tail(node.log)}"
        return self.node("leader") is not None and self.node("sync_standby") is not None

    def leader(self) -> PatroniNode:
        found = self.node("leader")
        assert found is not None, self.log_tail()
        return found

    def wait_for_leader(self, other_than: PatroniNode) -> PatroniNode:
        def promoted() -> bool:
            found = self.node("leader")
            return found is not None and found is not other_than
        wait_until(promoted, timeout=FAILOVER_SECONDS, what="Patroni to promote a standby")
        return self.leader()

    def create_database(self, name: str) -> str:
        admin = create_engine(self.url("postgres"), isolation_level="AUTOCOMMIT")
        try:
            with admin.connect() as conn:
                conn.execute(text(f'CREATE DATABASE "{name}"'))
        finally:
            admin.dispose()
        return self.url(name)

    def log_tail(self, lines: int = 20) -> str:
        return "\n".join(f"--- {node.name}:\n{log_tail(node.log, lines)}" for node in self.nodes)

    def destroy(self) -> None:
        """Kill every node and etcd, and remove their files; safe after any failure."""
        for node in self.nodes:
            node.destroy()
        self.etcd.stop()
        # a postmaster killed alone leaves backends that exit on noticing it
        for node in self.nodes:
            deadline = time.monotonic() + 30
            while node.data.exists() and _any_process_in(node.data) \
                    and time.monotonic() < deadline:
                time.sleep(0.2)
        shutil.rmtree(self.root, ignore_errors=True)


def _any_process_in(data: Path) -> bool:
    """Whether a PostgreSQL process still has ``data`` as its data directory."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "cwd").resolve() == data:
                return True
        except OSError:
            continue
    return False


def spark_class() -> Path:
    """PySpark's own ``spark-class``: the Spark that ``txmsg ingest`` runs, as a cluster."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent / "bin" / "spark-class"


class SparkCluster:
    """A Spark standalone master and ``workers`` workers, each its own JVM process. Nothing
    is added to the workers' classpath: the JDBC driver reaches the executors with the job
    (``spark.jars``), as on a cluster without Debian's jars."""

    def __init__(self, root: Path, workers: int = 2) -> None:
        self.root = root
        self.port, self.ui_port = free_port(), free_port()
        self.procs: list[subprocess.Popen[bytes]] = []
        self.logs: list[Path] = []
        env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_NO_DAEMONIZE": "1",
               "SPARK_LOG_DIR": str(root), "SPARK_WORKER_DIR": str(root / "work"),
               "SPARK_DAEMON_MEMORY": "256m"}
        self.work_dirs = [root / f"worker{i}" for i in range(workers)]
        try:
            self._start(env, "master", "org.apache.spark.deploy.master.Master",
                        "--host", "127.0.0.1", "--port", str(self.port),
                        "--webui-port", str(self.ui_port))
            wait_until(lambda: self.state() is not None, timeout=START_SECONDS,
                       what="the Spark master")
            for i, work in enumerate(self.work_dirs):
                self._start(env, f"worker{i}", "org.apache.spark.deploy.worker.Worker",
                            "--host", "127.0.0.1", "--webui-port", str(free_port()),
                            "--cores", "1", "--memory", "1g", "--work-dir", str(work),
                            self.master)
            wait_until(lambda: len(self.alive_workers()) == workers, timeout=START_SECONDS,
                       what=f"{workers} Spark workers to register")
        except BaseException:
            self.stop()
            raise

    @property
    def master(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _start(self, env: dict[str, str], name: str, *args: str) -> None:
        log = self.root / f"spark-{name}.log"
        self.logs.append(log)
        self.procs.append(subprocess.Popen(
            [str(spark_class()), *args], env=env, stdout=log.open("ab"),
            stderr=subprocess.STDOUT, start_new_session=True))

    def state(self) -> dict[str, Any] | None:
        """The master's own account (its web UI's JSON), None while it does not answer."""
        for proc, log in zip(self.procs, self.logs, strict=True):
            assert proc.poll() is None, f"{log.name} exited: {log_tail(log)}"
        try:
            r = requests.get(f"http://127.0.0.1:{self.ui_port}/json/", timeout=2)
            state: dict[str, Any] = r.json() if r.ok else None
        except (requests.RequestException, ValueError):  # starting: not (yet) its JSON
            return None
        return state

    def alive_workers(self) -> list[dict[str, Any]]:
        state = self.state() or {}
        return [w for w in state.get("workers", []) if w.get("state") == "ALIVE"]

    def executors_of(self, app_id: str) -> list[Path]:
        """The executor directories the workers made for an application."""
        return [d for work in self.work_dirs for d in (work / app_id).glob("*") if d.is_dir()]

    def stop(self) -> None:
        for proc in self.procs:
            kill_session(proc)


HAPROXY_CONFIG = ROOT / "deploy" / "haproxy" / "haproxy.cfg"


class HAProxy:
    """HAProxy (deploy/haproxy/haproxy.cfg) in front of two txmsg processes."""

    def __init__(self, root: Path, api1: str, api2: str) -> None:
        self.port = free_port()
        self.log = root / "haproxy.log"
        env = {**os.environ, "TXMSG_HAPROXY_BIND": f"127.0.0.1:{self.port}",
               "TXMSG_API1": api1, "TXMSG_API2": api2}
        self.proc = subprocess.Popen(["haproxy", "-db", "-f", str(HAPROXY_CONFIG)], env=env,
                                     stdout=self.log.open("ab"), stderr=subprocess.STDOUT,
                                     start_new_session=True)
        wait_until(self._ready, timeout=START_SECONDS, what="HAProxy to pass requests")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _ready(self) -> bool:
        assert self.proc.poll() is None, f"haproxy exited: {log_tail(self.log)}"
        try:
            return requests.get(f"{self.url}/readyz", timeout=2).status_code == 200
        except requests.RequestException:
            return False

    def stop(self) -> None:
        kill_session(self.proc)


def pause(cluster: PatroniCluster) -> None:
    """Patroni's maintenance mode: no failover, and a stopped PostgreSQL stays stopped."""
    leader = cluster.leader()
    r = requests.patch(f"{leader.api}/config", json={"pause": True}, timeout=10)
    assert r.ok, r.text
    wait_until(lambda: requests.get(f"{leader.api}/cluster", timeout=2).json().get("pause"),
               timeout=START_SECONDS, what="Patroni to pause")


def replayed(primary: PatroniNode, standby: PatroniNode, dbname: str) -> bool:
    """Whether the standby has replayed all the primary has written so far."""
    with connect(primary.url(dbname)) as conn:
        written = conn.execute(text("SELECT pg_current_wal_lsn()::text")).scalar()
    with connect(standby.url(dbname)) as conn:
        return bool(conn.execute(text("SELECT pg_last_wal_replay_lsn() >= CAST(:w AS pg_lsn)"),
                                 {"w": written}).scalar())


@contextmanager
def connect(url: str) -> Iterator[Connection]:
    engine = create_engine(url, poolclass=None)
    try:
        with engine.connect() as conn:
            yield conn
    finally:
        engine.dispose()
