"""Producer groups: register, read and remove check callbacks."""

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
    request = parse_producer_group(json_body())
    return json_response(groups.register(state().engine, group, request))


@bp.get("/<group>")
@requires(PRODUCE, "group")
def get_group(group: str) -> Response:
    """A producer group's registration."""
    check_group_name(group)
    return json_response(groups.get(state().engine, group))


@bp.delete("/<group>")
@requires(PRODUCE, "group")
def delete_group(group: str) -> Response:
    """Remove a registration; its transactions stay and resolve as usual."""
    check_group_name(group)
    groups.delete(state().engine, group)
    return no_content()
