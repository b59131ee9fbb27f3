"""Real HTTP check-callback servers on 127.0.0.1 for the checker tests (no mocks).

A ``CallbackServer`` records every check it receives and answers with what its
``reply`` function says: a resolution, an HTTP status, garbage, or a hang.
It also notes any moment when two checks of one transaction were in flight at once.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from werkzeug.serving import make_server
from werkzeug.wrappers import Request, Response

from tests.conftest import free_port


@dataclass(frozen=True)
class Delivery:
    """A check as it arrived: its headers and the exact bytes of its body."""

    headers: dict[str, str]
    body: bytes


@dataclass(frozen=True)
class Reply:
    status: int = 200
    body: bytes = b""
    hang: threading.Event | None = None  # block until set (bounded by HANG_LIMIT)
    delay: float = 0.0
    headers: dict[str, str] | None = None  # e.g. a redirect's Location


HANG_LIMIT = 60.0


def answer(resolution: str | None) -> Reply:
    body = {} if resolution is None else {"resolution": resolution}
    return Reply(body=json.dumps(body).encode())


def status(code: int) -> Reply:
    return Reply(status=code, body=b'{"resolution": "COMMIT"}')


GARBAGE = Reply(body=b"<html>certainly not json")


class CallbackServer:
    def __init__(self, reply: Callable[[dict[str, Any]], Reply] | Reply) -> None:
        self.reply = reply if callable(reply) else (lambda _check: reply)
        self.checks: list[dict[str, Any]] = []
        self.deliveries: list[Delivery] = []
        self.overlaps: list[tuple[str, int]] = []
        self._in_flight: dict[str, int] = {}
        self._lock = threading.Lock()
        self.released = threading.Event()  # set on close: no hang outlives the test
        self._server = make_server("127.0.0.1", 0, self._app, threaded=True)
        self.url = f"http://127.0.0.1:{self._server.server_port}/check"
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def _app(self, environ: dict, start_response: Callable) -> Any:
        request = Request(environ)
        raw = request.get_data()
        check = json.loads(raw)
        key = f"{check['producer_group']}/{check['transaction_id']}"
        with self._lock:
            self.checks.append(check)
            self.deliveries.append(Delivery({k.lower(): v for k, v in request.headers.items()},
                                            raw))
            if self._in_flight.get(key):
                self.overlaps.append((key, check["check_times"]))
            self._in_flight[key] = self._in_flight.get(key, 0) + 1
        try:
            reply = self.reply(check)
            if reply.hang is not None:
                deadline = time.monotonic() + HANG_LIMIT
                while not (reply.hang.is_set() or self.released.is_set()) \
                        and time.monotonic() < deadline:
                    reply.hang.wait(0.05)
            if reply.delay:
                time.sleep(reply.delay)
            return Response(reply.body, status=reply.status, headers=reply.headers,
                            mimetype="application/json")(environ, start_response)
        finally:
            with self._lock:
                self._in_flight[key] -= 1

    def numbers(self, transaction_id: str) -> list[int]:
        """The check numbers received for one transaction, in arrival order."""
        with self._lock:
            return [c["check_times"] for c in self.checks
                    if c["transaction_id"] == transaction_id]

    def in_flight(self) -> int:
        """Checks received and not answered yet."""
        with self._lock:
            return sum(self._in_flight.values())

    def received(self, transaction_id: str) -> list[dict[str, Any]]:
        with self._lock:
            return [c for c in self.checks if c["transaction_id"] == transaction_id]

    def delivered(self, transaction_id: str) -> list[Delivery]:
        """The deliveries of one transaction's checks, in arrival order."""
        with self._lock:
            return [d for c, d in zip(self.checks, self.deliveries, strict=True)
                    if c["transaction_id"] == transaction_id]

    def close(self) -> None:
        self.released.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def refused_url() -> str:
    """A URL on which nothing listens: connection refused."""
    return f"http://127.0.0.1:{free_port()}/check"


def wait_until(predicate: Callable[[], Any], timeout: float = 30.0, what: str = "") -> Any:
    """Poll ``predicate`` until it is truthy (bounded); its value."""
    deadline = time.monotonic() + timeout
    value = None
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what or predicate}: last value {value!r}")
