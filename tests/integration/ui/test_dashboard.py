"""The dashboard (/ui/) through Flask's test client, on both stores: sign-in and its
session cookie, CSRF refusals that change nothing, what a token's scopes show and
allow, operator actions through the confirmation form, and each page's content."""

from __future__ import annotations

import base64
import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import insert, select, update

from app.config import Settings
from app.storage import transactions
from app.storage.schema import check_log, message_log, op_log, ui_session
from app.ui import session_key
from app.vocabulary import Op
from app.web import create_app
from tests.callbacks import answer, wait_until
from tests.conftest import make_settings
from tests.front_client import front
from tests.integration.checker_harness import Harness
from tests.integration.dashboard_helpers import ADMIN_TOKEN, csrf_of
from tests.integration.helpers import row_counts

AS_ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
GROUP, OTHER, TOPIC = "orders-svc", "billing-svc", "orders"
PAGES = ["/ui/", "/ui/transactions", "/ui/discarded", "/ui/topics", f"/ui/topics/{TOPIC}",
         "/ui/groups", "/ui/tokens", f"/ui/transactions/{GROUP}/t-open",
         f"/ui/transactions/{GROUP}/t-open/commit"]


pytestmark = pytest.mark.settings(admin_token=ADMIN_TOKEN)


def sign_in(client: Any, token: str = ADMIN_TOKEN, next_: str = "/ui/") -> Any:
    form = client.get("/ui/sign-in")
    return client.post("/ui/sign-in", data={"token": token, "csrf_token": csrf_of(form),
                                            "next": next_})


def make_token(client: Any, *scopes: str) -> str:
    r = client.post("/v1/tokens", json={"name": "ui", "scopes": list(scopes)}, headers=AS_ADMIN)
    assert r.status_code == 201, r.json
    token: str = r.json["token"]
    return token


def api(client: Any, method: str, path: str, **kwargs: Any) -> Any:
    r = client.open(path, method=method, headers=AS_ADMIN, **kwargs)
    assert r.status_code < 300, (path, r.json)
    return r.json


@pytest.fixture
def seeded(app: Any, client: Any) -> dict[str, Any]:
    """Two groups; in GROUP a committed transaction (a text and a binary message), an
    open one, and a discarded one (its three checks logged); in OTHER an open one."""
    for group in (GROUP, OTHER):
        api(client, "PUT", f"/v1/producer-groups/{group}",
            json={"check_urls": ["http://127.0.0.1:9/check"]})
    txns = f"/v1/producer-groups/{GROUP}/transactions"
    sent = api(client, "POST", txns, json={"transaction_id": "t-done", "messages": [
        {"topic": TOPIC, "body": "<b>hello</b> operator", "tag": "created"},
        {"topic": TOPIC, "body_base64": base64.b64encode(bytes(range(40))).decode()}]})
    api(client, "POST", f"{txns}/t-done/commit")
    api(client, "POST", txns, json={"transaction_id": "t-open", "topic": TOPIC, "body": "x"})
    api(client, "POST", txns, json={"transaction_id": "t-lost", "topic": TOPIC, "body": "y"})
    api(client, "POST", f"/v1/producer-groups/{OTHER}/transactions",
        json={"transaction_id": "o-open", "topic": "invoices", "body": "z"})
    state = app.extensions["txmsg"]
    now = datetime.now(UTC)
    with state.engine.begin() as conn:
        lost = transactions.get_txn(conn, GROUP, "t-lost")
        conn.execute(insert(check_log), [
            {"txn_id": lost.id, "check_times": n, "result": "TIMEOUT",
             "url": "http://127.0.0.1:9/check", "detail": "timed out", "duration_ms": 3000.5,
             "created_at": now + timedelta(microseconds=n)} for n in (1, 2, 3)])
    state.lifecycle.finish(GROUP, "t-lost", Op.DISCARD, source="check", check_times=3)
    return {"text_id": sent["messages"][0]["message_id"],
            "binary_id": sent["messages"][1]["message_id"]}


