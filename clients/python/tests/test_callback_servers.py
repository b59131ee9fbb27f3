"""The check endpoints on real sockets (127.0.0.1): ``checker_app`` under werkzeug's
threaded server, ``asgi_checker_app`` under uvicorn, and ``CheckerServer``. What a request
may cost before its signature is known, and ``CheckerServer``'s bounded pool."""

from __future__ import annotations

import http.client
import json
import select
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, suppress
from typing import Any

import pytest
import requests
from conftest import wait_until
from test_callback import CHECK, SECRET, Ledger, signed
from txmsg_client import _serving
from txmsg_client.callback import CheckerServer, checker_app
from werkzeug.serving import make_server

uvicorn = pytest.importorskip("uvicorn")
from txmsg_client.aio import asgi_checker_app

MiB = 1024 * 1024
Address = tuple[str, int]
Serving = Callable[[Ledger, str | None], AbstractContextManager[Address]]


@contextmanager
def wsgi(checker: Ledger, secret: str | None) -> Iterator[Address]:
    server = make_server("127.0.0.1", 0, checker_app(checker, secret), threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield "127.0.0.1", server.server_port
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


@contextmanager
def asgi(checker: Ledger, secret: str | None) -> Iterator[Address]:
    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(asgi_checker_app(checker, secret), http="h11",
                                           lifespan="off", log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listening]}, daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started, timeout=30, what="uvicorn to start")
        yield listening.getsockname()
    finally:
        server.should_exit = True
        thread.join(10)
        listening.close()


@contextmanager
def pooled(checker: Ledger, secret: str | None) -> Iterator[Address]:
    with CheckerServer(checker, signing_secret=secret) as server:
        yield server._server.server_address[:2]


SERVERS: dict[str, Serving] = {"wsgi": wsgi, "asgi": asgi, "CheckerServer": pooled}
serving = pytest.mark.parametrize("serve", SERVERS.values(), ids=SERVERS.keys())


def post_unfinished(address: Address, headers: dict[str, str], declared: int,
                    body: bytes) -> tuple[int, dict[str, Any], int]:
    """POST a check whose head declares ``declared`` body bytes, then trickle in at most
    the first 256 KiB of ``body`` (16 KiB every 50 ms) and never the rest: the answer
    (status, JSON) and how much of the body was sent by then. No answer within 30 s (the
    server waits for the body) fails the test."""
    assert declared > 256 * 1024
    head = "".join(f"{name}: {value}\r\n" for name, value in {
        "Host": "127.0.0.1", "Content-Type": "application/json",
        "Content-Length": str(declared), **headers}.items())
    with socket.create_connection(address, timeout=30) as conn:
        conn.sendall(f"POST /check HTTP/1.1\r\n{head}\r\n".encode())
        sent = 0
        while sent < 256 * 1024 and not select.select([conn], [], [], 0.05)[0]:
            conn.sendall(body[sent:sent + 16 * 1024])
            sent += 16 * 1024
        if not select.select([conn], [], [], 30)[0]:
            pytest.fail(f"no answer within 30 s of sending {sent} of {declared} bytes")
        answer = http.client.HTTPResponse(conn)
        answer.begin()
        return answer.status, json.loads(answer.read()), sent


def padded(size: int) -> bytes:
    """CHECK as JSON of exactly ``size`` bytes."""
    body = json.dumps(CHECK).encode()
    return body + b" " * (size - len(body))


@serving
def test_an_unsigned_check_is_refused_before_its_body(serve: Serving) -> None:
    ledger = Ledger()
    with serve(ledger, SECRET) as address:
        status, problem, sent = post_unfinished(address, {}, 64 * MiB, padded(64 * MiB))
    assert (status, problem["code"]) == (401, "invalid_signature")
    assert sent <= 256 * 1024 and ledger.seen == []


@serving
def test_a_signed_check_over_1_mib_is_refused_before_its_body(serve: Serving) -> None:
    ledger = Ledger()
    body = padded(MiB + 1)
    with serve(ledger, SECRET) as address:
        status, problem, _ = post_unfinished(address, signed(body, SECRET), len(body), body)
    assert (status, problem["code"]) == (413, "payload_too_large")
    assert ledger.seen == []


@serving
def test_a_signed_check_of_1_mib_is_answered_and_a_longer_stream_refused(
        serve: Serving) -> None:
    ledger = Ledger()
    body = padded(MiB)
    longer = padded(MiB + 1)

    def chunked() -> Iterator[bytes]:  # no Content-Length: the bounded read refuses it
        for at in range(0, len(longer), 64 * 1024):
            yield longer[at:at + 64 * 1024]

    with serve(ledger, SECRET) as (host, port):
        url = f"http://{host}:{port}/check"
        r = requests.post(url, data=body, headers=signed(body, SECRET), timeout=30)
        assert r.status_code == 200 and r.json() == {"resolution": "COMMIT"}
        r = requests.post(url, data=chunked(), headers=signed(longer, SECRET), timeout=30)
        assert r.status_code == 413 and r.json()["code"] == "payload_too_large"
    assert ledger.seen == [CHECK]


