"""The service's refusals (problem+json answers) as one exception."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol


class TxmsgError(Exception):
    """The service refused a request; the fields of its problem+json answer."""

    def __init__(self, status: int, code: str, detail: str,
                 problem: Mapping[str, Any] | None = None) -> None:
        super().__init__(f"{status} {code}: {detail}")
        self.status = status
        self.code = code
        self.detail = detail
        self.problem = dict(problem or {})


class HttpAnswer(Protocol):
    """What ``error_from`` reads of an answer: a ``requests`` or an ``httpx`` response."""

    @property
    def status_code(self) -> int: ...

    @property
    def text(self) -> str: ...

    def json(self) -> Any: ...


def error_from(response: HttpAnswer) -> TxmsgError:
    """The error an HTTP answer of 400 or more stands for, problem+json or not."""
    try:
        problem = response.json()
    except ValueError:
        problem = None
    if not isinstance(problem, dict):
        return TxmsgError(response.status_code, f"http_{response.status_code}",
                          response.text[:200] or _reason(response))
    return TxmsgError(int(problem.get("status", response.status_code)),
                      str(problem.get("code", f"http_{response.status_code}")),
                      str(problem.get("detail", "")), problem)


def _reason(response: HttpAnswer) -> str:
    return str(getattr(response, "reason", None) or getattr(response, "reason_phrase", ""))


class NotPrepared(Exception):
    """``local_transaction``'s send answered a transaction that is no longer PREPARED (its
    id used again after it was resolved): the block did not run. ``state``: what the
    service holds (COMMITTED raises ``AlreadyCommitted``, a subclass)."""

    def __init__(self, transaction_id: str, state: str, detail: str | None = None) -> None:
        super().__init__(detail or f"transaction {transaction_id} is {state} already: "
                         "the local work did not run")
        self.transaction_id = transaction_id
        self.state = state


class AlreadyCommitted(NotPrepared):
    """The local transaction of this transaction id committed before (``local_transaction``
    run again with an id whose work is done, after a crash between the database commit and
    txmsg's): the block is not run again, and the messages are committed (or left to the
    check, which commits them)."""

    def __init__(self, transaction_id: str, detail: str | None = None) -> None:
        super().__init__(transaction_id, "COMMITTED", detail or (
            f"transaction {transaction_id}: its local work committed before"))
