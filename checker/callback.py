"""Asking producers: one check posts to each callback URL in turn until one answers 2xx.

Results (the ``result`` of a check in ``check_log`` and ``txmsg_checks_total``):
- ``COMMIT``, ``ROLLBACK``, ``UNKNOWN``: a URL answered 2xx with that resolution (a 2xx
  JSON object without ``resolution`` is ``UNKNOWN``);
- ``BAD_RESPONSE``: a URL answered 2xx with an unreadable body (not a JSON object, an
  unknown resolution, too large);
- ``HTTP_ERROR``, ``TIMEOUT``, ``REFUSED``, ``BLOCKED``: no URL answered 2xx; the failure
  of the last URL asked (``detail`` lists every URL's). ``HTTP_ERROR`` includes a 3xx
  (redirects are never followed); ``BLOCKED``: the callback address policy refused the
  URL or every address its host resolved to, so nothing was connected to;
- ``NO_CALLBACK``: nothing to ask (no check_url and the group's registration is gone).
Every result but COMMIT and ROLLBACK leaves the transaction unresolved (an UNKNOWN check).

The address policy (``app.domain.callback_policy``) is applied where the connection is
made: urllib3's connection classes are given a ``_new_conn`` that resolves the host, drops
the addresses the policy refuses and connects to an allowed one, so the address checked
is the address used (no resolve-then-connect race, DNS rebinding included), on every new
connection (a kept-alive one was checked when it was made). Every delivery is signed
(``app.domain.signing``).
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from typing import Any, ClassVar

import orjson
import requests
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import (
    ConnectTimeoutError,
    NameResolutionError,
    NewConnectionError,
    ReadTimeoutError,
)
from urllib3.util.connection import allowed_gai_family

from app.domain.callback_policy import CallbackPolicy, CallbackUrlError, redacted
from app.domain.signing import Signer
from app.vocabulary import CheckResult, Resolution

MAX_ANSWER_BYTES = 64 * 1024
USER_AGENT = "txmsg-checker/1"
Result = CheckResult  # the results' words live in app.vocabulary, for the metrics


# a URL that failed so: the next one is asked
_MOVE_ON = frozenset({Result.HTTP_ERROR, Result.TIMEOUT, Result.REFUSED, Result.BLOCKED})


@dataclass(frozen=True)
class Answer:
    result: Result
    resolution: Resolution
    url: str | None
    detail: str | None


class BlockedAddress(NewConnectionError):
    """Every address of the host is one the callback address policy refuses."""

    def __init__(self, conn: HTTPConnection, detail: str) -> None:
        super().__init__(conn, detail)
        self.detail = detail


class _GuardedConnection(HTTPConnection):
    """Connects only to addresses ``policy`` allows (mixed into urllib3's classes below)."""

    policy: ClassVar[CallbackPolicy]

    def _new_conn(self) -> socket.socket:
        try:
            found = socket.getaddrinfo(self._dns_host.strip("[]"), self.port,
                                       allowed_gai_family(), socket.SOCK_STREAM)
        except socket.gaierror as exc:
            raise NameResolutionError(self.host, self, exc) from exc
        refused: list[str] = []
        error: OSError | None = None
        for family, kind, proto, _, address in found:
            denied = self.policy.check_address(str(address[0]))
            if denied is not None:
                refused.append(str(denied))
                continue
            sock = socket.socket(family, kind, proto)
            try:
                for option in self.socket_options or ():
                    sock.setsockopt(*option)
                if isinstance(self.timeout, int | float):  # else the default (blocking)
                    sock.settimeout(self.timeout)
                if self.source_address:
                    sock.bind(self.source_address)
                sock.connect(address)  # the very address just judged
                return sock
            except OSError as exc:
                sock.close()
                error = exc
        if isinstance(error, TimeoutError):
            raise ConnectTimeoutError(self, f"Connection to {self.host} timed out. "
                                            f"(connect timeout={self.timeout})") from error
        if error is not None:
            raise NewConnectionError(
                self, f"Failed to establish a new connection: {error}") from error
        raise BlockedAddress(self, f"{self.host} resolves to {', '.join(refused)}, which the "
                                   "callback address policy refuses")


class _GuardedAdapter(HTTPAdapter):
    """requests' adapter with pools of guarded connections; never through a proxy."""

    def __init__(self, policy: CallbackPolicy) -> None:
        self._pool_classes = {
            "http": _guarded(HTTPConnectionPool, HTTPConnection, policy),
            "https": _guarded(HTTPSConnectionPool, HTTPSConnection, policy),
        }
        super().__init__()

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = self._pool_classes

    def proxy_manager_for(self, proxy: str, **kwargs: Any) -> Any:
        # a proxy would connect to the producer on our behalf, unchecked
        raise requests.exceptions.ProxyError("check callbacks never go through a proxy")


def _guarded(pool: type[HTTPConnectionPool], connection: type[HTTPConnection],
             policy: CallbackPolicy) -> type[HTTPConnectionPool]:
    guarded = type(f"Guarded{connection.__name__}", (_GuardedConnection, connection),
                   {"policy": policy})
    return type(f"Guarded{pool.__name__}", (pool,), {"ConnectionCls": guarded})


class Caller:
    """Asks producers (one per thread: it holds a requests session)."""

    def __init__(self, policy: CallbackPolicy) -> None:
        self.policy = policy
        self.session = requests.Session()
        # callbacks are direct service-to-producer calls: no proxies or netrc from the env
        self.session.trust_env = False
        self.session.headers.update({"User-Agent": USER_AGENT,
                                     "Content-Type": "application/json"})
        adapter = _GuardedAdapter(policy)
        self.session.mount("http://", adapter)
        self.session.mount("https://", adapter)

    def close(self) -> None:
        self.session.close()

    def ask(self, urls: list[str], body: dict[str, Any], timeout: float,
            signer: Signer) -> Answer:
        """One check: the first 2xx answer decides; timeouts, refusals, non-2xx and
        refused addresses move on to the next URL."""
        payload = orjson.dumps(body, option=orjson.OPT_UTC_Z)
        if not urls:
            return Answer(Result.NO_CALLBACK, Resolution.UNKNOWN, None,
                          "no check_url and no registration for the producer group")
        failures: list[str] = []
        for url in urls:
            answer = self._ask_one(url, payload, timeout, signer)
            if answer.result not in _MOVE_ON:
                detail = "; ".join([*failures, answer.detail] if answer.detail else failures)
                return Answer(answer.result, answer.resolution, answer.url, detail or None)
            failures.append(f"{answer.url}: {answer.detail}")
        return Answer(answer.result, Resolution.UNKNOWN, answer.url, "; ".join(failures))

    def _ask_one(self, url: str, payload: bytes, timeout: float, signer: Signer) -> Answer:
        try:  # stored URLs passed this check; the policy may have changed since
            self.policy.check_url(url)
        except CallbackUrlError as exc:  # the URL as recorded and logged: no user info
            return _failed(Result.BLOCKED, redacted(url), f"{exc.code}: {exc}")
        # the whole exchange is bounded: connect and first byte by ``timeout`` each, and
        # the body must be read by 2 x timeout after the start (``checks.ATTEMPT_TIMEOUTS``)
        deadline = time.monotonic() + 2 * timeout
        try:
            with self.session.post(url, data=payload, headers=signer.headers(payload),
                                   timeout=(timeout, timeout), stream=True,
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
            reason = getattr(exc.args[0], "reason", None) if exc.args else None
            if isinstance(reason, BlockedAddress):
                return _failed(Result.BLOCKED, url, f"not connected: {reason.detail}")
            if exc.args and isinstance(exc.args[0], ReadTimeoutError):  # streaming the body
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
