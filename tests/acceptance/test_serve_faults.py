"""`txmsg serve` against slow or malformed clients, a database that is down, and SIGTERM:
a real process, real sockets."""

from __future__ import annotations

import signal
import socket
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest
import requests

from app.api.asgi import MAX_HEAD_BYTES, MAX_TARGET_BYTES
from tests.acceptance.conftest import Served, run_txmsg, start_serve
from tests.conftest import free_port

GROUP = "/v1/producer-groups/shop"
SEND = f"{GROUP}/transactions"
CALLBACK = {"check_urls": ["http://127.0.0.1:9/check"]}


class Exchange:
    """One raw HTTP/1.1 connection to the server."""

    def __init__(self, served: Served) -> None:
        host, port = served.url.removeprefix("http://").split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=60)

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def answer(self) -> tuple[int, dict[str, str], bytes]:
        """The status, headers and body of the next answer (read to its Content-Length)."""
        raw = b""
        while b"\r\n\r\n" not in raw:
            chunk = self.sock.recv(65536)
            assert chunk, f"connection closed before an answer: {raw!r}"
            raw += chunk
        head, _, body = raw.partition(b"\r\n\r\n")
        status_line, *lines = head.decode("latin1").split("\r\n")
        headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
        while len(body) < int(headers.get("content-length", 0)):
            chunk = self.sock.recv(65536)
            assert chunk, "connection closed inside an answer"
            body += chunk
        return int(status_line.split()[1]), headers, body

    def closed_by_server(self) -> bool:
        """Whether the server closes the connection (rather than the socket timing out)."""
        try:
            return self.sock.recv(1) == b""
        except TimeoutError:
            return False

    def close(self) -> None:
        self.sock.close()


def request_head(method: str, path: str, *headers: str) -> bytes:
    return "\r\n".join([f"{method} {path} HTTP/1.1", "Host: test", *headers, "", ""]).encode()


def problem_code(headers: dict[str, str], body: bytes) -> str:
    assert headers["content-type"] == "application/problem+json", (headers, body)
    return str(orjson.loads(body)["code"])


def server_has_read_everything(served: Served, connections: int) -> bool:
    """Whether ``connections`` connections to the server are open and the server has read
    every byte sent on them (nothing waits in their receive queues): their requests are
    in the server's hands, not in the kernel's."""
    port = served.url.rsplit(":", 1)[1]
    open_ = unread = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, state, queues = fields[1], fields[3], fields[4]
        if int(local.split(":")[1], 16) == int(port) and state == "01":  # ESTABLISHED
            open_ += 1
            unread += int(queues.split(":")[1], 16)
    return open_ >= connections and unread == 0


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not reached: {what}"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def slow_guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A server with few Flask threads and short deadlines, to reach them cheaply."""
    served = start_serve({"TXMSG_WEB_THREADS": "4", "TXMSG_REQUEST_BODY_TIMEOUT_SECONDS": "3",
                          "TXMSG_HTTP_HEADER_TIMEOUT_SECONDS": "1"},
                         tmp_path_factory.mktemp("slow"), "--no-checker")
    assert requests.put(served.url + GROUP, json=CALLBACK, timeout=30).status_code == 200
    yield served
    served.stop()


def test_slow_bodies_hold_no_thread_and_are_refused_with_408(slow_guarded: Served) -> None:
    """Many more slow bodies than Flask threads (a byte, then nothing): health, reads and
    registrations still answer, and each slow body gets a 408 problem."""
    url = slow_guarded.url
    slow = []
    for i in range(16):
        method, path = ("PUT", f"/v1/producer-groups/slow{i}") if i % 4 else ("POST", SEND)
        exchange = Exchange(slow_guarded)
        exchange.send(request_head(method, path, "Content-Type: application/json",
                                   "Content-Length: 100") + b"{")
        slow.append(exchange)
    try:
        wait_for(lambda: server_has_read_everything(slow_guarded, len(slow)),
                 "the slow requests reached the server")
        with requests.Session() as s:
            assert s.get(f"{url}/healthz", timeout=10).json() == {"status": "ok"}
            assert s.get(f"{url}/readyz", timeout=10).status_code == 200
            assert s.get(f"{url}/v1/topics/t/messages", timeout=10).status_code == 200
            assert s.put(f"{url}/v1/producer-groups/fast", json=CALLBACK,
                         timeout=10).status_code == 200
            assert s.post(url + SEND, json={"topic": "t", "body": "b"},
                          timeout=10).status_code == 201
        for exchange in slow:
            status, headers, body = exchange.answer()
            assert (status, problem_code(headers, body)) == (408, "request_timeout")
    finally:
        for exchange in slow:
            exchange.close()
    assert requests.get(f"{url}/v1/producer-groups/slow1", timeout=10).status_code == 404


def test_an_idle_connection_is_closed(slow_guarded: Served) -> None:
    exchange = Exchange(slow_guarded)
    try:
        exchange.send(request_head("GET", "/healthz"))
        assert exchange.answer()[0] == 200
        exchange.sock.settimeout(20)  # far above the 1 s header timeout
        assert exchange.closed_by_server()
    finally:
        exchange.close()


