"""Producer groups: register, read and remove check callbacks; rotate their signing secret."""

from __future__ import annotations

from flask import Blueprint, Response

from app.api.access import requires
from app.api.http import json_body, json_response, no_content, state
from app.domain import groups
from app.domain.access import PRODUCE
from app.domain.messages import parse_producer_group
from app.domain.names import check_group_name

bp = Blueprint("groups", __name__, url_prefix="/v1/producer-groups")


@bp.put("/<group>")
@requires(PRODUCE, "group")
def put_group(group: str) -> Response:
    """Register (or replace) a producer group's check callbacks."""
    check_group_name(group)
    request = parse_producer_group(json_body(), callback_policy=state().lifecycle.callback_policy)
    return json_response(groups.register(state().engine, group, request))


@bp.get("/<group>")
@requires(PRODUCE, "group")
def get_group(group: str) -> Response:
    """A producer group's registration, with its signing secret."""
    check_group_name(group)
    return json_response(groups.get(state().engine, group))


@bp.delete("/<group>")
@requires(PRODUCE, "group")
def delete_group(group: str) -> Response:
    """Remove a registration; its transactions stay and resolve as usual."""
    check_group_name(group)
    groups.delete(state().engine, group)
    return no_content()


@bp.post("/<group>/signing-secret/rotate")
@requires(PRODUCE, "group")
def rotate_signing_secret(group: str) -> Response:
    """A new signing secret; the previous one signs too for the overlap."""
    check_group_name(group)
    app_state = state()
    return json_response(groups.rotate_secret(app_state.engine, app_state.settings, group))
