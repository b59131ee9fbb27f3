"""Producer SDK: send half messages, commit or roll back, and answer the service's checks.

RocketMQ's transactional producer, over HTTP::

    producer = Producer("http://127.0.0.1:8080", "orders-svc")
    producer.register(["http://10.0.0.5:9000/check"])
    result = producer.send_in_transaction(
        message("orders", '{"id": 42}'), lambda sent: place_order(sent["transaction_id"]))

``local_transaction`` returns a ``Resolution``: COMMIT and ROLLBACK are applied at once;
UNKNOWN (or an exception, which is raised again) leaves the transaction to the check,
where the service asks the group's callback, served by ``checker_app(checker)``.
This module depends on ``requests`` and ``werkzeug`` only, never on the service's code.
"""

from __future__ import annotations

import base64
import json
import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol, Self
from urllib.parse import quote

import requests
from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, make_server
from werkzeug.wrappers import Request, Response

log = logging.getLogger(__name__)

Message = Mapping[str, Any]


class Resolution(StrEnum):
    """A producer's answer about one transaction (RocketMQ's LocalTransactionState)."""

    COMMIT = "COMMIT"
    ROLLBACK = "ROLLBACK"
    UNKNOWN = "UNKNOWN"


class TransactionChecker(Protocol):
    """Answers the service's check of an unresolved transaction.

    ``transaction`` is the check callback body: ``producer_group``, ``transaction_id``,
    ``check_times`` (1 for the first check), ``created_at`` and ``messages``.
    """

    def check(self, transaction: dict[str, Any]) -> Resolution: ...


class TxmsgError(Exception):
    """The service refused a request; the fields of its problem+json answer."""

    def __init__(self, status: int, code: str, detail: str,
                 problem: Mapping[str, Any] | None = None) -> None:
        super().__init__(f"{status} {code}: {detail}")
        self.status = status
        self.code = code
        self.detail = detail
        self.problem = dict(problem or {})


@dataclass
class TransactionResult:
    """What ``send_in_transaction`` did: the local transaction's resolution and the state now."""

    transaction_id: str
    resolution: Resolution
    state: str  # COMMITTED, ROLLED_BACK, or PREPARED (left to the check)
    messages: list[dict[str, Any]]
    end_error: Exception | None = field(default=None, repr=False)


def message(topic: str, body: str | bytes, *, keys: Iterable[str] = (), tag: str | None = None,
            properties: Mapping[str, str] | None = None) -> dict[str, Any]:
    """One message for ``send``: text bodies as ``body``, bytes as ``body_base64``."""
    out: dict[str, Any] = {"topic": topic}
    if isinstance(body, bytes | bytearray | memoryview):
        out["body_base64"] = base64.b64encode(bytes(body)).decode()
    else:
        out["body"] = body
    if keys:
        out["keys"] = list(keys)
    if tag is not None:
        out["tag"] = tag
    if properties:
        out["properties"] = dict(properties)
    return out


