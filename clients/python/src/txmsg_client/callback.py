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
import threading
from typing import Any, Self

try:
    from werkzeug.exceptions import RequestEntityTooLarge
    from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, make_server
    from werkzeug.wrappers import Request, Response

    from txmsg_client._checks import (
        MAX_CHECK_BYTES,
        SIGNATURE_HEADERS,
        Answer,
        SigningSecrets,
        Verifier,
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
        request.max_content_length = self.max_body_bytes
        try:
            body = request.get_data()
        except RequestEntityTooLarge:
            return _response(too_large(self.max_body_bytes))
        check = read_check(request.method, body, headers, request.remote_addr, self._verifier)
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

class _QuietHandler(WSGIRequestHandler):
    def log_request(self, *args: Any, **kwargs: Any) -> None:
        pass  # one access-log line per check is noise in the producer's logs


class CheckerServer:
    """``checker_app`` on a real socket in a background thread (``url`` to register).

    ``signing_secret`` may be given here or set once known (the registration returns it).
    """

    def __init__(self, checker: TransactionChecker, host: str = "127.0.0.1", port: int = 0,
                 path: str = "/check", signing_secret: SigningSecrets = None) -> None:
        self.app = checker_app(checker, signing_secret)
        self._server: BaseWSGIServer = make_server(host, port, self.app, threaded=True,
                                                   request_handler=_QuietHandler)
        self.url = f"http://{host}:{self._server.server_port}{path}"
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name="txmsg-checker-callback", daemon=True)
        self._thread.start()

    @property
    def signing_secret(self) -> tuple[str, ...]:
        return self.app.signing_secret

    @signing_secret.setter
    def signing_secret(self, secrets: SigningSecrets) -> None:
        self.app.signing_secret = secrets

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
