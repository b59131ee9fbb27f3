"""``txmsg transactions list|show|resume|commit|rollback``: find a stuck or discarded
transaction, read its messages and check history, and resolve it as the API would."""

from __future__ import annotations

from typing import Any

import click

from app.cli.common import JSON_HELP, dump_json, fields, load_settings, make_engine, or_exit, table
from app.domain.limits import MAX_PAGE_LIMIT

LIST_COLUMNS = ("producer_group", "transaction_id", "state", "check_times", "message_count",
                "created_at", "resolved_at")
SHOW_FIELDS = ("producer_group", "transaction_id", "state", "check_times", "message_count",
               "created_at", "resolved_at", "next_check_at", "check_url",
               "check_immunity_seconds")
MESSAGE_COLUMNS = ("message_id", "topic", "offset", "tag", "keys")
CHECK_COLUMNS = ("check_times", "created_at", "result", "url", "detail")
PAGE = MAX_PAGE_LIMIT  # the most one read returns


@click.group("transactions")
def group() -> None:
    """Transactions: list, show (messages and checks), resume checks, commit, roll back.

    The same rules as the API: a state change it refuses is refused here, with its
    problem's code and detail on stderr and exit status 1.
    """


@group.command("list")
@click.option("--group", "group_name", default=None, help="Only this producer group.")
@click.option("--state", default=None,
              help="Only this state: PREPARED, COMMITTED, ROLLED_BACK or DISCARDED.")
@click.option("--limit", default=100, show_default=True, type=click.IntRange(min=1),
              help="At most this many, oldest first.")
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
def list_(group_name: str | None, state: str | None, limit: int, as_json: bool) -> None:
    """Transactions, oldest first."""
    from app.domain import reads
    from app.domain.names import check_group_name

    if group_name is not None:
        or_exit(check_group_name, group_name)
    engine, after = make_engine(), 0
    found: list[dict[str, Any]] = []
    while len(found) < limit:
        page = or_exit(reads.list_transactions, engine, group_name,
                       state.upper() if state else None, after, min(PAGE, limit - len(found)))
        found += page["transactions"]
        if page["next_after"] is None:
            break
        after = int(page["next_after"])
    click.echo(dump_json(found) if as_json else table(found, LIST_COLUMNS))


@group.command("show")
@click.argument("producer_group")
@click.argument("transaction_id")
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
def show(producer_group: str, transaction_id: str, as_json: bool) -> None:
    """A transaction, its messages and its check history."""
    from app.domain import reads

    _check_key(producer_group, transaction_id)
    found = or_exit(reads.get_transaction, make_engine(), producer_group, transaction_id,
                    with_checks=True)
    if as_json:
        click.echo(dump_json(found))
        return
    click.echo(fields(found, SHOW_FIELDS))
    click.echo(f"\nmessages ({len(found['messages'])}):")
    click.echo(table(found["messages"], MESSAGE_COLUMNS))
    click.echo(f"\nchecks ({len(found['checks'])}):")
    click.echo(table(found["checks"], CHECK_COLUMNS))


def _finish_command(name: str, op_name: str, summary: str) -> None:
    @group.command(name, help=summary)
    @click.argument("producer_group")
    @click.argument("transaction_id")
    @click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
    def command(producer_group: str, transaction_id: str, as_json: bool) -> None:
        from app.vocabulary import Op

        _finish(producer_group, transaction_id, Op(op_name), as_json)


_finish_command("resume", "RESUME",
                "Put a DISCARDED transaction back to PREPARED with its check count at 0.")
_finish_command("commit", "COMMIT",
                "Commit a transaction: its messages become visible (durably, once printed).")
_finish_command("rollback", "ROLLBACK", "Roll a transaction back: its messages are dropped.")


def _finish(producer_group: str, transaction_id: str, op: Any, as_json: bool) -> None:
    """Resolve through the lifecycle the API uses (its group-commit writer, its rules),
    recorded with source ``cli``; the writer is closed before the command exits, and the
    receives waiting on the committed topics in the served processes are told."""
    from app.domain.lifecycle import Lifecycle

    _check_key(producer_group, transaction_id)
    settings = load_settings()
    engine = make_engine(settings)
    lifecycle = Lifecycle(engine, settings, publish=True)
    try:
        result = or_exit(lifecycle.finish, producer_group, transaction_id, op, source="cli")
    finally:
        lifecycle.close()
        engine.dispose()
    body = result.body
    if as_json:
        click.echo(dump_json(body))
        return
    unchanged = "" if result.applied else " (already; nothing changed)"
    click.echo(f"{producer_group} {transaction_id}: {body['state']}{unchanged}")
    if "messages" in body:
        click.echo(table(body["messages"], ("message_id", "topic", "offset")))


def _check_key(producer_group: str, transaction_id: str) -> None:
    from app.domain.names import check_group_name, check_transaction_id

    or_exit(check_group_name, producer_group)
    or_exit(check_transaction_id, transaction_id)
