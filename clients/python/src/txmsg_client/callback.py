"""The check callback endpoint: a producer's ``TransactionChecker`` served over HTTP.

Needs werkzeug and standardwebhooks, the ``[callback]`` extra:
``pip install 'txmsg-client[callback]'``.

Given the producer group's signing secret (``signing_secret`` in the registration), the
endpoint verifies each check the Standard Webhooks way, with the ``standardwebhooks``
package (the specification's own implementation, pure Python, no dependencies): a
missing or wrong signature, or a ``webhook-timestamp`` more than 5 minutes from now,
answers 401 and the checker is not asked. Without a secret, nothing is verified.
"""

from __future__ import annotations

import io
import logging
import socket
import threading
import time
from typing import Any, Self

try:
    from werkzeug.exceptions import RequestEntityTooLarge
    from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler
    from werkzeug.wrappers import Request, Response

    from txmsg_client._checks import (
        MAX_CHECK_BYTES,
        SIGNATURE_HEADERS,
        Answer,
        SigningSecrets,
        Verifier,
        admission,
        answer,
        checker_failed,
        read_check,
        too_large,
    )
except ImportError as exc:
    raise ImportError("txmsg_client.callback needs werkzeug and standardwebhooks: "
                      "pip install 'txmsg-client[callback]'") from exc

from txmsg_client.resolution import TransactionChecker

log = logging.getLogger(__name__)
_POLL_SECONDS = 0.25

__all__ = ["SIGNATURE_HEADERS", "CheckerApp", "CheckerServer", "SigningSecrets", "checker_app"]


class CheckerApp:
    """A WSGI app serving ``checker`` as the check callback: POST → ``{"resolution": ...}``.

    ``signing_secret`` (one ``whsec_…`` secret, or several: any of them verifies, handy
    while the producer moves to a rotated secret) may be set at any time. A check whose
    signature does not verify answers 401; a body that is not a JSON object answers 400;
    an exception in the checker answers 500 (the service counts the check as unanswered
    and asks the group's next URL).
    """

    def __init__(self, checker: TransactionChecker, signing_secret: SigningSecrets = None, *,
                 max_body_bytes: int = MAX_CHECK_BYTES) -> None:
        self.checker = checker
        self._verifier = Verifier(signing_secret)
        self.max_body_bytes = max_body_bytes  # past it: 413, the checker is not asked

    @property
    def signing_secret(self) -> tuple[str, ...]:
        return self._verifier.secrets

    @signing_secret.setter
    def signing_secret(self, secrets: SigningSecrets) -> None:
        self._verifier = Verifier(secrets)

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        return self._answer(Request(environ))(environ, start_response)

    def _answer(self, request: Request) -> Response:
        headers = {name.lower(): value for name, value in request.headers.items()}
        refused = admission(request.method, headers, self._verifier, self.max_body_bytes,
                            request.remote_addr)
        if refused is not None:
            return _response(refused)
        # werkzeug cuts a streamed (chunked) body at the maximum without a word: one byte
        # more tells a body past the limit from one at it
        request.max_content_length = self.max_body_bytes + 1
        try:
            body = request.get_data()
        except RequestEntityTooLarge:
            body = None
        if body is None or len(body) > self.max_body_bytes:
            return _response(too_large(self.max_body_bytes))
        check = read_check(body, headers, request.remote_addr, self._verifier)
        if not isinstance(check, dict):
            return _response(check)
        try:
            return _response(answer(self.checker.check(check)))
        except Exception as exc:  # noqa: BLE001 - the producer's code: logged, answered 500
            return _response(checker_failed(check, exc))


def checker_app(checker: TransactionChecker, signing_secret: SigningSecrets = None, *,
                max_body_bytes: int = MAX_CHECK_BYTES) -> CheckerApp:
    """``checker`` as a WSGI check callback app (see ``CheckerApp``)."""
    return CheckerApp(checker, signing_secret, max_body_bytes=max_body_bytes)


def _response(done: Answer) -> Response:
    status, content_type, body = done
    return Response(body, status=status, content_type=content_type)

