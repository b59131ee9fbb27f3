"""Asking producers: one check posts to each callback URL in turn until one answers 2xx.

Results (the ``result`` of a check in ``check_log`` and ``txmsg_checks_total``):
- ``COMMIT``, ``ROLLBACK``, ``UNKNOWN``: a URL answered 2xx with that resolution (a 2xx
  JSON object without ``resolution`` is ``UNKNOWN``);
- ``BAD_RESPONSE``: a URL answered 2xx with an unreadable body (not a JSON object, an
  unknown resolution, too large);
- ``HTTP_ERROR``, ``TIMEOUT``, ``REFUSED``: no URL answered 2xx; the failure of the last
  URL asked (``detail`` lists every URL's);
- ``NO_CALLBACK``: nothing to ask (no check_url and the group's registration is gone).
Every result but COMMIT and ROLLBACK leaves the transaction unresolved (an UNKNOWN check).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import orjson
import requests
from urllib3.exceptions import ReadTimeoutError

from app.vocabulary import CheckResult, Resolution

MAX_ANSWER_BYTES = 64 * 1024
USER_AGENT = "txmsg-checker/1"
Result = CheckResult  # the results' words live in app.vocabulary, for the metrics


@dataclass(frozen=True)
class Answer:
    result: Result
    resolution: Resolution
    url: str | None
    detail: str | None


def new_session() -> requests.Session:
    session = requests.Session()
    # callbacks are direct service-to-producer calls: no proxies or netrc from the env
    session.trust_env = False
    session.headers.update({"User-Agent": USER_AGENT, "Content-Type": "application/json"})
    return session


def ask(session: requests.Session, urls: list[str], body: dict[str, Any],
        timeout: float) -> Answer:
    """One check: the first 2xx answer decides; timeouts, refusals and non-2xx move on."""
    payload = orjson.dumps(body, option=orjson.OPT_UTC_Z)
    if not urls:
        return Answer(Result.NO_CALLBACK, Resolution.UNKNOWN, None,
                      "no check_url and no registration for the producer group")
    failures: list[str] = []
    for url in urls:
        answer = _ask_one(session, url, payload, timeout)
        if answer.result not in (Result.HTTP_ERROR, Result.TIMEOUT, Result.REFUSED):
            detail = "; ".join([*failures, answer.detail] if answer.detail else failures)
            return Answer(answer.result, answer.resolution, url, detail or None)
        failures.append(f"{url}: {answer.detail}")
    return Answer(answer.result, Resolution.UNKNOWN, urls[-1], "; ".join(failures))


def _ask_one(session: requests.Session, url: str, payload: bytes, timeout: float) -> Answer:
    # the whole exchange is bounded: connect and first byte by ``timeout`` each, and the
    # body must be read by 2 x timeout after the start (``app.domain.checks.ATTEMPT_TIMEOUTS``)
    deadline = time.monotonic() + 2 * timeout
    try:
        with session.post(url, data=payload, timeout=(timeout, timeout), stream=True,
                          allow_redirects=False) as response:
            if not 200 <= response.status_code < 300:
                return _failed(Result.HTTP_ERROR, url, f"HTTP {response.status_code}")
            body = bytearray()
            for chunk in response.iter_content(8192):
                body += chunk
                if len(body) > MAX_ANSWER_BYTES:
                    return _failed(Result.BAD_RESPONSE, url,
                                   f"answer larger than {MAX_ANSWER_BYTES} bytes")
                if time.monotonic() > deadline:
                    return _failed(Result.TIMEOUT, url, "answer not read in time")
    except requests.Timeout as exc:
        return _failed(Result.TIMEOUT, url, f"timed out after {timeout:g}s ({_name(exc)})")
    except requests.ConnectionError as exc:
        if exc.args and isinstance(exc.args[0], ReadTimeoutError):  # while streaming the body
            return _failed(Result.TIMEOUT, url, f"timed out after {timeout:g}s (body)")
        return _failed(Result.REFUSED, url, f"cannot connect: {_name(exc)}")
    except requests.RequestException as exc:
        return _failed(Result.BAD_RESPONSE, url, f"unreadable answer: {_name(exc)}")
    return _decode(url, bytes(body))


def _decode(url: str, body: bytes) -> Answer:
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return _failed(Result.BAD_RESPONSE, url, f"answer is not JSON: {body[:80]!r}")
    if not isinstance(data, dict):
        return _failed(Result.BAD_RESPONSE, url, "answer is not a JSON object")
    raw = data.get("resolution")
    if raw is None:
        return Answer(Result.UNKNOWN, Resolution.UNKNOWN, url, "2xx without a resolution")
    try:
        resolution = Resolution(raw)
    except (ValueError, TypeError):
        return _failed(Result.BAD_RESPONSE, url, f"unknown resolution {str(raw)[:40]!r}")
    return Answer(Result(resolution.value), resolution, url, None)


def _failed(result: Result, url: str, detail: str) -> Answer:
    return Answer(result, Resolution.UNKNOWN, url, detail)


def _name(exc: BaseException) -> str:
    inner = exc.args[0] if exc.args else None
    reason = getattr(inner, "reason", None) or inner or exc
    return f"{type(exc).__name__}: {reason}"[:300]