def txn_state(app: Any, group: str, transaction_id: str) -> str:
    with app.extensions["txmsg"].engine.connect() as conn:
        row = transactions.get_txn(conn, group, transaction_id)
    return str(row.state)


def text(r: Any) -> str:
    body: str = r.get_data(as_text=True)
    return body


# -- signing in --------------------------------------------------------------------------

def test_every_page_sends_a_stranger_to_sign_in(client: Any, seeded: dict[str, Any]) -> None:
    for page in PAGES:
        r = client.get(page)
        assert r.status_code == 302, page
        assert r.headers["Location"] == f"/ui/sign-in?next={page}"
    assert client.get("/ui/sign-in").status_code == 200
    assert client.get("/ui/static/ui.css").status_code == 200


def test_sign_in_keeps_a_strict_httponly_session_cookie(client: Any) -> None:
    r = sign_in(client, next_="/ui/topics")
    assert (r.status_code, r.headers["Location"]) == (303, "/ui/topics")
    cookie = r.headers["Set-Cookie"]
    assert cookie.startswith("txmsg_ui=")
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/ui/" in cookie
    assert "Secure" not in cookie  # plain http here
    assert ADMIN_TOKEN not in cookie
    assert client.get("/ui/").status_code == 200


def test_over_https_the_cookie_is_secure(app: Any) -> None:
    client = front(app)
    form = client.get("/ui/sign-in", base_url="https://localhost")
    r = client.post("/ui/sign-in", base_url="https://localhost",
                    headers={"Referer": "https://localhost/ui/sign-in"},
                    data={"token": ADMIN_TOKEN, "csrf_token": csrf_of(form)})
    assert r.status_code == 303
    assert "; Secure" in r.headers["Set-Cookie"]


def test_pages_are_never_framed_cached_or_scripted(client: Any,
                                                  seeded: dict[str, Any]) -> None:
    sign_in(client)
    for page in [*PAGES, "/ui/sign-in", "/ui/no-such-page"]:
        r = client.get(page)
        csp = r.headers["Content-Security-Policy"]
        assert "frame-ancestors 'none'" in csp and "default-src 'none'" in csp, page
        assert "script-src" not in csp
        assert r.headers["X-Frame-Options"] == "DENY"
        assert r.headers["Cache-Control"] == "no-store", page
    assert "no-store" not in client.get("/ui/static/ui.css").headers["Cache-Control"]


def test_a_bad_token_signs_no_one_in(client: Any) -> None:
    r = sign_in(client, token="txmsg_0123456789abcdef_" + "x" * 43)
    assert r.status_code == 401 and "unknown or revoked" in text(r)
    assert client.get("/ui/").status_code == 302


def test_sign_in_goes_back_only_to_a_dashboard_page(client: Any) -> None:
    for target in ("https://evil.example/ui/", "//evil.example/ui/", "/v1/tokens", ""):
        r = sign_in(client, next_=target)
        assert r.headers["Location"] == "/ui/", target


def test_a_session_ends_with_its_token_or_a_new_admin_token(
        app: Any, client: Any, database_url: str) -> None:
    token = make_token(client, "admin")
    sign_in(client, token=token)
    assert client.get("/ui/").status_code == 200
    token_id = token.split("_")[1]
    assert client.delete(f"/v1/tokens/{token_id}", headers=AS_ADMIN).status_code == 204
    assert client.get("/ui/").status_code == 302  # revoked: at once

    sign_in(client)
    cookie = client.get_cookie("txmsg_ui", path="/ui/")
    assert cookie is not None
    other = create_app(make_settings(database_url, admin_token="another-admin-token-0123456"))
    try:
        c2 = front(other)
        c2.set_cookie("txmsg_ui", cookie.value, path="/ui/")
        assert c2.get("/ui/").status_code == 302
    finally:
        other.extensions["txmsg"].close()
    assert session_key(make_settings(database_url, admin_token=ADMIN_TOKEN)) != \
        session_key(make_settings(database_url))


