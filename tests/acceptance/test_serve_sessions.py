"""The dashboard's sessions through a real `txmsg serve` (Granian, the ASGI front, Flask
behind a2wsgi): signing out ends a session for good, and behind a trusted TLS proxy the
cookie is Secure and the log names the proxy's client."""

from __future__ import annotations

import re
from typing import Any

import pytest
import requests

ADMIN_TOKEN = "admin-token-for-serve-tests-0123"
CLIENT = "203.0.113.9"


def csrf_of(r: requests.Response) -> str:
    found = re.search(r'name="csrf_token" value="([^"]+)"', r.text)
    assert found, r.text
    return found[1]


def sign_in(s: requests.Session, base: str) -> requests.Response:
    form = s.get(f"{base}/ui/sign-in")
    return s.post(f"{base}/ui/sign-in", allow_redirects=False,
                  data={"token": ADMIN_TOKEN, "csrf_token": csrf_of(form)})


@pytest.mark.slow
def test_sessions_of_a_real_serve(serve_factory: Any) -> None:
    served = serve_factory({"TXMSG_ADMIN_TOKEN": ADMIN_TOKEN,
                            "TXMSG_TRUSTED_PROXIES": "127.0.0.0/8"})
    base = served.url

    s = requests.Session()
    assert sign_in(s, base).status_code == 303
    old_cookie = s.cookies.get("txmsg_ui", path="/ui/")
    assert s.get(f"{base}/ui/tokens", allow_redirects=False).status_code == 200
    r = s.post(f"{base}/ui/sign-out", allow_redirects=False,
               data={"csrf_token": csrf_of(s.get(f"{base}/ui/"))})
    assert r.status_code == 303
    r = requests.get(f"{base}/ui/tokens", cookies={"txmsg_ui": old_cookie},
                     allow_redirects=False)
    assert r.status_code == 302, "the old cookie still opens the page"
    assert r.headers["Location"] == "/ui/sign-in?next=/ui/tokens"

    # from 127.0.0.1, a trusted proxy that terminated TLS for CLIENT
    behind_tls = {"X-Forwarded-Proto": "https", "X-Forwarded-For": CLIENT,
                  "Referer": f"{base.replace('http:', 'https:')}/ui/sign-in"}
    form = requests.get(f"{base}/ui/sign-in", headers=behind_tls)
    assert "; Secure" in form.headers["Set-Cookie"]
    # a browser sends a Secure cookie back over https (to the proxy); requests, speaking
    # http here, would not
    r = requests.post(f"{base}/ui/sign-in", allow_redirects=False,
                      headers={**behind_tls, "Cookie": f"txmsg_ui={form.cookies['txmsg_ui']}"},
                      data={"token": ADMIN_TOKEN, "csrf_token": csrf_of(form)})
    assert r.status_code == 303 and "; Secure" in r.headers["Set-Cookie"]
    served.stop()
    assert re.search(rf"POST /ui/sign-in 303 [\d.]+ ms from {re.escape(CLIENT)}\n",
                     served.log.read_text())