def read_to_end(conn: socket.socket) -> bytes:
    """What the server sends before closing the connection (30 s at most per read)."""
    got = b""
    with suppress(ConnectionResetError):
        while chunk := conn.recv(65536):
            got += chunk
    return got


def test_checker_server_bounds_its_threads_and_times_out_silent_connections() -> None:
    """Many more silent connections than workers: some sent nothing, some half a head,
    some a whole signed head but not its body. The threads stay the acceptor and the pool,
    a signed check sent after them is answered, and each silent connection is closed once
    its read timeout passes (the stalled bodies answered 400)."""
    before = threading.active_count()
    body = json.dumps(CHECK).encode()
    whole_head = "".join(f"{name}: {value}\r\n" for name, value in {
        "Host": "127.0.0.1", "Content-Length": str(len(body)), **signed(body, SECRET)}.items())
    with CheckerServer(Ledger(), signing_secret=SECRET, workers=2, read_timeout=1.0) as server:
        pool = threading.active_count()
        assert sum(t.name.startswith("txmsg-checker-callback")
                   for t in threading.enumerate()) == 1 + 2
        address = server._server.server_address[:2]
        silent = [socket.create_connection(address, timeout=30) for _ in range(30)]
        try:
            for conn in silent[10:20]:
                conn.sendall(b"POST /check HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            for conn in silent[20:26]:  # three times the pool: workers wait for these bodies
                conn.sendall(f"POST /check HTTP/1.1\r\n{whole_head}\r\n".encode())
            r = requests.post(server.url, data=body, headers=signed(body, SECRET), timeout=30)
            assert r.status_code == 200 and r.json() == {"resolution": "COMMIT"}
            assert threading.active_count() <= pool
            sent = [read_to_end(conn) for conn in silent]
            assert threading.active_count() <= pool
        finally:
            for conn in silent:
                conn.close()
    assert sent[:20] + sent[26:] == [b""] * 24
    assert all(answer.startswith(b"HTTP/1.1 400 ") for answer in sent[20:26]), sent[20:26]
    wait_until(lambda: threading.active_count() <= before, timeout=10,
               what="the server's threads to end")


def test_checker_server_closes_the_oldest_waiting_connection_for_a_new_one() -> None:
    with CheckerServer(Ledger(), workers=1, read_timeout=120) as server:
        address = server._server.server_address[:2]
        silent = [socket.create_connection(address, timeout=30)
                  for _ in range(_serving.MAX_WAITING + 10)]
        try:
            r = requests.post(server.url, json=CHECK, timeout=30)
            assert r.status_code == 200 and r.json() == {"resolution": "COMMIT"}
            # the first ten made room for the last ten (long before their read timeout)
            assert [read_to_end(conn) for conn in silent[:10]] == [b""] * 10
        finally:
            for conn in silent:
                conn.close()


def test_checker_server_answers_503_past_its_queue() -> None:
    """One worker busy with a slow check, more checks than its queue holds: the ones past
    it are answered 503 at once (the service asks again later), the others once the
    worker is free."""
    release = threading.Event()

    class Slow:
        def check(self, transaction: dict[str, Any]) -> str:
            release.wait(30)
            return "COMMIT"

    request = (b"POST /check HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json"
               b"\r\nContent-Length: 2\r\n\r\n{}")
    with CheckerServer(Slow(), workers=1, read_timeout=60) as server:
        address = server._server.server_address[:2]
        checks = [socket.create_connection(address, timeout=30)
                  for _ in range(_serving.QUEUED_PER_WORKER + 2)]
        try:
            for conn in checks:
                conn.sendall(request)
            early = select.select(checks, [], [], 30)[0]  # while the checker waits
            refused = [read_to_end(conn) for conn in early]
            release.set()
            statuses = [a[:12] for a in refused + [read_to_end(c) for c in checks if c not in early]]
        finally:
            release.set()
            for conn in checks:
                conn.close()
    assert refused and all(answer.startswith(b"HTTP/1.1 503 ") for answer in refused)
    # the worker took the first before the last came, or not yet: one or two refused
    queued = _serving.QUEUED_PER_WORKER
    assert sorted(statuses) in ([b"HTTP/1.1 200"] * n + [b"HTTP/1.1 503"] * (queued + 2 - n)
                                for n in (queued, queued + 1))


def test_checker_server_checks_its_settings() -> None:
    for settings in ({"workers": 0}, {"read_timeout": 0}):
        with pytest.raises(ValueError):
            CheckerServer(Ledger(), **settings)  # type: ignore[arg-type]
