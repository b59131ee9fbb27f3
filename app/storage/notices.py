"""Commits told across processes, with PostgreSQL's LISTEN/NOTIFY.

A receive waiting in one process is woken by that process's commits
(``app.domain.wakeups``). A commit made in another process (a second ``txmsg serve``,
another web worker, the checker, ``txmsg commit``) reaches it as a notification on
``CHANNEL`` that names the topics on which something became deliverable. Both ends work
on a connection and a daemon thread of their own, never inside a commit's transaction
nor on its path:

- ``Publisher`` queues topics in a set (a topic committed a thousand times between two
  sends is sent once) and its thread sends what has gathered, one ``pg_notify`` per
  payload of under 8000 bytes (the server's limit), with ``synchronous_commit`` off:
  a notification is a wake-up, not data.
- ``Listener`` LISTENs and hands the topics of the notifications to a callback, except
  those its own process sent (each payload names its sender): that process has woken its
  receives already.

A publisher sends nothing while no other process listens (a lone ``txmsg serve``, the
common case, whose notifications only ever reached its own listener): it looks at most
once per ``OTHERS_TTL_SECONDS`` for another ``txmsg-listen`` connection to its database,
and a listener says it has started with a notification of no topics, which tells every
other process at once.

A notification is a hint, never the truth: one lost (the database restarting, a
listener reconnecting) only leaves a receive to its probe (``app.api.longpoll``). Either
end reconnects with a backoff when its connection is lost and never raises. SQLite has
neither end (``publisher`` and ``listener`` give None): its writers are one process.

Behind a transaction pooler (``TXMSG_DATABASE_POOLING=transaction``) a LISTEN would hold
a server session the pooler hands to others: both ends connect to
``TXMSG_SESSION_DATABASE_URL`` (direct to PostgreSQL) instead, and without it there are
none, as on SQLite: receives learn of other processes' commits by their probes.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any

import orjson
import psycopg
from psycopg.conninfo import make_conninfo
from sqlalchemy import Engine

from app.config import Settings
from app.storage.db import make_engine, pg_connect_args
from app.storage.dialects import dialect_of

log = logging.getLogger(__name__)

CHANNEL = "txmsg_topics"
# PostgreSQL refuses a payload of 8000 bytes or more
MAX_PAYLOAD_BYTES = 7999
PUBLISHER_NAME = "txmsg-notify"
LISTENER_NAME = "txmsg-listen"
# the listener looks whether it is asked to stop at least this often
_LISTEN_SLICE_SECONDS = 0.5
# how long a look for other processes' listeners holds
OTHERS_TTL_SECONDS = 1.0
_NOTIFY = "SELECT pg_notify(%s, %s)"
_OTHER_LISTENERS = ("SELECT EXISTS (SELECT FROM pg_stat_activity WHERE datname ="
                    " current_database() AND application_name = %s AND pid <> %s)")
# pauses between two attempts to reconnect, doubled from the first up to the last
_FIRST_RETRY_SECONDS, _MAX_RETRY_SECONDS = 0.5, 10.0

Topics = Callable[[list[str]], None]


def libpq_conninfo(engine: Engine) -> str | None:
    """The engine's PostgreSQL database as a libpq connection string, password included;
    None for any other database. Made from the dialect's own connection arguments, so a
    multi-host URL (``?host=h1:5432&host=h2:5432&target_session_attrs=read-write``) gives
    libpq every host and port, and this connection follows the primary as the engine's do."""
    if not dialect_of(engine).notifications:
        return None
    _, params = engine.dialect.create_connect_args(engine.url)
    params.pop("context", None)  # psycopg's adapters, not a libpq parameter
    return make_conninfo(**params)


def session_conninfo(engine: Engine, settings: Settings) -> str | None:
    """Where notifications go: the engine's database, or behind a transaction pooler the
    session URL (None without one, and on SQLite)."""
    if settings.database_pooling != "transaction":
        return libpq_conninfo(engine)
    if not dialect_of(engine).notifications or not settings.session_database_url:
        return None
    return libpq_conninfo(make_engine(
        settings.model_copy(update={"database_url": settings.session_database_url,
                                    "database_pooling": "session"}), pool=False))


def publisher(engine: Engine, settings: Settings) -> Publisher | None:
    """A publisher for the engine's database (not started until it has topics to send);
    None on SQLite, and behind a transaction pooler without a session URL."""
    url = session_conninfo(engine, settings)
    return None if url is None else Publisher(url, settings)