def test_sign_out_needs_the_form_and_ends_the_session(client: Any) -> None:
    sign_in(client)
    assert client.post("/ui/sign-out").status_code == 400  # no CSRF token
    assert client.get("/ui/").status_code == 200
    r = client.post("/ui/sign-out", data={"csrf_token": csrf_of(client.get("/ui/"))})
    assert r.status_code == 303
    assert client.get("/ui/").status_code == 302


def test_signing_out_ends_the_session_on_the_server_in_every_process(
        app: Any, client: Any, settings: Settings) -> None:
    """The old cookie, replayed after sign-out, opens nothing: here nor in another
    process on the same database (which honoured it before)."""
    other = create_app(settings)
    try:
        for token in (ADMIN_TOKEN, make_token(client, "admin")):
            sign_in(client, token=token)
            cookie = client.get_cookie("txmsg_ui", path="/ui/")
            assert cookie is not None
            replay = front(other)
            replay.set_cookie("txmsg_ui", cookie.value, path="/ui/")
            assert replay.get("/ui/tokens").status_code == 200
            r = client.post("/ui/sign-out", data={"csrf_token": csrf_of(client.get("/ui/"))})
            assert r.status_code == 303
            for c in (replay, front(app)):
                c.set_cookie("txmsg_ui", cookie.value, path="/ui/")
                r = c.get("/ui/tokens")
                assert (r.status_code, r.headers["Location"]) == (
                    302, "/ui/sign-in?next=/ui/tokens"), token
    finally:
        other.extensions["txmsg"].close()
    with app.extensions["txmsg"].engine.connect() as conn:
        assert conn.execute(select(ui_session)).all() == []


def test_revoking_a_token_ends_its_sessions_in_every_process(
        app: Any, client: Any, settings: Settings) -> None:
    token = make_token(client, "admin")
    sign_in(client, token=token)
    cookie = client.get_cookie("txmsg_ui", path="/ui/")
    assert cookie is not None
    other = create_app(settings)
    try:
        replay = front(other)
        replay.set_cookie("txmsg_ui", cookie.value, path="/ui/")
        assert replay.get("/ui/tokens").status_code == 200
        r = client.delete(f"/v1/tokens/{token.split('_')[1]}", headers=AS_ADMIN)
        assert r.status_code == 204
        assert replay.get("/ui/tokens").status_code == 302
        assert client.get("/ui/tokens").status_code == 302
    finally:
        other.extensions["txmsg"].close()


def test_a_session_expires_on_the_server_too(app: Any, client: Any) -> None:
    sign_in(client)
    with app.extensions["txmsg"].engine.begin() as conn:
        conn.execute(update(ui_session).values(
            expires_at=datetime.now(UTC) - timedelta(seconds=1)))
    assert client.get("/ui/").status_code == 302
    sign_in(client)  # and a sign-in sweeps the expired ones
    with app.extensions["txmsg"].engine.connect() as conn:
        assert len(conn.execute(select(ui_session)).all()) == 1


def test_the_cookie_holds_only_a_session_id(client: Any) -> None:
    sign_in(client, token=make_token(client, "admin"))
    cookie = client.get_cookie("txmsg_ui", path="/ui/")
    assert cookie is not None
    payload = cookie.value.split(".")[0]
    data = base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))
    assert set(json.loads(data)) == {"sid", "_permanent"}


def test_with_access_control_off_no_sign_in_is_needed(database_url: str) -> None:
    app = create_app(make_settings(database_url))
    try:
        c = front(app)
        r = c.get("/ui/")
        assert r.status_code == 200 and "Sign out" not in text(r) and "Tokens" in text(r)
        assert c.get("/ui/sign-in").status_code == 302
        assert c.post("/ui/transactions/g/t/commit").status_code == 400  # CSRF still
    finally:
        app.extensions["txmsg"].close()


# -- CSRF --------------------------------------------------------------------------------

