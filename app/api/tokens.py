"""Scoped bearer tokens: the admin makes, lists and revokes them."""

from __future__ import annotations

from app.api.call import Answer, Call
from app.api.http import parse_json
from app.domain import tokens


def create_token(call: Call) -> Answer:
    """Make a token; its secret is in this answer only."""
    request = tokens.parse_token_request(parse_json(call.body))
    return 201, tokens.create(call.state.engine, request)


def list_tokens(call: Call) -> Answer:
    """The tokens, oldest first, without their secrets; ``after`` pages."""
    return 200, tokens.list_tokens(call.state.engine, call.arg("after"), call.arg("limit"))


def revoke_token(call: Call) -> Answer:
    """Revoke a token: refused here at once, by every other process within 5 s."""
    token_id = call.params["token_id"]
    tokens.check_token_id(token_id)
    tokens.revoke(call.state.engine, token_id)
    call.state.guard.forget()
    return 204, None
