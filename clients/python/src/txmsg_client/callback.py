"""The check callback endpoint: a producer's ``TransactionChecker`` served over HTTP.

Needs werkzeug, the ``[callback]`` extra: ``pip install 'txmsg-client[callback]'``.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import Any, Self

try:
    from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, make_server
    from werkzeug.wrappers import Request, Response
except ImportError as exc:
    raise ImportError("txmsg_client.callback needs werkzeug: "
                      "pip install 'txmsg-client[callback]'") from exc

from txmsg_client.resolution import Resolution, TransactionChecker

log = logging.getLogger(__name__)


def checker_app(checker: TransactionChecker) -> Callable[..., Any]:
    """A WSGI app serving ``checker`` as the check callback: POST → ``{"resolution": ...}``.

    A body that is not a JSON object answers 400; an exception in the checker answers
    500 (the service counts the check as unanswered and asks the group's next URL).
    """

    @Request.application
    def app(request: Request) -> Response:
        if request.method != "POST":
            return _problem(405, "method_not_allowed", "the check callback takes POST")
        try:
            transaction = json.loads(request.get_data())
        except ValueError:
            transaction = None
        if not isinstance(transaction, dict):
            return _problem(400, "invalid_json", "the check body must be a JSON object")
        try:
            resolution = Resolution(checker.check(transaction))
        except Exception as exc:  # the producer's code: answer 500, don't crash
            log.exception("checker failed on transaction %s", transaction.get("transaction_id"))
            return _problem(500, "checker_error", f"{type(exc).__name__}: {exc}")
        return Response(json.dumps({"resolution": resolution.value}),
                        mimetype="application/json")

    return app


def _problem(status: int, code: str, detail: str) -> Response:
    body = {"type": f"urn:txmsg:problem:{code}", "title": code.replace("_", " "),
            "status": status, "detail": detail, "code": code}
    return Response(json.dumps(body), status=status, mimetype="application/problem+json")


class _QuietHandler(WSGIRequestHandler):
    def log_request(self, *args: Any, **kwargs: Any) -> None:
        pass  # one access-log line per check is noise in the producer's logs


class CheckerServer:
    """``checker_app`` on a real socket in a background thread (``url`` to register)."""

    def __init__(self, checker: TransactionChecker, host: str = "127.0.0.1", port: int = 0,
                 path: str = "/check") -> None:
        self._server: BaseWSGIServer = make_server(host, port, checker_app(checker),
                                                   threaded=True, request_handler=_QuietHandler)
        self.url = f"http://{host}:{self._server.server_port}{path}"
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name="txmsg-checker-callback", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