@pytest.mark.parametrize("action", ["commit", "rollback", "resume-check"])
def test_a_post_without_its_csrf_token_is_400_and_changes_nothing(
        app: Any, client: Any, seeded: dict[str, Any], action: str) -> None:
    sign_in(client)
    engine = app.extensions["txmsg"].engine
    before = row_counts(engine)
    target = "t-lost" if action == "resume-check" else "t-open"
    path = f"/ui/transactions/{GROUP}/{target}/{action}"
    for data in ({}, {"csrf_token": "forged"}):
        r = client.post(path, data=data)
        assert r.status_code == 400 and "nothing was changed" in text(r)
        assert r.mimetype == "text/html"
    assert row_counts(engine) == before
    assert txn_state(app, GROUP, target) == ("DISCARDED" if target == "t-lost" else "PREPARED")


def test_another_sessions_csrf_token_is_refused(app: Any, client: Any,
                                                seeded: dict[str, Any]) -> None:
    sign_in(client)
    other = front(app)
    sign_in(other)
    token = csrf_of(other.get(f"/ui/transactions/{GROUP}/t-open/commit"))
    r = client.post(f"/ui/transactions/{GROUP}/t-open/commit", data={"csrf_token": token})
    assert r.status_code == 400
    assert txn_state(app, GROUP, "t-open") == "PREPARED"


# -- operator actions --------------------------------------------------------------------

def confirm(client: Any, group: str, transaction_id: str, action: str) -> Any:
    """The confirmation page, then its form posted (a commit's with the id typed)."""
    page = client.get(f"/ui/transactions/{group}/{transaction_id}/{action}")
    assert page.status_code == 200 and 'id="confirm"' in text(page)
    data = {"csrf_token": csrf_of(page)}
    if action == "commit":
        data["typed_transaction_id"] = transaction_id
    return client.post(f"/ui/transactions/{group}/{transaction_id}/{action}", data=data)


def test_resume_then_commit_and_rollback_through_the_confirmation(
        app: Any, client: Any, seeded: dict[str, Any]) -> None:
    sign_in(client)
    discarded = text(client.get("/ui/discarded"))
    assert "t-lost" in discarded and "t-open" not in discarded and "Resume check" in discarded

    r = confirm(client, GROUP, "t-lost", "resume-check")
    assert (r.status_code, r.headers["Location"]) == (303, f"/ui/transactions/{GROUP}/t-lost")
    assert txn_state(app, GROUP, "t-lost") == "PREPARED"
    page = text(client.get(r.headers["Location"]))
    assert "is PREPARED now" in page and 'id="check-times">0<' in page
    assert "t-lost" not in text(client.get("/ui/discarded"))

    assert confirm(client, GROUP, "t-lost", "commit").status_code == 303
    assert txn_state(app, GROUP, "t-lost") == "COMMITTED"
    assert confirm(client, GROUP, "t-open", "rollback").status_code == 303
    assert txn_state(app, GROUP, "t-open") == "ROLLED_BACK"
    with app.extensions["txmsg"].engine.connect() as conn:
        sources = [(r.op, r.source) for r in conn.execute(
            select(op_log.c.op, op_log.c.source).order_by(op_log.c.id))]
    assert sources[-3:] == [("RESUME", "dashboard"), ("COMMIT", "dashboard"),
                            ("ROLLBACK", "dashboard")]

    # what the state machine refuses is said, not done
    form = client.get(f"/ui/transactions/{GROUP}/t-open/commit")
    r = client.post(f"/ui/transactions/{GROUP}/t-open/commit",
                    data={"csrf_token": csrf_of(form), "typed_transaction_id": "t-open"},
                    follow_redirects=True)
    assert "cannot commit transaction" in text(r) and "ROLLED_BACK" in text(r)
    assert txn_state(app, GROUP, "t-open") == "ROLLED_BACK"


def test_a_discarded_transaction_offers_resume_check_first(
        client: Any, seeded: dict[str, Any]) -> None:
    """Resuming lets its producer decide (with the barrier, the safe answer); a commit
    the operator decides alone comes after."""
    sign_in(client)
    page = text(client.get(f"/ui/transactions/{GROUP}/t-lost"))
    order = [page.index(f'id="action-{name}"') for name in ("resume-check", "commit",
                                                            "rollback")]
    assert order == sorted(order)


