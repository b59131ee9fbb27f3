"""Receives woken by other processes' commits, through PostgreSQL notifications
(``app.storage.notices``). Two apps on one database stand for two processes: each has its
own signal, publisher and listener. The probe is pushed past every wait, so that only a
notification can wake a receive in time."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import orjson
import psycopg
import pytest
from prometheus_client import REGISTRY

from app.api import asgi, longpoll
from app.config import Settings
from app.storage import notices
from app.storage.db import make_engine
from app.web import create_app
from tests.asgi_client import AsgiClient
from tests.callbacks import wait_until
from tests.conftest import make_settings
from tests.front_client import front
from tests.integration.helpers import finish, register, send

RECEIVE = "/v1/topics/t/subscriptions/s/receive"
pytestmark = pytest.mark.postgres


class Ends:
    """A publisher and a listener, as one process has them; what the listener handed on."""

    def __init__(self, engine: Any, settings: Settings) -> None:
        self._lock = threading.Lock()
        self._got: list[str] = []
        publisher = notices.publisher(engine, settings)
        assert publisher is not None
        self.publisher = publisher
        listener = notices.listener(engine, settings, self._heard, own=publisher)
        assert listener is not None
        self.listener = listener

    def _heard(self, topics: list[str]) -> None:
        with self._lock:
            self._got.extend(topics)

    @property
    def got(self) -> list[str]:
        with self._lock:
            return list(self._got)

    def close(self) -> None:
        self.listener.close()
        self.publisher.close()


def libpq(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


def test_a_notification_reaches_the_other_process_not_its_own(postgres_url: str) -> None:
    settings = make_settings(postgres_url)
    engine = make_engine(settings)
    a, b = Ends(engine, settings), Ends(engine, settings)
    try:
        wait_until(lambda: a.listener.listening.is_set() and b.listener.listening.is_set(),
                   what="both listening")
        a.publisher.publish(["t1", "t2"])
        wait_until(lambda: sorted(b.got) == ["t1", "t2"], what="b hearing a")
        b.publisher.publish(["t3"])
        # a heard its own notification before b's: it handed on b's only
        wait_until(lambda: a.got == ["t3"], what="a hearing b")
        a.publisher.publish(["t4"])
        wait_until(lambda: "t4" in b.got, what="b hearing a again")
        assert sorted(b.got) == ["t1", "t2", "t4"]
        assert a.got == ["t3"]
        # more topics than one payload holds arrive, in several notifications
        many = {f"{i:03d}-" + "x" * 123 for i in range(300)}
        b.publisher.publish(many)
        wait_until(lambda: len(a.got) == 1 + len(many), what="every topic")
        assert set(a.got) == many | {"t3"}
    finally:
        a.close()
        b.close()
        engine.dispose()


def txmsg_listeners(admin: psycopg.Connection[Any]) -> int:
    return admin.execute("SELECT count(*) FROM pg_stat_activity WHERE datname ="
                         " current_database() AND application_name = %s",
                         (notices.LISTENER_NAME,)).fetchone()[0]  # type: ignore[index]


def test_a_lone_process_tells_nobody_until_another_listens(postgres_url: str) -> None:
    """A process whose listener is the only one sends no notification (it would reach only
    itself); a second process's listener, once started, gets the next commit's at once."""
    settings = make_settings(postgres_url)
    engine = make_engine(settings)
    heard: list[str] = []
    with psycopg.connect(libpq(postgres_url), autocommit=True) as admin, \
            psycopg.connect(libpq(postgres_url), autocommit=True) as tap:
        tap.execute(f"LISTEN {notices.CHANNEL}")  # not a txmsg listener: not counted

        def tapped() -> list[str]:
            heard.extend(t for n in tap.notifies(timeout=0.05, stop_after=50)
                         for t in notices.parse(n.payload)[1])
            return heard

        a = Ends(engine, settings)
        b: Ends | None = None
        try:
            wait_until(a.listener.listening.is_set, what="a listening")
            wait_until(lambda: txmsg_listeners(admin) == 1, what="no other listener")
            a.publisher.publish(["unheard"])

            def looked() -> bool:  # a's publisher looked for listeners, and sent nothing
                return admin.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                    " AND application_name = %s AND state = 'idle'"
                    " AND query LIKE '%%FROM pg_stat_activity%%'",
                    (notices.PUBLISHER_NAME,)).fetchone() == (1,)

            wait_until(looked, what="a's publisher looking")
            b = Ends(engine, settings)
            wait_until(b.listener.listening.is_set, what="b listening")

            def told() -> bool:
                a.publisher.publish(["heard"])
                return "heard" in tapped()

            wait_until(told, what="a telling b")
            wait_until(lambda: "heard" in b.got, what="b hearing a")
            # one connection's notifications arrive in order: "unheard" was never sent
            assert "unheard" not in heard and "unheard" not in b.got
        finally:
            a.close()
            if b is not None:
                b.close()
            engine.dispose()


def test_a_process_without_a_listener_tells_those_that_listen(postgres_url: str) -> None:
    """A publisher alone (the checker, the CLI) looks for listeners before its first
    notification: one listening is told at once."""
    settings = make_settings(postgres_url)
    engine = make_engine(settings)
    b = Ends(engine, settings)
    lone = notices.publisher(engine, settings)
    assert lone is not None
    try:
        wait_until(b.listener.listening.is_set, what="b listening")
        lone.publish(["t"])
        wait_until(lambda: b.got == ["t"], what="b hearing the lone publisher")
    finally:
        lone.close()
        b.close()
        engine.dispose()


@pytest.fixture
def fronts(postgres_url: str, monkeypatch: pytest.MonkeyPatch
           ) -> Iterator[tuple[Any, AsgiClient, Any]]:
    """A served app (its ASGI front) and another app on the same database, each with its
    publisher and listener; the probe pushed past every wait."""
    monkeypatch.setattr(longpoll, "RECHECK_SECONDS", 60.0)
    here = create_app(make_settings(postgres_url, web_threads=2), cross_process=True)
    other = create_app(make_settings(postgres_url), cross_process=True)
    http = AsgiClient(asgi.Api(here))
    yield here, http, other
    http.app._receivers.shutdown(wait=False)
    http.close()
    other.extensions["txmsg"].close()
    here.extensions["txmsg"].close()


def long_poll(http: AsgiClient, wait_ms: int) -> list[int]:
    body = orjson.dumps({"max_messages": 10, "wait_ms": wait_ms})
    r = http.request("POST", RECEIVE, body=body,
                     headers=[("content-length", str(len(body)))])
    assert r.status == 200, r.body
    return [m["offset"] for m in orjson.loads(r.body)["messages"]]


def notified() -> float:
    return REGISTRY.get_sample_value("txmsg_wakeups_total", {"source": "notify"}) or 0.0


def woken_by_the_other(here: Any, http: AsgiClient, other: Any, first: int) -> None:
    """A receive waiting here gets the two messages the other app commits, woken by its
    notification (the probe would not look for a minute)."""
    state = here.extensions["txmsg"]
    wait_until(state.listener.listening.is_set, what="the listener listening")
    client = front(other)
    before = notified()
    with ThreadPoolExecutor(1) as pool:
        poll = pool.submit(long_poll, http, 20_000)
        wait_until(lambda: state.signal.waiting("t") == 1, what="the receive waiting")
        sent = send(client, messages=[{"topic": "t", "body": f"m{i}"} for i in range(2)])
        assert finish(client, sent.json["transaction_id"], "commit").status_code == 200
        assert poll.result(timeout=60) == [first, first + 1]
    assert notified() == before + 1


def test_a_commit_of_another_process_wakes_a_waiting_receive(
        fronts: tuple[Any, AsgiClient, Any]) -> None:
    here, http, other = fronts
    client = front(other)
    register(client)
    assert client.put("/v1/topics/t/subscriptions/s", json={}).status_code == 201
    woken_by_the_other(here, http, other, 0)


def test_the_wakeups_work_again_after_their_connections_are_terminated(
        fronts: tuple[Any, AsgiClient, Any], postgres_url: str) -> None:
    """The listeners' and the publishers' backends terminated (as by a database restart):
    each end reconnects, and a commit of the other process wakes a receive again."""
    here, http, other = fronts
    client = front(other)
    register(client)
    assert client.put("/v1/topics/t/subscriptions/s", json={}).status_code == 201
    woken_by_the_other(here, http, other, 0)
    names = (notices.LISTENER_NAME, notices.PUBLISHER_NAME)
    with psycopg.connect(libpq(postgres_url), autocommit=True) as admin:
        ended = admin.execute(
            "SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND application_name = ANY(%s)",
            (list(names),)).fetchall()
        assert len(ended) >= 3 and all(ok for _, ok in ended)  # two listeners, a publisher

        def listening_again() -> bool:
            rows = admin.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                " AND application_name = %s AND state = 'idle' AND query LIKE 'LISTEN%%'",
                (notices.LISTENER_NAME,)).fetchall()
            return len({pid for pid, in rows} - {pid for pid, _ in ended}) == 2

        wait_until(listening_again, what="both listeners back")
    assert front(here).get("/readyz").status_code == 200
    woken_by_the_other(here, http, other, 2)
