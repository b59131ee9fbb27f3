"""Scoped bearer tokens: the admin makes, lists and revokes them."""

from __future__ import annotations

from flask import Blueprint, Response

from app.api.access import requires
from app.api.http import int_arg, json_body, json_response, limit_arg, no_content, state
from app.domain import tokens
from app.domain.access import ADMIN

bp = Blueprint("tokens", __name__, url_prefix="/v1/tokens")


@bp.post("")
@requires(ADMIN)
def create_token() -> Response:
    """Make a token; its secret is in this answer only."""
    request = tokens.parse_token_request(json_body())
    return json_response(tokens.create(state().engine, request), 201)


@bp.get("")
@requires(ADMIN)
def list_tokens() -> Response:
    """The tokens, oldest first, without their secrets; ``after`` pages."""
    return json_response(tokens.list_tokens(state().engine, int_arg("after", 0, 0), limit_arg()))


@bp.delete("/<token_id>")
@requires(ADMIN)
def revoke_token(token_id: str) -> Response:
    """Revoke a token: refused here at once, by every other process within 5 s."""
    tokens.check_token_id(token_id)
    tokens.revoke(state().engine, token_id)
    state().guard.forget()
    return no_content()
