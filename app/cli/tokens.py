"""``txmsg tokens create|list|revoke``: scoped bearer tokens, made on the database."""

from __future__ import annotations

import click

from app.cli.common import JSON_HELP, dump_json, make_engine, or_exit, table
from app.domain.limits import MAX_PAGE_LIMIT

COLUMNS = ("token_id", "name", "scopes", "created_at")


@click.group("tokens")
def group() -> None:
    """Scoped bearer tokens (access control), made on the database directly.

    The same rules as /v1/tokens; a token revoked here is refused by running servers
    within 5 s.
    """


@group.command("create")
@click.option("--name", required=True, help="A label for people: who holds it, what for.")
@click.option("--scope", "scopes", multiple=True, required=True,
              help="admin, metrics, produce:<group>, consume:<topic> (* for every name); "
                   "repeatable.")
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
def create(name: str, scopes: tuple[str, ...], as_json: bool) -> None:
    """Make a token; its secret is printed this once."""
    from app.domain import tokens as domain

    request = or_exit(domain.parse_token_request, {"name": name, "scopes": list(scopes)})
    made = or_exit(domain.create, make_engine(), request)
    if as_json:
        click.echo(dump_json(made))
        return
    click.echo(table([made], COLUMNS))
    click.echo(f"token (shown this once, store it now): {made['token']}")


@group.command("list")
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
def list_(as_json: bool) -> None:
    """Every token, oldest first, without secrets."""
    from app.domain import tokens as domain

    engine, found, after = make_engine(), [], 0
    while True:
        page = or_exit(domain.list_tokens, engine, after, MAX_PAGE_LIMIT)
        found += page["tokens"]
        if page["next_after"] is None:
            break
        after = int(page["next_after"])
    click.echo(dump_json(found) if as_json else table(found, COLUMNS))


@group.command("revoke")
@click.argument("token_id")
def revoke(token_id: str) -> None:
    """Revoke a token."""
    from app.domain import tokens as domain

    or_exit(domain.revoke, make_engine(), or_exit(domain.check_token_id, token_id))
    click.echo(f"revoked {token_id}")