@pytest.mark.parametrize(("request_bytes", "status", "code"), [
    (request_head("GET", "/v1/topics/t/messages?pad=" + "a" * MAX_TARGET_BYTES),
     414, "uri_too_long"),
    (request_head("GET", "/v1/topics/t/messages", "X-Pad: " + "v" * MAX_HEAD_BYTES),
     431, "request_header_fields_too_large"),
    (request_head("POST", SEND, "Transfer-Encoding: chunked") + b"zz\r\n{}\r\n0\r\n\r\n",
     400, "incomplete_body"),
    (request_head("PUT", "/v1/producer-groups/g", "Transfer-Encoding: chunked")
     + b"2\r\n{}\r\nnot-hex\r\n", 400, "incomplete_body"),
], ids=["long-target", "large-head", "bad-chunk-send", "bad-chunk-flask"])
def test_refusals_below_the_servers_limits_are_problem_json(
        slow_guarded: Served, request_bytes: bytes, status: int, code: str) -> None:
    exchange = Exchange(slow_guarded)
    try:
        exchange.send(request_bytes)
        got, headers, body = exchange.answer()
        assert (got, problem_code(headers, body)) == (status, code)
    finally:
        exchange.close()


def test_a_deletion_answers_204_without_a_content_type(slow_guarded: Served) -> None:
    url = slow_guarded.url
    assert requests.put(f"{url}/v1/producer-groups/gone", json=CALLBACK,
                        timeout=10).status_code == 200
    r = requests.delete(f"{url}/v1/producer-groups/gone", timeout=10)
    assert r.status_code == 204 and r.content == b""
    assert "Content-Type" not in r.headers


def _locked(database: Path) -> sqlite3.Connection:
    """A connection holding SQLite's write lock: every write waits behind it."""
    conn = sqlite3.connect(database, isolation_level=None, check_same_thread=False)
    conn.execute("BEGIN IMMEDIATE")
    return conn


def _sent(served: Served, method: str, path: str, document: object) -> Exchange:
    """A connection on which a whole JSON request has been written."""
    body = orjson.dumps(document)
    exchange = Exchange(served)
    exchange.send(request_head(method, path, "Content-Type: application/json",
                               f"Content-Length: {len(body)}") + body)
    return exchange


def test_sigterm_lets_requests_in_flight_finish_then_exits(tmp_path: Path) -> None:
    """Sends and registrations waiting on the database, and a send whose body is half
    sent, when SIGTERM comes: all get their real answers, then the process exits."""
    served = start_serve({"TXMSG_SQLITE_BUSY_TIMEOUT_MS": "60000"}, tmp_path, "--no-checker")
    try:
        url = served.url
        assert requests.put(url + GROUP, json=CALLBACK, timeout=30).status_code == 200
        lock = _locked(tmp_path / "var" / "txmsg.db")
        # every request is written whole before SIGTERM, by this thread: a client thread
        # could still be between connect() and send() when the signal comes, and a
        # connection that has sent nothing yet is one a server may close
        waiting = [_sent(served, "POST", SEND, {"transaction_id": f"t{i}", "topic": "t",
                                                "body": str(i)}) for i in range(6)]
        waiting += [_sent(served, "PUT", f"/v1/producer-groups/g{i}", CALLBACK)
                    for i in range(2)]
        half = Exchange(served)
        body = orjson.dumps({"transaction_id": "half", "topic": "t", "body": "h"})
        half.send(request_head("POST", SEND, f"Content-Length: {len(body)}") + body[:10])
        wait_for(lambda: server_has_read_everything(served, len(waiting) + 1),
                 "the requests reached the server")

        served.proc.send_signal(signal.SIGTERM)
        time.sleep(1)  # shutting down while they wait
        half.send(body[10:])
        lock.rollback()
        lock.close()
        assert sorted(exchange.answer()[0] for exchange in waiting) == [200, 200] + [201] * 6
        assert half.answer()[0] == 201
        for exchange in waiting:
            exchange.close()
        half.close()
        assert served.proc.wait(timeout=30) == 0
    finally:
        served.stop()


def test_sigterm_stops_within_the_bound_whatever_is_in_flight(tmp_path: Path) -> None:
    """A send that cannot finish (the database stays locked) does not hold the process
    past TXMSG_SHUTDOWN_TIMEOUT_SECONDS."""
    served = start_serve({"TXMSG_SQLITE_BUSY_TIMEOUT_MS": "120000",
                          "TXMSG_SHUTDOWN_TIMEOUT_SECONDS": "2"}, tmp_path, "--no-checker")
    lock = None
    try:
        assert requests.put(served.url + GROUP, json=CALLBACK, timeout=30).status_code == 200
        lock = _locked(tmp_path / "var" / "txmsg.db")
        stuck = Exchange(served)
        body = orjson.dumps({"topic": "t", "body": "stuck"})
        stuck.send(request_head("POST", SEND, f"Content-Length: {len(body)}") + body)
        wait_for(lambda: server_has_read_everything(served, 1), "the send reached the server")
        served.proc.send_signal(signal.SIGTERM)
        served.proc.wait(timeout=30)  # the lock would hold it for 120 s
        assert "refused to gracefully stop" in served.log.read_text()
        stuck.close()
    finally:
        if lock is not None:
            lock.close()
        served.stop()


def test_serve_with_the_database_down_retries_then_fails_in_a_few_lines(
        tmp_path: Path) -> None:
    closed = f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/txmsg"
    done = run_txmsg(["serve", "--port", str(free_port()), "--no-checker"],
                     {"TXMSG_DATABASE_URL": closed, "TXMSG_STARTUP_DATABASE_WAIT_SECONDS": "2"},
                     tmp_path, timeout=60)
    assert done.returncode != 0
    lines = (done.stdout + done.stderr).strip().splitlines()
    assert "Traceback" not in done.stderr
    assert 2 <= len(lines) <= 10, lines
    assert all(len(line) < 300 for line in lines), lines
    assert all("unreachable" in line and "Connection refused" in line for line in lines), lines
    assert "retrying in" in lines[0]
    assert lines[-1].startswith("Error: database") and "giving up" in lines[-1]
