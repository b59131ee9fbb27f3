"""A message read by id (``GET /v1/messages/{id}``, the dashboard's message page) on both
stores, for each state x scope: its group's producers (and admin) see it in every state,
its topic's consumers only once committed. An unresolved, rolled-back or discarded message
is, to anyone else, the same 404 as an unknown id."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.integration.helpers import discard_after_one_check

ADMIN_TOKEN = "admin-token-for-tests-0123456789"
AS_ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
GROUP, TOPIC = "orders-svc", "tb"
STATES = ("COMMITTED", "PREPARED", "ROLLED_BACK", "DISCARDED")
UNKNOWN = "0123456789ABCDEF0123456789ABCDEF"


pytestmark = pytest.mark.settings(admin_token=ADMIN_TOKEN)


def make_token(client: Any, *scopes: str) -> str:
    r = client.post("/v1/tokens", json={"name": "reader", "scopes": list(scopes)},
                    headers=AS_ADMIN)
    assert r.status_code == 201, r.json
    token: str = r.json["token"]
    return token


@pytest.fixture
def message_ids(app: Any, client: Any) -> dict[str, str]:
    """A message in each state, by state."""
    group = f"/v1/producer-groups/{GROUP}"
    assert client.put(group, json={"check_urls": ["http://127.0.0.1:9/c"]},
                      headers=AS_ADMIN).status_code == 200
    ids = {}
    for state in STATES:
        sent = client.post(f"{group}/transactions", headers=AS_ADMIN, json={
            "transaction_id": state, "topic": TOPIC, "body": f"secret {state}"})
        assert sent.status_code == 201, sent.json
        ids[state] = sent.json["messages"][0]["message_id"]
    for state, op in (("COMMITTED", "commit"), ("ROLLED_BACK", "rollback")):
        assert client.post(f"{group}/transactions/{state}/{op}",
                           headers=AS_ADMIN).status_code == 200
    discard_after_one_check(app, "DISCARDED", GROUP)
    for state, message_id in ids.items():
        shown = client.get(f"/v1/messages/{message_id}", headers=AS_ADMIN)
        assert shown.json["state"] == state
    return ids


def _without_id(doc: dict[str, Any], message_id: str) -> dict[str, Any]:
    return {k: (v.replace(message_id, "<id>") if isinstance(v, str) else v)
            for k, v in doc.items()}


# scopes held → the states it reads (200); the others: 404 when not committed, else 403
SEES = {
    (f"consume:{TOPIC}",): {"COMMITTED"},
    ("consume:*",): {"COMMITTED"},
    (f"produce:{GROUP}",): set(STATES),
    (f"consume:{TOPIC}", f"produce:{GROUP}"): set(STATES),
    ("admin",): set(STATES),
    ("consume:other", "produce:other"): set(),
}


@pytest.mark.parametrize("scopes", list(SEES))
def test_a_message_by_id_is_shown_by_state_and_scope(
        client: Any, message_ids: dict[str, str], scopes: tuple[str, ...]) -> None:
    token = {"Authorization": f"Bearer {make_token(client, *scopes)}"}
    unknown = client.get(f"/v1/messages/{UNKNOWN}", headers=token)
    assert unknown.status_code == 404
    for state, message_id in message_ids.items():
        r = client.get(f"/v1/messages/{message_id}", headers=token)
        if state in SEES[scopes]:
            assert r.status_code == 200, (state, r.json)
            assert r.json["body"] == f"secret {state}"
        elif state != "COMMITTED":
            assert r.status_code == 404, (state, r.json)
            assert r.mimetype == unknown.mimetype == "application/problem+json"
            assert _without_id(r.json, message_id) == _without_id(unknown.json, UNKNOWN)
            assert b"secret" not in r.data and TOPIC not in r.get_data(as_text=True)
        else:
            assert r.status_code == 403, (state, r.json)


@pytest.mark.parametrize("scopes", [(f"consume:{TOPIC}",), (f"produce:{GROUP}",)])
def test_the_dashboards_message_page_shows_the_same(
        client: Any, message_ids: dict[str, str], scopes: tuple[str, ...]) -> None:
    form = client.get("/ui/sign-in").get_data(as_text=True)
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', form)
    assert csrf is not None
    signed_in = client.post("/ui/sign-in", data={
        "token": make_token(client, *scopes), "csrf_token": csrf[1], "next": "/ui/"})
    assert signed_in.status_code == 303
    for state, message_id in message_ids.items():
        page = client.get(f"/ui/messages/{message_id}")
        if state in SEES[scopes]:
            assert page.status_code == 200, state
            assert f"secret {state}" in page.get_data(as_text=True)
        else:
            assert page.status_code == 404, state
            assert "secret" not in page.get_data(as_text=True)
