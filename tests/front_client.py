"""The tests' HTTP client: the production front (``Api(create_app(settings))``, as
``txmsg serve`` runs it) driven in this process, with the part of Flask's test client
interface the tests use.

``FrontClient(app)`` serves ``app`` through its own ``Api`` on an ``AsgiClient`` (an
event loop on a thread of its own, as a server runs the app). Requests take ``json=``,
``data=`` (bytes, text, or a form as a dict), ``headers=`` (a dict or pairs),
``query_string=``, ``content_type=``, ``follow_redirects=`` and ``base_url=`` (its scheme); answers are werkzeug
``Response`` objects (``status_code``, ``json``, ``get_json()``, ``data``, ``text``,
``headers``, ``mimetype``), with ``request.path``. Cookies set by answers are kept and sent
back by path, as a browser does. ``environ_base["REMOTE_ADDR"]`` is the client's address.

Every client made during a test is closed after it (``close_all``, an autouse fixture in
``tests/conftest.py``).
"""

from __future__ import annotations

import json as jsonlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from http.cookies import SimpleCookie
from types import SimpleNamespace
from typing import Any, Self
from urllib.parse import unquote, urlencode, urlsplit

from flask import Flask
from werkzeug.datastructures import Headers
from werkzeug.wrappers import Response

from app.api.asgi import Api
from tests.asgi_client import AsgiClient

_open: list[FrontClient] = []
_REDIRECTS = (301, 302, 303, 307, 308)


@dataclass
class Cookie:
    key: str
    value: str
    path: str


class FrontResponse(Response):
    request: Any  # .path: the path of the request answered


class FrontClient:
    def __init__(self, app: Flask) -> None:
        self.application = app
        self.api = Api(app)
        self._asgi = AsgiClient(self.api)
        self.environ_base: dict[str, str] = {"REMOTE_ADDR": "127.0.0.1"}
        self._cookies: dict[tuple[str, str], Cookie] = {}
        _open.append(self)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        pass  # closed after the test, as every client

    def get(self, path: str, **kwargs: Any) -> FrontResponse:
        return self.open(path, method="GET", **kwargs)

    def post(self, path: str, **kwargs: Any) -> FrontResponse:
        return self.open(path, method="POST", **kwargs)

    def put(self, path: str, **kwargs: Any) -> FrontResponse:
        return self.open(path, method="PUT", **kwargs)

    def delete(self, path: str, **kwargs: Any) -> FrontResponse:
        return self.open(path, method="DELETE", **kwargs)

    def open(self, path: str, method: str = "GET", *, json: Any = None,
             data: bytes | str | Mapping[str, Any] | None = None,
             headers: Mapping[str, str] | Iterable[tuple[str, str]] | None = None,
             query_string: str | bytes | Mapping[str, Any] | None = None,
             content_type: str | None = None, follow_redirects: bool = False,
             base_url: str = "http://localhost") -> FrontResponse:
        fields = Headers(headers.items() if isinstance(headers, Mapping) else (headers or ()))
        for key, value in self.environ_base.items():  # as Flask's client: HTTP_X_Y is X-Y
            if key.startswith("HTTP_"):
                fields.setdefault(key[5:].replace("_", "-").title(), value)
        body = b""
        if json is not None:
            body = jsonlib.dumps(json).encode()
            fields.setdefault("Content-Type", "application/json")
        elif isinstance(data, Mapping):
            body = urlencode(data, doseq=True).encode()
            fields.setdefault("Content-Type", "application/x-www-form-urlencoded")
        elif data is not None:
            body = data.encode() if isinstance(data, str) else data
        if content_type is not None:
            fields["Content-Type"] = content_type
        if body or method in ("POST", "PUT", "PATCH"):
            fields["Content-Length"] = str(len(body))
        target = path
        if query_string:
            query = (query_string.decode() if isinstance(query_string, bytes)
                     else query_string if isinstance(query_string, str)
                     else urlencode(query_string, doseq=True))
            target = f"{path}{'&' if '?' in path else '?'}{query}"
        base = urlsplit(base_url)
        scheme = base.scheme
        fields.setdefault("Host", base.netloc)
        answer = self._send(method, target, body, fields, scheme)
        while follow_redirects and answer.status_code in _REDIRECTS:
            location = urlsplit(answer.headers["Location"])
            target = location.path + (f"?{location.query}" if location.query else "")
            if answer.status_code in (307, 308):
                answer = self._send(method, target, body, fields, scheme)
            else:
                answer = self._send("GET", target, b"", Headers(
                    (k, v) for k, v in fields.items()
                    if k.lower() not in ("content-type", "content-length")), scheme)
        return answer

    def set_cookie(self, key: str, value: str = "", path: str = "/", **_: Any) -> None:
        self._cookies[(key, path)] = Cookie(key, value, path)

    def get_cookie(self, key: str, domain: str = "localhost", path: str = "/") -> Cookie | None:
        return self._cookies.get((key, path))

    def close(self) -> None:
        if self in _open:
            _open.remove(self)
            self._asgi.close()
            self.api.stop_threads()

    def _send(self, method: str, target: str, body: bytes, fields: Headers,
              scheme: str) -> FrontResponse:
        path = target.partition("?")[0]
        cookies = "; ".join(f"{c.key}={c.value}" for c in self._cookies.values()
                            if _path_matches(path, c.path))
        sent = list(fields.items())
        if cookies:
            sent.append(("Cookie", cookies))
        reply = self._asgi.request(method, target, body=body, headers=sent,
                                   client=self.environ_base.get("REMOTE_ADDR", "127.0.0.1"),
                                   scheme=scheme)
        answer = FrontResponse(reply.body, reply.status, list(reply.headers.items()))
        if not any(k.lower() == "content-type" for k in reply.headers):
            del answer.headers["Content-Type"]
        for header in answer.headers.getlist("Set-Cookie"):
            self._keep(header)
        answer.request = SimpleNamespace(path=unquote(path), method=method)
        return answer

    def _keep(self, header: str) -> None:
        parsed: SimpleCookie = SimpleCookie()
        parsed.load(header)
        for key, morsel in parsed.items():
            path = morsel["path"] or "/"
            gone = morsel["max-age"] == "0" or "1970" in morsel["expires"]
            if gone or not morsel.value:
                self._cookies.pop((key, path), None)
            else:
                self._cookies[(key, path)] = Cookie(key, morsel.value, path)


def _path_matches(path: str, cookie_path: str) -> bool:
    return path == cookie_path or (path.startswith(cookie_path) and (
        cookie_path.endswith("/") or path[len(cookie_path)] == "/"))


def front(app: Flask) -> FrontClient:
    """A client of ``app`` as served (what ``app.test_client()`` was)."""
    return FrontClient(app)


def close_all() -> None:
    for client in _open:
        client.close()
