"""``txmsg subscriptions list|seek``: consumers' subscriptions, their backlog and cursor."""

from __future__ import annotations

import re
from typing import Any

import click

from app.cli.common import JSON_HELP, dump_json, fields, load_settings, make_engine, or_exit, table
from app.domain.limits import MAX_PAGE_LIMIT

COLUMNS = ("topic", "subscription", "backlog", "in_flight", "ack_cursor", "created_at")
PAGE = MAX_PAGE_LIMIT  # the most one read returns


@click.group("subscriptions")
def group() -> None:
    """Subscriptions: backlog, leases, cursor (the same rules as
    /v1/topics/{topic}/subscriptions)."""


@group.command("list")
@click.option("--topic", default=None, help="Only this topic's subscriptions.")
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
def list_(topic: str | None, as_json: bool) -> None:
    """Every subscription by topic and name, with its backlog as the API computes it."""
    from app.domain import subscriptions as subs
    from app.domain.names import check_readable_topic

    if topic is not None:
        or_exit(check_readable_topic, topic)
    engine = make_engine(load_settings())
    topics = [topic] if topic is not None else sorted(
        {t for t, _, _ in or_exit(subs.backlogs, engine)})
    found: list[dict[str, Any]] = []
    for name in topics:
        after = ""
        while True:
            page = or_exit(subs.list_subscriptions, engine, name, after, PAGE)
            found += page["subscriptions"]
            if page["next_after"] is None:
                break
            after = page["next_after"]
    if as_json:
        click.echo(dump_json(found))
    else:
        click.echo(table(found, COLUMNS))


@group.command("seek")
@click.argument("topic")
@click.argument("subscription")
@click.argument("offset")
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
def seek(topic: str, subscription: str, offset: str, as_json: bool) -> None:
    """Acknowledge every offset below OFFSET and none from it on; leases are dropped."""
    from app.domain import subscriptions as subs
    from app.domain.messages import parse_body
    from app.domain.names import check_readable_topic

    or_exit(check_readable_topic, topic)
    or_exit(subs.check_subscription_name, subscription)
    value: Any = int(offset) if re.fullmatch(r"-?[0-9]+", offset) else offset
    request = or_exit(parse_body, subs.SeekIn, {"offset": value})
    described = or_exit(subs.seek, make_engine(load_settings()), topic, subscription,
                        request.offset)
    click.echo(dump_json(described) if as_json else fields(described, COLUMNS))
