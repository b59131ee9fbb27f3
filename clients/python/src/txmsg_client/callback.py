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

import logging
from typing import Any, Self

try:
    from werkzeug.exceptions import ClientDisconnected, RequestEntityTooLarge
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
        problem,
        read_check,
        too_large,
    )
    from txmsg_client._serving import PooledWSGIServer
except ImportError as exc:
    raise ImportError("txmsg_client.callback needs werkzeug and standardwebhooks: "
                      "pip install 'txmsg-client[callback]'") from exc

from txmsg_client.resolution import TransactionChecker

log = logging.getLogger(__name__)

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
        except ClientDisconnected:  # gone, or its body did not arrive within a read timeout
            return _response(problem(400, "incomplete_body",
                                     "the check's body did not arrive in full"))
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


class CheckerServer:
    """``checker_app`` on a real socket (``url`` to register), served by one thread that
    accepts connections and a fixed pool of ``workers`` threads that answer them.

    A connection must send its request's head within ``read_timeout`` seconds of its
    acceptance, and its body within as long again once a worker takes it, else it is
    closed; waiting for a head costs no worker, so silent or half-open connections do not
    hold checks back (``txmsg_client._serving``).
    ``signing_secret`` may be given here or set once known (the registration returns it);
    ``max_body_bytes`` (1 MiB) bounds a check's body (raise it, and ``read_timeout`` with
    it, for transactions carrying more).
    """

    def __init__(self, checker: TransactionChecker, host: str = "127.0.0.1", port: int = 0,
                 path: str = "/check", signing_secret: SigningSecrets = None, *,
                 workers: int = 8, read_timeout: float = 5.0,
                 max_body_bytes: int = MAX_CHECK_BYTES) -> None:
        self.app = checker_app(checker, signing_secret, max_body_bytes=max_body_bytes)
        self._server = PooledWSGIServer(host, port, self.app, workers=workers,
                                        read_timeout=read_timeout,
                                        name="txmsg-checker-callback")
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