def listener(engine: Engine, settings: Settings, callback: Topics, *, own: Publisher
             ) -> Listener | None:
    """A started listener on the engine's database, which hands ``callback`` the topics of
    the notifications not sent by ``own`` (its process's publisher, which learns from it
    whether other processes listen); None where ``publisher`` gives None."""
    url = session_conninfo(engine, settings)
    if url is None:
        return None
    found = Listener(url, settings, callback, own=own)
    found.start()
    return found


def payloads(origin: str, topics: Iterable[str]) -> list[str]:
    """The topics as payloads of at most MAX_PAYLOAD_BYTES, each naming its ``origin``."""
    head = len(orjson.dumps({"origin": origin, "topics": []}))
    out: list[str] = []
    chunk: list[str] = []
    size = head
    for topic in sorted(topics):
        grows = len(orjson.dumps(topic)) + (1 if chunk else 0)
        if chunk and size + grows > MAX_PAYLOAD_BYTES:
            out.append(_payload(origin, chunk))
            chunk, size, grows = [], head, grows - 1
        chunk.append(topic)
        size += grows
    if chunk:
        out.append(_payload(origin, chunk))
    return out


def _payload(origin: str, topics: list[str]) -> str:
    return orjson.dumps({"origin": origin, "topics": topics}).decode()


def parse(payload: str) -> tuple[str, list[str]]:
    """(origin, topics) of a payload; ("", []) for one this module did not write."""
    try:
        data = orjson.loads(payload)
        origin, topics = data["origin"], data["topics"]
    except (orjson.JSONDecodeError, TypeError, KeyError):
        return "", []
    if not isinstance(origin, str) or not isinstance(topics, list):
        return "", []
    return origin, [t for t in topics if isinstance(t, str)]


def _connect(url: str, settings: Settings, name: str, options: str) -> psycopg.Connection[Any]:
    """A connection of its own, bounded on the network as the engine's are."""
    args: dict[str, Any] = pg_connect_args(settings, options)
    return psycopg.connect(url, autocommit=True, application_name=name, **args)


class _Backoff:
    def __init__(self) -> None:
        self.delay = _FIRST_RETRY_SECONDS

    def next(self) -> float:
        delay, self.delay = self.delay, min(self.delay * 2, _MAX_RETRY_SECONDS)
        return delay

    def reset(self) -> None:
        self.delay = _FIRST_RETRY_SECONDS


class _Outage:
    """One warning when a connection is lost, debug lines while it stays lost, one info
    line when it is back."""

    def __init__(self, what: str, meanwhile: str) -> None:
        self.what, self.meanwhile = what, meanwhile
        self.failing = False

    def failed(self, exc: BaseException) -> None:
        text = str(exc).strip()
        reason = text.splitlines()[0][:200] if text else type(exc).__name__
        if self.failing:
            log.debug("%s: still failing: %s", self.what, reason)
        else:
            log.warning("%s: database connection failed (%s); retrying, %s meanwhile",
                        self.what, reason, self.meanwhile)
        self.failing = True

    def ok(self) -> None:
        if self.failing:
            log.info("%s: connected again", self.what)
        self.failing = False


