"""What a check callback endpoint does whatever serves it (``callback``'s WSGI app and
``CheckerServer``, ``aio``'s ASGI app): admit the request from its head, read its body
(bounded), verify the Standard Webhooks signature, answer. Sans I/O: each server reads and
writes; the decisions are here, once."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from txmsg_client.resolution import Resolution

log = logging.getLogger("txmsg_client.callback")

SIGNATURE_HEADERS = ("webhook-id", "webhook-timestamp", "webhook-signature")
SigningSecrets = str | Iterable[str] | None
Answer = tuple[int, str, bytes]  # status, content type, body
# The contract's limit for every request but a send. A check carries its transaction's
# messages with their bodies: a producer whose transactions carry more raises
# ``max_body_bytes`` (else their checks answer 413 and count as unanswered).
MAX_CHECK_BYTES = 1024 * 1024


class Verifier:
    """The group's signing secrets (one ``whsec_…`` secret, or several: any of them
    verifies, handy while the producer moves to a rotated secret); none: nothing is
    verified."""

    def __init__(self, secrets: SigningSecrets = None) -> None:
        given = (secrets,) if isinstance(secrets, str) else tuple(secrets or ())
        self.webhooks = tuple(Webhook(s) for s in given)  # refuses an empty secret
        self.secrets = given

    def refusal(self, body: bytes, headers: Mapping[str, str], peer: object) -> str | None:
        """Why the check's signature does not verify, or None (verified, or no secret)."""
        if not self.webhooks:
            return None
        signed = {name: headers[name] for name in SIGNATURE_HEADERS if name in headers}
        reason = "no signature"
        for webhook in self.webhooks:
            try:
                webhook.verify(body, signed, json_parse=False)
                return None
            except (WebhookVerificationError, ValueError) as exc:  # ValueError: malformed
                reason = str(exc) or type(exc).__name__
        log.warning("refused a check callback (%s) from %s", reason, peer)
        return f"the check's signature does not verify: {reason}"


def admission(method: str, headers: Mapping[str, str], verifier: Verifier, limit: int,
              peer: object) -> Answer | None:
    """The refusal to answer a check request from its head alone (``headers`` named in
    lower case), its body unread; None: go on and read at most ``limit`` bytes of it.
    With a secret, a request without the signature headers is refused before it costs
    more than its head, and so is a body declared longer than ``limit``."""
    if method != "POST":
        return problem(405, "method_not_allowed", "the check callback takes POST")
    if verifier.webhooks and not all(name in headers for name in SIGNATURE_HEADERS):
        log.warning("refused a check callback (no signature headers) from %s", peer)
        return problem(401, "invalid_signature",
                       "the check's signature does not verify: no signature headers")
    try:
        declared = int(headers.get("content-length", ""))
    except ValueError:  # none (chunked) or unreadable: the bounded read decides
        return None
    return too_large(limit) if declared > limit else None


def read_check(body: bytes, headers: Mapping[str, str], peer: object,
               verifier: Verifier) -> dict[str, Any] | Answer:
    """The check's transaction, or the refusal to answer with (after ``admission``)."""
    refused = verifier.refusal(body, headers, peer)
    if refused is not None:
        return problem(401, "invalid_signature", refused)
    try:
        transaction = json.loads(body)
    except ValueError:
        transaction = None
    if not isinstance(transaction, dict):
        return problem(400, "invalid_json", "the check body must be a JSON object")
    return transaction


def answer(resolution: Resolution | str) -> Answer:
    return 200, "application/json", json.dumps(
        {"resolution": Resolution(resolution).value}).encode()


def checker_failed(transaction: Mapping[str, Any], exc: Exception) -> Answer:
    """The producer's checker raised: 500 (the service counts the check as unanswered and
    asks the group's next URL)."""
    log.error("checker failed on transaction %s", transaction.get("transaction_id"),
              exc_info=exc)
    return problem(500, "checker_error", f"{type(exc).__name__}: {exc}")


def too_large(limit: int) -> Answer:
    return problem(413, "payload_too_large", f"a check body is at most {limit} bytes")


def problem(status: int, code: str, detail: str) -> Answer:
    body = {"type": f"urn:txmsg:problem:{code}", "title": code.replace("_", " "),
            "status": status, "detail": detail, "code": code}
    return status, "application/problem+json", json.dumps(body).encode()
