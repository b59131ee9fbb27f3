"""``txmsg topics list|show|retention``: topics, their retained offsets, their retention."""

from __future__ import annotations

import re
from typing import Any

import click

from app.cli.common import (
    JSON_HELP,
    dump_json,
    fields,
    load_settings,
    make_engine,
    or_exit,
    table,
)
from app.domain.limits import MAX_PAGE_LIMIT

COLUMNS = ("topic", "first_offset", "next_offset", "retention_seconds")
PAGE = MAX_PAGE_LIMIT  # the most one read returns


@click.group("topics")
def group() -> None:
    """Topics: offsets still retained and retention (the same rules as /v1/topics)."""


@group.command("list")
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
def list_(as_json: bool) -> None:
    """Every topic by name, with its first and next offset and its retention."""
    from app.domain import retention

    settings = load_settings()
    engine, found, after = make_engine(settings), [], ""
    while True:
        page = or_exit(retention.list_topics, engine, settings, after, PAGE)
        found += page["topics"]
        if page["next_after"] is None:
            break
        after = page["next_after"]
    _echo(found, as_json)


@group.command("show")
@click.argument("topic")
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
def show(topic: str, as_json: bool) -> None:
    """One topic."""
    from app.domain import retention
    from app.domain.names import check_readable_topic

    or_exit(check_readable_topic, topic)
    settings = load_settings()
    _echo(or_exit(retention.get_topic, make_engine(settings), settings, topic), as_json)


@group.command("retention")
@click.argument("topic")
@click.argument("seconds", metavar="SECONDS|default")
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
def retention_(topic: str, seconds: str, as_json: bool) -> None:
    """Set a topic's retention in seconds (60..31536000), or `default` for
    TXMSG_RETENTION_SECONDS; a topic not known yet is created."""
    from app.domain import retention
    from app.domain.messages import parse_topic_retention
    from app.domain.names import check_readable_topic

    or_exit(check_readable_topic, topic)
    value: Any = None if seconds == "default" else (
        int(seconds) if re.fullmatch(r"-?[0-9]+", seconds) else seconds)
    request = or_exit(parse_topic_retention, {"retention_seconds": value})
    settings = load_settings()
    _echo(or_exit(retention.set_topic_retention, make_engine(settings), settings, topic,
                  request), as_json)


def _echo(topics: Any, as_json: bool) -> None:
    """A topic (as fields) or a list of them (a table): JSON as the API answers, or text
    whose retention says when it is the default."""
    if as_json:
        click.echo(dump_json(topics))
        return
    rows = [{**t, "retention_seconds": f"{t['retention_seconds']}"
             + (" (default)" if t["retention_default"] else "")}
            for t in (topics if isinstance(topics, list) else [topics])]
    click.echo(table(rows, COLUMNS) if isinstance(topics, list) else fields(rows[0], COLUMNS))