class Publisher:
    """Sends the topics handed to ``publish`` as notifications, from a daemon thread
    started by the first ``publish``; ``close`` sends what is queued, then stops."""

    def __init__(self, url: str, settings: Settings) -> None:
        self.origin = uuid.uuid4().hex
        self._url = url
        self._settings = settings
        self._lock = threading.Lock()
        self._pending: set[str] = set()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._conn: psycopg.Connection[Any] | None = None
        self._outage = _Outage(
            "commit notifications", "receives waiting in other processes look once a second")
        # whether another process listens, as last seen, and until when that holds
        self._others, self._others_until = True, 0.0
        self._listener_pid = 0  # the backend of this process's own listener, if any

    def publish(self, topics: Iterable[str]) -> None:
        """Queue these topics; never waits for the database."""
        with self._lock:
            if self._stop.is_set():
                return
            if not self._others and time.monotonic() < self._others_until:
                return  # no other process listens: nobody to tell
            self._pending.update(topics)
            if not self._pending:
                return
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=PUBLISHER_NAME,
                                                daemon=True)
                self._thread.start()
        self._wake.set()

    def close(self, timeout: float = 5.0) -> None:
        """Send what is queued (for at most ``timeout``), stop the thread, disconnect."""
        with self._lock:
            self._stop.set()
            thread = self._thread
        self._wake.set()
        if thread is not None:
            thread.join(timeout)

    def _run(self) -> None:
        backoff = _Backoff()
        try:
            while True:
                self._wake.wait()
                self._wake.clear()
                with self._lock:
                    topics, self._pending = self._pending, set()
                if topics:
                    try:
                        self._send(topics)
                    except psycopg.Error as exc:  # lost: the probes find these topics
                        self._outage.failed(exc)
                        if self._stop.wait(backoff.next()):
                            return
                    else:
                        self._outage.ok()
                        backoff.reset()
                if self._stop.is_set():
                    with self._lock:
                        if not self._pending:
                            return
                    self._wake.set()  # one more round for what was queued before close
        finally:
            self._disconnect()

    def _send(self, topics: set[str]) -> None:
        """One ``pg_notify`` per payload; a connection found dead is replaced once."""
        while True:
            fresh = self._conn is None
            if self._conn is None:
                self._conn = _connect(self._url, self._settings, PUBLISHER_NAME,
                                      "-c synchronous_commit=off")
            try:
                if self._others_listen(self._conn):
                    for payload in payloads(self.origin, topics):
                        self._conn.execute(_NOTIFY, (CHANNEL, payload))
                return
            except psycopg.Error:
                self._disconnect()
                if fresh:
                    raise

    def _others_listen(self, conn: psycopg.Connection[Any]) -> bool:
        """Whether a listener of another process is connected to the database (looked up
        at most once per ``OTHERS_TTL_SECONDS``)."""
        now = time.monotonic()
        with self._lock:
            if now < self._others_until:
                return self._others
            pid = self._listener_pid
        row = conn.execute(_OTHER_LISTENERS, (LISTENER_NAME, pid)).fetchone()
        with self._lock:
            if self._others_until <= now:  # no other process has spoken meanwhile
                self._others, self._others_until = bool(row and row[0]), now + OTHERS_TTL_SECONDS
            return self._others

    def listening_as(self, pid: int) -> None:
        """This process's listener listens on the backend ``pid`` (not another process)."""
        with self._lock:
            self._listener_pid = pid

    def heard_from_another(self) -> None:
        """A notification came from another process: it listens (its listener says so when
        it starts), so this one's commits are worth telling for a while."""
        with self._lock:
            self._others, self._others_until = True, time.monotonic() + OTHERS_TTL_SECONDS

    def _disconnect(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except psycopg.Error:
                pass


class Listener:
    """LISTENs on ``CHANNEL`` from a daemon thread and hands ``callback`` the topics of
    each notification not sent by ``own``, telling ``own`` of the others; reconnects (and
    LISTENs again) when its connection is lost."""

    def __init__(self, url: str, settings: Settings, callback: Topics, *,
                 own: Publisher) -> None:
        self._url = url
        self._settings = settings
        self._callback = callback
        self._own = own
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=LISTENER_NAME, daemon=True)
        self._outage = _Outage(
            "commit notifications listener", "receives waiting here look once a second")
        self.listening = threading.Event()

    def start(self) -> None:
        self._thread.start()

    def close(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _run(self) -> None:
        backoff = _Backoff()
        while not self._stop.is_set():
            try:
                with _connect(self._url, self._settings, LISTENER_NAME, "") as conn:
                    # no topics: the other processes' publishers learn that one listens
                    conn.execute(_NOTIFY, (CHANNEL, _payload(self._own.origin, [])))
                    self._own.listening_as(conn.info.backend_pid)
                    conn.execute(f"LISTEN {CHANNEL}")
                    self.listening.set()
                    self._outage.ok()
                    backoff.reset()
                    while not self._stop.is_set():
                        for note in conn.notifies(timeout=_LISTEN_SLICE_SECONDS):
                            self._deliver(note.payload)
            except psycopg.Error as exc:
                self.listening.clear()
                if self._stop.is_set():
                    return
                self._outage.failed(exc)
                self._stop.wait(backoff.next())
        self.listening.clear()

    def _deliver(self, payload: str) -> None:
        origin, topics = parse(payload)
        if not origin or origin == self._own.origin:
            return
        self._own.heard_from_another()
        if not topics:
            return
        try:
            self._callback(topics)
        except Exception:  # a bug in the callback must not end the listening
            log.exception("commit notification callback failed")
