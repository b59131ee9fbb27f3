"""``txmsg subscriptions list|show|create|delete|seek``: consumers' subscriptions, their
settings, backlog, cursor and consumers."""

from __future__ import annotations

import re
from typing import Any

import click

from app.cli.common import JSON_HELP, dump_json, fields, load_settings, make_engine, or_exit, table
from app.domain.limits import MAX_PAGE_LIMIT

COLUMNS = ("topic", "subscription", "type", "tag_filter", "consumers", "backlog", "in_flight",
           "ack_cursor", "created_at")
CURSOR = ("topic", "subscription", "backlog", "in_flight", "ack_cursor", "created_at")
SHOWN = ("topic", "subscription", "type", "tag_filter", "ack_timeout_ms", "max_redeliveries",
         "redelivery_backoff", "dead_letter_topic", "consumer_timeout_ms", "backlog",
         "in_flight", "ack_cursor", "waiting", "created_at")
CONSUMER_COLUMNS = ("name", "last_seen", "in_flight", "active")
PAGE = MAX_PAGE_LIMIT  # the most one read returns


@click.group("subscriptions")
def group() -> None:
    """Subscriptions: settings, backlog, leases, cursor, consumers (the same rules as
    /v1/topics/{topic}/subscriptions)."""


@group.command("list")
@click.option("--topic", default=None, help="Only this topic's subscriptions.")
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
def list_(topic: str | None, as_json: bool) -> None:
    """Every subscription by topic and name, with its type, tag filter, consumers alive and
    backlog as the API computes them."""
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
        click.echo(table([{**s, "consumers": len(s["consumers"])} for s in found], COLUMNS))


@group.command("show")
@click.argument("topic")
@click.argument("subscription")
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
def show(topic: str, subscription: str, as_json: bool) -> None:
    """One subscription: its settings, backlog, cursor, messages waiting behind their key
    (key_shared) and its consumers alive."""
    from app.domain import subscriptions as subs

    topic, subscription = _names(topic, subscription)
    _echo(or_exit(subs.get, make_engine(load_settings()), topic, subscription), as_json)


@group.command("create")
@click.argument("topic")
@click.argument("subscription")
@click.option("--type", "type_", default=None,
              help="shared (default), key_shared, failover or exclusive.")
@click.option("--tag-filter", default=None, help="`*` (default) or tags joined by `||`.")
@click.option("--consumer-timeout-ms", default=None)
@click.option("--ack-timeout-ms", default=None)
@click.option("--max-redeliveries", default=None)
@click.option("--initial-position", default=None, help="latest (default) or earliest.")
@click.option("--dead-letter-topic", default=None)
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
def create(topic: str, subscription: str, type_: str | None, tag_filter: str | None,
           consumer_timeout_ms: str | None, ack_timeout_ms: str | None,
           max_redeliveries: str | None, initial_position: str | None,
           dead_letter_topic: str | None, as_json: bool) -> None:
    """Create a subscription as PUT /v1/topics/{topic}/subscriptions/{subscription} does
    (same defaults and refusals); one that exists has the options given changed."""
    from app.domain import subscriptions as subs
    from app.domain.messages import parse_body

    topic, subscription = _names(topic, subscription)
    given = {"type": type_, "tag_filter": tag_filter,
             "consumer_timeout_ms": _number(consumer_timeout_ms),
             "ack_timeout_ms": _number(ack_timeout_ms),
             "max_redeliveries": _number(max_redeliveries),
             "initial_position": initial_position, "dead_letter_topic": dead_letter_topic}
    request = or_exit(parse_body, subs.SubscriptionIn,
                      {k: v for k, v in given.items() if v is not None})
    described, _ = or_exit(subs.put, make_engine(load_settings()), topic, subscription,
                           request)
    _echo(described, as_json)


@group.command("delete")
@click.argument("topic")
@click.argument("subscription")
def delete(topic: str, subscription: str) -> None:
    """Remove a subscription, its cursor, leases and consumers."""
    from app.domain import subscriptions as subs

    topic, subscription = _names(topic, subscription)
    or_exit(subs.delete, make_engine(load_settings()), topic, subscription)
    click.echo(f"deleted subscription {subscription!r} on topic {topic!r}")


@group.command("seek")
@click.argument("topic")
@click.argument("subscription")
@click.argument("offset")
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
def seek(topic: str, subscription: str, offset: str, as_json: bool) -> None:
    """Acknowledge every offset below OFFSET and none from it on; leases are dropped."""
    from app.domain import subscriptions as subs
    from app.domain.messages import parse_body

    topic, subscription = _names(topic, subscription)
    request = or_exit(parse_body, subs.SeekIn, {"offset": _number(offset)})
    described = or_exit(subs.seek, make_engine(load_settings()), topic, subscription,
                        request.offset)
    click.echo(dump_json(described) if as_json else fields(described, CURSOR))


def _names(topic: str, subscription: str) -> tuple[str, str]:
    """As the API checks a subscription's path (refused: exit status 1)."""
    from app.domain import subscriptions as subs
    from app.domain.names import check_readable_topic

    return (or_exit(check_readable_topic, topic),
            or_exit(subs.check_subscription_name, subscription))


def _number(value: str | None) -> Any:
    """An integer argument as the API would get it: digits are a number, anything else
    stays text for the validation to refuse with its code."""
    return int(value) if value is not None and re.fullmatch(r"-?[0-9]+", value) else value


def _echo(described: dict[str, Any], as_json: bool) -> None:
    """A subscription as the API answers it, or its fields then a table of its
    consumers."""
    if as_json:
        click.echo(dump_json(described))
        return
    click.echo(fields(described, SHOWN))
    click.echo("consumers:" if described["consumers"] else "consumers: none")
    if described["consumers"]:
        click.echo(table(described["consumers"], CONSUMER_COLUMNS))