class Producer:
    """One producer group's client of a txmsg service."""

    def __init__(self, base_url: str, group: str, *, timeout: float = 10.0,
                 session: requests.Session | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.group = group
        self.timeout = timeout
        self._session = session or requests.Session()
        self._group_path = f"/v1/producer-groups/{quote(group, safe='')}"

    def register(self, check_urls: Sequence[str], check_timeout_ms: int = 3000) -> dict[str, Any]:
        """Register (or replace) the URLs the service asks about unresolved transactions."""
        return self._call("PUT", self._group_path,
                          {"check_urls": list(check_urls), "check_timeout_ms": check_timeout_ms})

    def send(self, messages: Message | Sequence[Message], *, transaction_id: str | None = None,
             check_url: str | None = None,
             check_immunity_seconds: int | None = None) -> dict[str, Any]:
        """Store half messages (one message or several, one transaction): PREPARED.

        Sending the same ``transaction_id`` again with the same messages is a safe retry.
        """
        batch = [messages] if isinstance(messages, Mapping) else list(messages)
        body: dict[str, Any] = {"messages": [dict(m) for m in batch]}
        if transaction_id is not None:
            body["transaction_id"] = transaction_id
        if check_url is not None:
            body["check_url"] = check_url
        if check_immunity_seconds is not None:
            body["check_immunity_seconds"] = check_immunity_seconds
        return self._call("POST", f"{self._group_path}/transactions", body)

    def commit(self, transaction_id: str) -> dict[str, Any]:
        """Make the messages visible; returns their offsets. Safe to repeat."""
        return self._call("POST", self._txn_path(transaction_id, "commit"))

    def rollback(self, transaction_id: str) -> dict[str, Any]:
        """Drop the messages for good. Safe to repeat."""
        return self._call("POST", self._txn_path(transaction_id, "rollback"))

    def get(self, transaction_id: str) -> dict[str, Any]:
        """The transaction: state, check count, messages."""
        return self._call("GET", self._txn_path(transaction_id))

    def read(self, topic: str, from_offset: int = 0, limit: int = 100) -> dict[str, Any]:
        """A page of a topic's committed messages, from ``from_offset`` (``next_offset`` next)."""
        return self._call("GET", f"/v1/topics/{quote(topic, safe='')}/messages"
                                 f"?from_offset={from_offset}&limit={limit}")

    def resume_check(self, transaction_id: str) -> dict[str, Any]:
        """Put a DISCARDED transaction back to PREPARED (checked again from 1)."""
        return self._call("POST", self._txn_path(transaction_id, "resume-check"))

    def send_in_transaction(
        self, messages: Message | Sequence[Message],
        local_transaction: Callable[[dict[str, Any]], Resolution | str], *,
        transaction_id: str | None = None, check_url: str | None = None,
        check_immunity_seconds: int | None = None,
    ) -> TransactionResult:
        """Send half messages, run the local transaction, then commit, roll back or leave
        the outcome to the check (UNKNOWN).

        ``local_transaction`` gets the send answer (with ``transaction_id``). If it raises,
        the transaction is left to the check and the exception propagates. If the commit
        or rollback cannot reach the service, the check resolves it later: the result's
        state is then PREPARED and ``end_error`` says why.
        """
        sent = self.send(messages, transaction_id=transaction_id, check_url=check_url,
                         check_immunity_seconds=check_immunity_seconds)
        txid = sent["transaction_id"]
        resolution = Resolution(local_transaction(sent))
        result = TransactionResult(txid, resolution, "PREPARED", sent["messages"])
        if resolution is Resolution.UNKNOWN:
            return result
        try:
            answer = self.commit(txid) if resolution is Resolution.COMMIT else self.rollback(txid)
        except (requests.RequestException, TxmsgError) as exc:
            if isinstance(exc, TxmsgError) and exc.status < 500:
                raise
            log.warning("could not %s transaction %s, the check will: %s",
                        resolution.value.lower(), txid, exc)
            result.end_error = exc
            return result
        result.state = answer["state"]
        result.messages = answer.get("messages", result.messages)
        return result

    def close(self) -> None:
        self._session.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _txn_path(self, transaction_id: str, action: str | None = None) -> str:
        path = f"{self._group_path}/transactions/{quote(transaction_id, safe='')}"
        return f"{path}/{action}" if action else path

    def _call(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        response = self._session.request(method, self.base_url + path, json=body,
                                         timeout=self.timeout)
        if response.status_code >= 400:
            raise _error(response)
        return response.json() if response.content else {}


def _error(response: requests.Response) -> TxmsgError:
    try:
        problem = response.json()
    except ValueError:
        problem = None
    if not isinstance(problem, dict):
        return TxmsgError(response.status_code, f"http_{response.status_code}",
                          response.text[:200] or response.reason or "")
    return TxmsgError(int(problem.get("status", response.status_code)),
                      str(problem.get("code", f"http_{response.status_code}")),
                      str(problem.get("detail", "")), problem)


def checker_app(checker: TransactionChecker) -> Callable[..., Any]:
    """A WSGI app serving ``checker`` as the check callback: POST → ``{"resolution": ...}``.

    A body that is not a JSON object answers 400; an exception in the checker answers
    500 (the service counts the check as unanswered and asks the group's next URL).
    """

    @Request.application  # type: ignore[arg-type]
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
