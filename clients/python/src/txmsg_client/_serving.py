"""The HTTP server under ``CheckerServer``: werkzeug's request handling, with a bounded
number of threads whatever the number of connections.

One thread accepts connections and waits for each one's request head, without a thread
per connection; a connection whose head is complete goes to one of a fixed pool of
workers, which reads its body and answers. A connection has ``read_timeout`` seconds from
its acceptance to send its head, and as long again from when a worker takes it to send its
body: a silent, half-open or trickling one is closed then. Connections waiting for their head are at most ``MAX_WAITING`` (the
oldest is closed for a new one), connections with a complete head waiting for a worker at
most ``QUEUED_PER_WORKER`` per worker (past that: 503). File descriptors and threads are
bounded, and a check (its head sent at once) is answered whatever silent connections do.
"""

from __future__ import annotations

import io
import logging
import queue
import selectors
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler

log = logging.getLogger("txmsg_client.callback")

POLL_SECONDS = 0.25  # how soon an idle thread sees close(), and deadline granularity
MAX_WAITING = 256
QUEUED_PER_WORKER = 4
HEAD_BYTES = 64 * 1024  # http.server's longest line; a longer head is the handler's to refuse
BUSY = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\n"
        b"Content-Length: 5\r\nConnection: close\r\n\r\nbusy\n")


@dataclass(eq=False)
class Arrival:
    """An accepted connection, what it sent so far, and until when its reads may wait."""

    connection: socket.socket
    peer: Any
    deadline: float
    head: bytearray = field(default_factory=bytearray)

    def head_complete(self, new: int) -> bool:
        """Whether the head's empty line is in, looking at the last ``new`` bytes only."""
        tail = self.head[max(0, len(self.head) - new - 3):]
        return b"\n\n" in tail or b"\n\r\n" in tail or len(self.head) >= HEAD_BYTES


class PooledWSGIServer(BaseWSGIServer):
    """``app`` on ``host:port`` (see the module's docstring); ``close()`` to stop."""

    multithread = True

    def __init__(self, host: str, port: int, app: Any, *, workers: int, read_timeout: float,
                 name: str) -> None:
        if workers < 1 or read_timeout <= 0:
            raise ValueError("a server needs at least one worker and a positive read timeout")
        super().__init__(host, port, app, handler=_Handler)
        self.read_timeout = read_timeout
        self.socket.setblocking(False)
        self._closing = threading.Event()
        self._ready: queue.Queue[Arrival] = queue.Queue(maxsize=QUEUED_PER_WORKER * workers)
        self._threads = [threading.Thread(target=self._accept, name=f"{name}-accept", daemon=True)]
        self._threads += [threading.Thread(target=self._work, name=f"{name}-{n}", daemon=True)
                          for n in range(workers)]
        for thread in self._threads:
            thread.start()

    def close(self, timeout: float) -> None:
        """Stop accepting; wait up to ``timeout`` seconds for the requests being answered."""
        self._closing.set()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        while not self._ready.empty():
            self._ready.get_nowait().connection.close()
        self.server_close()

    def _accept(self) -> None:
        waiting: dict[socket.socket, Arrival] = {}  # in order of acceptance
        with selectors.DefaultSelector() as selector:
            selector.register(self.socket, selectors.EVENT_READ)
            try:
                while not self._closing.is_set():
                    for key, _ in selector.select(POLL_SECONDS):
                        if key.data is None:
                            self._take(selector, waiting)
                        elif key.data.connection in waiting:  # not closed for a newer one
                            self._read_head(selector, waiting, key.data)
                    now = time.monotonic()
                    late = [a for a in waiting.values() if a.deadline <= now]
                    for arrival in late:
                        _drop(selector, waiting, arrival)
            finally:
                for arrival in list(waiting.values()):
                    _drop(selector, waiting, arrival)

    def _take(self, selector: selectors.BaseSelector, waiting: dict[socket.socket, Arrival]) -> None:
        try:
            connection, peer = self.socket.accept()
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:  # out of file descriptors, say: try again shortly
            log.warning("the check callback cannot accept a connection: %s", exc)
            self._closing.wait(POLL_SECONDS)
            return
        connection.setblocking(False)
        if len(waiting) >= MAX_WAITING:
            _drop(selector, waiting, next(iter(waiting.values())))
        waiting[connection] = Arrival(connection, peer, time.monotonic() + self.read_timeout)
        selector.register(connection, selectors.EVENT_READ, waiting[connection])

    def _read_head(self, selector: selectors.BaseSelector, waiting: dict[socket.socket, Arrival],
                   arrival: Arrival) -> None:
        try:
            data = arrival.connection.recv(HEAD_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:  # gone before its request was complete
            _drop(selector, waiting, arrival)
            return
        arrival.head += data
        if not arrival.head_complete(len(data)):
            return
        selector.unregister(arrival.connection)
        del waiting[arrival.connection]
        try:
            self._ready.put_nowait(arrival)
        except queue.Full:
            try:
                arrival.connection.send(BUSY)
            except OSError:
                pass
            arrival.connection.close()

    def _work(self) -> None:
        while not self._closing.is_set():
            try:
                arrival = self._ready.get(timeout=POLL_SECONDS)
            except queue.Empty:
                continue
            arrival.deadline = time.monotonic() + self.read_timeout  # for its body
            connection = arrival.connection
            connection.settimeout(self.read_timeout)  # blocking again, and for its writes
            try:
                self.finish_request(arrival, arrival.peer)  # type: ignore[arg-type]
            except Exception:  # noqa: BLE001 - reported by handle_error; the worker goes on
                self.handle_error(connection, arrival.peer)
            finally:
                self.shutdown_request(connection)


def _drop(selector: selectors.BaseSelector, waiting: dict[socket.socket, Arrival],
          arrival: Arrival) -> None:
    selector.unregister(arrival.connection)
    del waiting[arrival.connection]
    arrival.connection.close()


class _Handler(WSGIRequestHandler):
    """One connection, given as its ``Arrival``: reads what the acceptor read first, then
    its socket, until the arrival's deadline."""

    server: PooledWSGIServer

    def setup(self) -> None:
        arrival: Arrival = self.request
        self.request = arrival.connection
        super().setup()
        self.rfile.close()  # the plain reader: its reads had no deadline
        self.rfile = io.BufferedReader(_DeadlineReader(arrival, self.server.read_timeout))

    def log_request(self, *args: Any, **kwargs: Any) -> None:
        pass  # one access-log line per check is noise in the producer's logs

    def log_error(self, format: str, *args: Any) -> None:
        log.info("check callback connection from %s: " + format, self.address_string(), *args)


class _DeadlineReader(io.RawIOBase):
    """An arrival's head as read by the acceptor, then its socket's reads, each waiting at
    most until the arrival's deadline (writes keep waiting at most ``write_timeout``)."""

    def __init__(self, arrival: Arrival, write_timeout: float) -> None:
        self._arrival = arrival
        self._first = memoryview(bytes(arrival.head))
        self._write_timeout = write_timeout

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self._first:
            size = min(len(buffer), len(self._first))
            buffer[:size] = self._first[:size]
            self._first = self._first[size:]
            return size
        left = self._arrival.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the request did not arrive within the read timeout")
        sock = self._arrival.connection
        sock.settimeout(left)
        try:
            return sock.recv_into(buffer)
        finally:
            sock.settimeout(self._write_timeout)
