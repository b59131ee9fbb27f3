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

import json
import logging
import threading
from collections.abc import Iterable
from typing import Any, Self

try:
    from standardwebhooks.webhooks import Webhook, WebhookVerificationError
    from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, make_server
    from werkzeug.wrappers import Request, Response
except ImportError as exc:
    raise ImportError("txmsg_client.callback needs werkzeug and standardwebhooks: "
                      "pip install 'txmsg-client[callback]'") from exc

from txmsg_client.resolution import Resolution, TransactionChecker

log = logging.getLogger(__name__)

SIGNATURE_HEADERS = ("webhook-id", "webhook-timestamp", "webhook-signature")
SigningSecrets = str | Iterable[str] | None


class CheckerApp:
    """A WSGI app serving ``checker`` as the check callback: POST → ``{"resolution": ...}``.

    ``signing_secret`` (one ``whsec_…`` secret, or several: any of them verifies, handy
    while the producer moves to a rotated secret) may be set at any time. A check whose
    signature does not verify answers 401; a body that is not a JSON object answers 400;
    an exception in the checker answers 500 (the service counts the check as unanswered
    and asks the group's next URL).
    """

    def __init__(self, checker: TransactionChecker, signing_secret: SigningSecrets = None) -> None:
        self.checker = checker
        self._verifiers: tuple[Webhook, ...] = ()
        self.signing_secret = signing_secret

    @property
    def signing_secret(self) -> tuple[str, ...]:
        return self._secrets

    @signing_secret.setter
    def signing_secret(self, secrets: SigningSecrets) -> None:
        given = (secrets,) if isinstance(secrets, str) else tuple(secrets or ())
        self._verifiers = tuple(Webhook(s) for s in given)  # refuses an empty secret
        self._secrets = given

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        return self._answer(Request(environ))(environ, start_response)

    def _answer(self, request: Request) -> Response:
        if request.method != "POST":
            return _problem(405, "method_not_allowed", "the check callback takes POST")
        body = request.get_data()
        refused = self._refusal(body, request)
        if refused is not None:
            return _problem(401, "invalid_signature", refused)
        try:
            transaction = json.loads(body)
        except ValueError:
            transaction = None
        if not isinstance(transaction, dict):
            return _problem(400, "invalid_json", "the check body must be a JSON object")
        try:
            resolution = Resolution(self.checker.check(transaction))
        except Exception as exc:  # the producer's code: answer 500, don't crash
            log.exception("checker failed on transaction %s", transaction.get("transaction_id"))
            return _problem(500, "checker_error", f"{type(exc).__name__}: {exc}")
        return Response(json.dumps({"resolution": resolution.value}),
                        mimetype="application/json")

    def _refusal(self, body: bytes, request: Request) -> str | None:
        """Why the check's signature does not verify, or None (verified, or no secret)."""
        verifiers = self._verifiers
        if not verifiers:
            return None
        headers = {name: request.headers[name] for name in SIGNATURE_HEADERS
                   if name in request.headers}
        reason = "no signature"
        for verifier in verifiers:
            try:
                verifier.verify(body, headers, json_parse=False)
                return None
            except (WebhookVerificationError, ValueError) as exc:  # ValueError: malformed
                reason = str(exc) or type(exc).__name__
        log.warning("refused a check callback (%s) from %s", reason, request.remote_addr)
        return f"the check's signature does not verify: {reason}"


def checker_app(checker: TransactionChecker, signing_secret: SigningSecrets = None) -> CheckerApp:
    """``checker`` as a WSGI check callback app (see ``CheckerApp``)."""
    return CheckerApp(checker, signing_secret)


def _problem(status: int, code: str, detail: str) -> Response:
    body = {"type": f"urn:txmsg:problem:{code}", "title": code.replace("_", " "),
            "status": status, "detail": detail, "code": code}
    return Response(json.dumps(body), status=status, mimetype="application/problem+json")


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
