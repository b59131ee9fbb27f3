"""The service's refusals (problem+json answers) as one exception."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import requests


class TxmsgError(Exception):
    """The service refused a request; the fields of its problem+json answer."""

    def __init__(self, status: int, code: str, detail: str,
                 problem: Mapping[str, Any] | None = None) -> None:
        super().__init__(f"{status} {code}: {detail}")
        self.status = status
        self.code = code
        self.detail = detail
        self.problem = dict(problem or {})


def error_from(response: requests.Response) -> TxmsgError:
    """The error an HTTP answer of 400 or more stands for, problem+json or not."""
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