@pytest.mark.parametrize("typed", [None, "", "t-lost", "t-openx"])
def test_a_commit_without_its_id_typed_commits_nothing(
        app: Any, client: Any, seeded: dict[str, Any], typed: str | None) -> None:
    sign_in(client)
    engine = app.extensions["txmsg"].engine
    page = client.get(f"/ui/transactions/{GROUP}/t-open/commit")
    assert 'name="typed_transaction_id"' in text(page)
    data = {"csrf_token": csrf_of(page)}
    if typed is not None:
        data["typed_transaction_id"] = typed
    before = row_counts(engine)
    r = client.post(f"/ui/transactions/{GROUP}/t-open/commit", data=data)
    assert r.status_code == 422 and r.mimetype == "text/html"
    assert "nothing was committed" in text(r) and 'id="refused"' in text(r)
    if typed:
        assert f"The id typed (&#39;{typed}&#39;)" in text(r)
    assert 'name="typed_transaction_id"' in text(r)  # the form again, to type it right
    assert row_counts(engine) == before
    assert txn_state(app, GROUP, "t-open") == "PREPARED"

    data["typed_transaction_id"] = " t-open "  # what a paste brings along is forgiven
    r = client.post(f"/ui/transactions/{GROUP}/t-open/commit", data=data)
    assert r.status_code == 303
    assert txn_state(app, GROUP, "t-open") == "COMMITTED"


def test_a_resolved_transaction_offers_no_action(client: Any, seeded: dict[str, Any]) -> None:
    sign_in(client)
    page = text(client.get(f"/ui/transactions/{GROUP}/t-done"))
    assert 'id="actions"' not in page
    page = text(client.get(f"/ui/transactions/{GROUP}/t-open"))
    assert 'id="action-commit"' in page and 'id="action-rollback"' in page
    assert 'id="action-resume-check"' not in page


# -- scopes ------------------------------------------------------------------------------

def test_a_producer_token_sees_and_acts_on_its_group_only(
        app: Any, client: Any, seeded: dict[str, Any]) -> None:
    sign_in(client, token=make_token(client, f"produce:{GROUP}"))
    listed = text(client.get("/ui/transactions"))
    assert "t-open" in listed and "o-open" not in listed
    overview = text(client.get("/ui/"))
    assert 'id="state-PREPARED"' in overview and "Tokens" not in overview
    assert "invoices" not in overview  # no consume scope: no topics
    groups = text(client.get("/ui/groups"))
    assert GROUP in groups and OTHER not in groups

    r = client.get(f"/ui/transactions/{OTHER}/o-open")
    assert r.status_code == 403 and f"produce:{OTHER}" in text(r)
    r = client.get(f"/ui/transactions/{OTHER}/o-open/commit")
    assert r.status_code == 403
    form = csrf_of(client.get(f"/ui/transactions/{GROUP}/t-open/commit"))
    r = client.post(f"/ui/transactions/{OTHER}/o-open/commit", data={"csrf_token": form})
    assert r.status_code == 403
    assert txn_state(app, OTHER, "o-open") == "PREPARED"
    assert client.get("/ui/tokens").status_code == 403
    assert client.get(f"/ui/topics/{TOPIC}").status_code == 403
    # its own message, by the transaction
    assert client.get(f"/ui/messages/{seeded['text_id']}").status_code == 200


def test_a_discard_topic_reader_sees_the_message_but_no_resume_button(
        app: Any, client: Any, seeded: dict[str, Any]) -> None:
    sign_in(client, token=make_token(client, "consume:TRANS_CHECK_MAX_TIME_TOPIC"))
    page = text(client.get("/ui/topics/TRANS_CHECK_MAX_TIME_TOPIC"))
    found = re.search(r'href="/ui/messages/([0-9A-F]{32})"', page)
    assert found
    message = client.get(f"/ui/messages/{found[1]}")
    assert message.status_code == 200
    assert "DISCARDED" in text(message) and "REAL_TOPIC" in text(message)
    assert "Resume check" not in text(message)
    assert "t-lost" not in text(client.get("/ui/discarded"))
    r = client.get(f"/ui/transactions/{GROUP}/t-lost/resume-check")
    assert r.status_code == 403 and "403" in text(r)
    assert client.get(f"/ui/messages/{seeded['text_id']}").status_code == 403
    assert txn_state(app, GROUP, "t-lost") == "DISCARDED"


