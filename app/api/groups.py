"""Producer groups: register, read and remove check callbacks; rotate their signing secret."""

from __future__ import annotations

from app.api.call import Answer, Call
from app.api.http import parse_json
from app.domain import groups
from app.domain.messages import parse_producer_group
from app.domain.names import check_group_name


def put_group(call: Call) -> Answer:
    """Register (or replace) a producer group's check callbacks."""
    group = check_group_name(call.params["group"])
    request = parse_producer_group(parse_json(call.body),
                                   callback_policy=call.state.lifecycle.callback_policy)
    return 200, groups.register(call.state.engine, group, request)


def get_group(call: Call) -> Answer:
    """A producer group's registration, with its signing secret."""
    return 200, groups.get(call.state.engine, check_group_name(call.params["group"]))


def delete_group(call: Call) -> Answer:
    """Remove a registration; its transactions stay and resolve as usual."""
    groups.delete(call.state.engine, check_group_name(call.params["group"]))
    return 204, None


def rotate_signing_secret(call: Call) -> Answer:
    """A new signing secret; the previous one signs too for the overlap."""
    group = check_group_name(call.params["group"])
    return 200, groups.rotate_secret(call.state.engine, call.state.settings, group)
