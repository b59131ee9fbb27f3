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


class AlreadyCommitted(Exception):
    """The local transaction of this transaction id committed before (``local_transaction``
    run again with an id whose work is done, after a crash between the database commit and
    txmsg's): the block is not run again, and the messages are committed (or left to the
    check, which commits them)."""