# -- page content ------------------------------------------------------------------------

def test_the_overview(client: Any, seeded: dict[str, Any]) -> None:
    sign_in(client)
    page = text(client.get("/ui/"))
    counts = dict(re.findall(r'id="state-(\w+)".*?class="value">(\d+)<', page, re.DOTALL))
    assert counts == {"PREPARED": "2", "COMMITTED": "1", "ROLLED_BACK": "0", "DISCARDED": "1"}
    oldest = re.search(r'id="oldest-prepared".*?class="value">([^<]+)<', page, re.DOTALL)
    assert oldest and oldest[1].endswith(" s")
    rows = re.findall(r'<td><a href="/ui/topics/([^"]+)">[^<]+</a></td>\s*'
                      r'<td class="num">(\d+)</td><td class="num">(\d+)</td>\s*'
                      r'<td class="num">(\d+)</td>', page)
    assert rows == [("TRANS_CHECK_MAX_TIME_TOPIC", "0", "1", "1"), (TOPIC, "0", "2", "2")]
    assert re.search(r"result-TIMEOUT\">TIMEOUT</span></td><td class=\"num\">3<", page)


def test_the_last_hour_counts_by_commit_time(app: Any, client: Any,
                                            seeded: dict[str, Any]) -> None:
    engine = app.extensions["txmsg"].engine
    with engine.begin() as conn:  # the topic's first message, committed two hours ago
        conn.execute(message_log.update().where(message_log.c.topic == TOPIC,
                                                message_log.c.queue_offset == 0)
                     .values(committed_at=datetime.now(UTC) - timedelta(hours=2)))
    sign_in(client)
    page = text(client.get("/ui/topics"))
    assert re.search(rf'/ui/topics/{TOPIC}">{TOPIC}</a></td>\s*<td class="num">0</td>'
                     r'<td class="num">2</td>\s*<td class="num">1</td>', page)


def test_the_transactions_list_filters_and_searches(client: Any,
                                                   seeded: dict[str, Any]) -> None:
    sign_in(client)

    def listed(query: str) -> list[str]:
        return re.findall(r'<tr data-transaction="([^"]+)"', text(client.get(
            f"/ui/transactions{query}")))

    assert listed("") == ["o-open", "t-lost", "t-open", "t-done"]  # newest first
    assert listed(f"?group={GROUP}") == ["t-lost", "t-open", "t-done"]
    assert listed("?state=PREPARED") == ["o-open", "t-open"]
    assert listed(f"?group={OTHER}&state=COMMITTED") == []
    assert listed("?q=t-open") == ["t-open"]
    assert listed(f"?q={seeded['binary_id']}") == ["t-done"]
    assert listed("?q=nothing-like-it") == []
    assert client.get("/ui/transactions?state=LOST").status_code == 400
    assert client.get("/ui/transactions?group=no%20spaces").status_code == 400


def test_the_transactions_list_pages_by_id(app: Any, client: Any) -> None:
    api(client, "PUT", f"/v1/producer-groups/{GROUP}", json={"check_urls": ["http://a/c"]})
    for n in range(55):
        api(client, "POST", f"/v1/producer-groups/{GROUP}/transactions",
            json={"transaction_id": f"p-{n:02}", "topic": TOPIC, "body": "b"})
    sign_in(client)
    seen: list[str] = []
    for query in ("/ui/transactions?state=PREPARED", "/ui/transactions"):
        seen, url = [], query
        while url:
            page = text(client.get(url))
            seen += re.findall(r'<tr data-transaction="([^"]+)"', page)
            more = re.search(r'id="older" href="([^"]+)"', page)
            url = more[1].replace("&amp;", "&") if more else ""
        assert seen == [f"p-{n:02}" for n in reversed(range(55))]