class _Handler(WSGIRequestHandler):
    """One connection of a ``CheckerServer``: its request, head and body, must arrive
    within the server's ``read_timeout`` of its acceptance, else it is closed (a silent,
    half-open or trickling client frees its worker)."""

    server: _PooledServer

    def setup(self) -> None:
        super().setup()
        self.rfile.close()  # the plain reader: its socket's reads had no deadline
        deadline = time.monotonic() + self.server.read_timeout
        self.rfile = io.BufferedReader(_DeadlineReader(self.connection, deadline,
                                                       self.server.read_timeout))

    def log_request(self, *args: Any, **kwargs: Any) -> None:
        pass  # one access-log line per check is noise in the producer's logs


class _DeadlineReader(io.RawIOBase):
    """A socket's reads, each waiting at most until ``deadline``; writes keep waiting at
    most ``write_timeout`` each."""

    def __init__(self, sock: socket.socket, deadline: float, write_timeout: float) -> None:
        self._sock = sock
        self._deadline = deadline
        self._write_timeout = write_timeout

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the request did not arrive within the read timeout")
        self._sock.settimeout(left)
        try:
            return self._sock.recv_into(buffer)
        finally:
            self._sock.settimeout(self._write_timeout)


class _PooledServer(BaseWSGIServer):
    """werkzeug's server with a fixed pool of ``workers`` threads, each accepting and
    serving one connection at a time: connections past the pool wait in the listen
    backlog (its threads do not grow with them)."""

    multithread = True

    def __init__(self, host: str, port: int, app: CheckerApp, *, workers: int,
                 read_timeout: float) -> None:
        if workers < 1 or read_timeout <= 0:
            raise ValueError("a CheckerServer needs at least one worker and a read timeout")
        super().__init__(host, port, app, handler=_Handler)
        self.read_timeout = read_timeout
        self.socket.settimeout(_POLL_SECONDS)  # how soon an idle worker sees close()
        self._closing = threading.Event()
        self._workers = [threading.Thread(target=self._work, name=f"txmsg-checker-callback-{n}",
                                          daemon=True) for n in range(workers)]
        for worker in self._workers:
            worker.start()

    def _work(self) -> None:
        while not self._closing.is_set():
            try:
                connection, peer = self.socket.accept()
            except TimeoutError:
                continue
            except OSError as exc:  # out of file descriptors, say: try again shortly
                if not self._closing.wait(_POLL_SECONDS):
                    log.warning("the check callback cannot accept a connection: %s", exc)
                continue
            connection.settimeout(self.read_timeout)
            try:
                self.finish_request(connection, peer)
            except Exception:  # noqa: BLE001 - logged by werkzeug; the worker goes on
                self.handle_error(connection, peer)
            finally:
                self.shutdown_request(connection)

    def close(self, timeout: float) -> None:
        """Stop accepting; wait up to ``timeout`` seconds for the checks being answered."""
        self._closing.set()
        deadline = time.monotonic() + timeout
        for worker in self._workers:
            worker.join(max(0.0, deadline - time.monotonic()))
        self.server_close()


class CheckerServer:
    """``checker_app`` on a real socket, served by a fixed pool of ``workers`` threads
    (``url`` to register).

    A connection must send its request, head and body, within ``read_timeout`` seconds,
    else it is closed: silent or half-open connections tie up a worker that long at most,
    and connections past the pool wait in the listen backlog. ``signing_secret`` may be
    given here or set once known (the registration returns it); ``max_body_bytes`` (1 MiB)
    bounds a check's body (raise it, and ``read_timeout`` with it, for transactions
    carrying more).
    """

    def __init__(self, checker: TransactionChecker, host: str = "127.0.0.1", port: int = 0,
                 path: str = "/check", signing_secret: SigningSecrets = None, *,
                 workers: int = 8, read_timeout: float = 5.0,
                 max_body_bytes: int = MAX_CHECK_BYTES) -> None:
        self.app = checker_app(checker, signing_secret, max_body_bytes=max_body_bytes)
        self._server = _PooledServer(host, port, self.app, workers=workers,
                                     read_timeout=read_timeout)
        self.url = f"http://{host}:{self._server.server_port}{path}"

    @property
    def signing_secret(self) -> tuple[str, ...]:
        return self.app.signing_secret

    @signing_secret.setter
    def signing_secret(self, secrets: SigningSecrets) -> None:
        self.app.signing_secret = secrets

    def close(self) -> None:
        self._server.close(timeout=5)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
