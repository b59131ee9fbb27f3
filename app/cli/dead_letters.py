"""``txmsg dead-letters redrive``: dead letters republished to their topic, each once."""

from __future__ import annotations

import click

from app.cli.common import JSON_HELP, dump_json, load_settings, make_engine, or_exit, table


@click.group("dead-letters")
def group() -> None:
    """Dead-letter topics (a subscription's ``dead_letter_topic``)."""


@group.command("redrive")
@click.argument("dlq_topic")
@click.option("--offsets", default=None, metavar="A..B",
              help="Only these offsets of DLQ_TOPIC (a..b, a.., ..b or n; default: all).")
@click.option("--to", "to", default=None, metavar="TOPIC",
              help="Publish to TOPIC instead of each dead letter's REAL_TOPIC.")
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
def redrive(dlq_topic: str, offsets: str | None, to: str | None, as_json: bool) -> None:
    """Republish DLQ_TOPIC's dead letters as new messages, one transaction per batch;
    a dead letter redriven before is skipped."""
    from app.domain import redrive as domain
    from app.domain.lifecycle import Lifecycle

    first, last = or_exit(domain.parse_offsets, offsets)
    settings = load_settings()
    engine = make_engine(settings)
    lifecycle = Lifecycle(engine, settings, publish=True)
    try:
        done = or_exit(domain.redrive, engine, lifecycle, dlq_topic, first=first, last=last,
                       to=to, source="cli")
    finally:
        lifecycle.close()
        engine.dispose()
    if as_json:
        click.echo(dump_json(done))
        return
    click.echo(f"{dlq_topic}: {len(done['redriven'])} dead letter(s) redriven")
    if done["redriven"]:
        click.echo(table(done["redriven"], ("dlq_offset", "message_id", "topic", "offset")))