def test_the_transaction_page(client: Any, seeded: dict[str, Any]) -> None:
    sign_in(client)
    page = text(client.get(f"/ui/transactions/{GROUP}/t-lost"))
    assert 'id="state">DISCARDED<' in page
    checks = re.findall(r'<td class="num">(\d)</td><td>[^<]+Z</td>\s*<td class="wrap">([^<]+)'
                        r'</td>\s*<td><span class="badge result-\w+">(\w+)</span></td>\s*'
                        r'<td class="num">([^<]+)</td>', page)
    assert checks == [(str(n), "http://127.0.0.1:9/check", "TIMEOUT", "3000.5 ms")
                      for n in (1, 2, 3)]
    timeline = re.findall(r"<strong>([^<]+)</strong>", page.split('id="timeline"')[1])
    assert timeline == ["sent", "check #1: TIMEOUT", "check #2: TIMEOUT", "check #3: TIMEOUT",
                        "DISCARD"]
    assert "Appended to TRANS_CHECK_MAX_TIME_TOPIC at offset" in page

    done = text(client.get(f"/ui/transactions/{GROUP}/t-done"))
    assert seeded["text_id"] in done and seeded["binary_id"] in done
    assert "40 (binary)" in done
    assert client.get(f"/ui/transactions/{GROUP}/nope").status_code == 404


def test_the_topic_browser_and_a_message(client: Any, seeded: dict[str, Any]) -> None:
    sign_in(client)
    page = text(client.get(f"/ui/topics/{TOPIC}"))
    assert "&lt;b&gt;hello&lt;/b&gt; operator" in page and "<b>hello" not in page
    assert " ".join(f"{b:02x}" for b in range(40)) in page
    assert re.findall(r'data-offset="(\d+)"', page) == ["0", "1"]
    assert re.findall(r'data-offset="(\d+)"', text(client.get(
        f"/ui/topics/{TOPIC}?from_offset=1"))) == ["1"]
    assert client.get(f"/ui/topics/{TOPIC}?from_offset=-1").status_code == 400
    assert "No messages" in text(client.get("/ui/topics/never-written"))

    text_page = text(client.get(f"/ui/messages/{seeded['text_id']}"))
    assert '<pre id="body">&lt;b&gt;hello&lt;/b&gt; operator</pre>' in text_page
    assert 'id="offset">0<' in text_page and "created" in text_page
    binary = text(client.get(f"/ui/messages/{seeded['binary_id']}"))
    assert "40 bytes, binary" in binary and "00 01 02 03" in binary
    assert client.get("/ui/messages/" + "0" * 32).status_code == 404


def test_groups_and_tokens(client: Any, seeded: dict[str, Any]) -> None:
    make_token(client, "consume:orders")
    sign_in(client)
    groups = text(client.get("/ui/groups"))
    assert GROUP in groups and OTHER in groups and "http://127.0.0.1:9/check" in groups
    assert "whsec_" not in groups
    tokens = text(client.get("/ui/tokens"))
    assert "consume:orders" in tokens and "txmsg_" not in tokens


def test_an_unknown_page_is_an_html_404(client: Any) -> None:
    sign_in(client)
    r = client.get("/ui/no-such-page")
    assert r.status_code == 404 and r.mimetype == "text/html"


def test_the_checker_records_each_checks_duration(harness_factory: Any) -> None:
    h: Harness = harness_factory()
    cb = h.callback(answer("UNKNOWN"))
    h.register("shop", [cb.url])
    h.send("shop", "slow-1")
    h.start_checker()
    wait_until(lambda: h.state("shop", "slow-1") == "DISCARDED", what="the discard")
    logged = h.check_log("shop", "slow-1")
    assert [c.result for c in logged] == ["UNKNOWN"] * 3
    assert all(c.duration_ms is not None and c.duration_ms > 0 for c in logged)
    page = h.client.get("/ui/transactions/shop/slow-1").get_data(as_text=True)
    assert page.count(" ms</td>") == 3 and cb.url in page


# -- subscriptions -------------------------------------------------------------------------

def subscribe(client: Any, topic: str, name: str, **settings: Any) -> None:
    api(client, "PUT", f"/v1/topics/{topic}/subscriptions/{name}", json=settings)


def backlog_rows(page: str, table_id: str) -> list[list[str]]:
    table = page.split(f'id="{table_id}"', 1)[1].split("</table>", 1)[0]
    rows = re.findall(r"<tr>(.*?)</tr>", table.split("<tbody>", 1)[1], re.DOTALL)
    return [[re.sub(r"<[^>]+>", "", c).strip()
             for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.DOTALL)] for row in rows]


def test_subscriptions_with_backlog_as_the_api_counts_them(client: Any,
                                                           seeded: dict[str, Any]) -> None:
    api(client, "POST", f"/v1/producer-groups/{OTHER}/transactions/o-open/commit")
    subscribe(client, TOPIC, "billing", initial_position="earliest")
    # latest: nothing to consume, not on the overview
    subscribe(client, TOPIC, "late", type="failover", tag_filter="paid || created")
    subscribe(client, "invoices", "ledger", initial_position="earliest", type="key_shared")
    received = api(client, "POST", f"/v1/topics/{TOPIC}/subscriptions/billing/receive",
                   json={"max_messages": 1, "consumer": "worker-1"})
    assert len(received["messages"]) == 1
    assert len(api(client, "POST", "/v1/topics/invoices/subscriptions/ledger/receive",
                   json={"max_messages": 10, "consumer": "ledger-1"})["messages"]) == 1
    billing = api(client, "GET", f"/v1/topics/{TOPIC}/subscriptions/billing")
    assert (billing["backlog"], billing["in_flight"]) == (2, 1)
    ledger = api(client, "GET", "/v1/topics/invoices/subscriptions/ledger")
    assert (ledger["backlog"], ledger["in_flight"], ledger["waiting"]) == (1, 1, 0)

    sign_in(client)
    overview = text(client.get("/ui/"))
    assert "Subscriptions with backlog" in overview
    assert backlog_rows(overview, "subscriptions-with-backlog") == [
        [TOPIC, "billing", "2", "1", str(billing["ack_cursor"]), "shared", "*", "0", "1"],
        ["invoices", "ledger", "1", "1", "0", "key_shared", "*", "0", "1"]]
    topic_page = text(client.get(f"/ui/topics/{TOPIC}"))
    rows = backlog_rows(topic_page, "subscriptions")
    assert [r[:4] + r[5:] for r in rows] == [
        ["billing", "2", "1", str(billing["ack_cursor"]), "shared", "*", "0", "1"],
        ["late", "0", "0", "2", "failover", "paid||created", "0", "0"]]
    consumer = billing["consumers"][0]
    assert [r[:2] + r[3:] for r in backlog_rows(topic_page, "subscription-consumers")] == [
        ["billing", "worker-1", "1", "active"]]
    assert backlog_rows(topic_page, "subscription-consumers")[0][2] == datetime.fromisoformat(
        consumer["last_seen"]).strftime("%Y-%m-%d %H:%M:%SZ")
    invoices_page = text(client.get("/ui/topics/invoices"))
    assert [r[:2] + r[3:] for r in backlog_rows(invoices_page, "subscription-consumers")] == [
        ["ledger", "ledger-1", "1", "active"]]

    client.post("/ui/sign-out", data={"csrf_token": csrf_of(client.get("/ui/"))})
    sign_in(client, token=make_token(client, f"consume:{TOPIC}"))
    overview = text(client.get("/ui/"))
    assert [r[:2] for r in backlog_rows(overview, "subscriptions-with-backlog")] == [
        [TOPIC, "billing"]]
    assert "ledger-1" not in overview
    assert "ledger" not in overview
    assert client.get("/ui/topics/invoices").status_code == 403


def test_no_subscriptions(client: Any, seeded: dict[str, Any]) -> None:
    sign_in(client)
    assert "No subscription has a backlog." in text(client.get("/ui/"))
    assert "No subscriptions." in text(client.get(f"/ui/topics/{TOPIC}"))
