"""Signed check callbacks: a signing secret per producer group; no callback URL keeps
user info.

Every registered group gets its secret here (the check service makes one, on first use,
for a group whose registration was deleted before this revision but which still has
transactions to check). User info is removed from the stored callback URLs: they are
refused from now on, and were sent as Basic auth, shown by GET and logged.

Revision ID: 0004_signing_secrets
Revises: 0003_retention
Create Date: 2026-11-29
"""

from __future__ import annotations

import base64
import json
import secrets
from datetime import UTC, datetime
from urllib.parse import urlsplit, urlunsplit

import sqlalchemy as sa
from alembic import op

from app.storage.schema import UTCDateTime

revision = "0004_signing_secrets"
down_revision = "0003_retention"
branch_labels = None
depends_on = None

NAME = sa.String(127)

# as the tables are at this revision, not as the models may later be
producer_group = sa.table("producer_group", sa.column("name", NAME),
                          sa.column("check_urls", sa.Text()))
txn = sa.table("txn", sa.column("id", sa.BigInteger()), sa.column("check_url", sa.Text()))


def upgrade() -> None:
    signing_secret = op.create_table(
        "signing_secret",
        sa.Column("producer_group", NAME, nullable=False),
        sa.Column("secret", sa.Text(), nullable=False),
        sa.Column("previous_secret", sa.Text(), nullable=True),
        sa.Column("previous_expires_at", UTCDateTime(), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("rotated_at", UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("producer_group", name="pk_signing_secret"),
    )
    conn = op.get_bind()
    now = datetime.now(UTC)
    groups = conn.execute(sa.select(producer_group.c.name, producer_group.c.check_urls)).all()
    if groups:
        op.bulk_insert(signing_secret, [
            {"producer_group": name, "secret": _new_secret(), "created_at": now}
            for name, _ in groups])
    for name, urls in groups:
        stored = json.loads(urls)
        cleaned = [_without_user_info(u) for u in stored]
        if cleaned != stored:
            conn.execute(sa.update(producer_group).where(producer_group.c.name == name)
                         .values(check_urls=json.dumps(cleaned)))
    with_user_info = conn.execute(sa.select(txn.c.id, txn.c.check_url)
                                  .where(txn.c.check_url.like("%@%"))).all()
    for txn_id, url in with_user_info:
        cleaned_url = _without_user_info(url)
        if cleaned_url != url:
            conn.execute(sa.update(txn).where(txn.c.id == txn_id)
                         .values(check_url=cleaned_url))


def downgrade() -> None:
    op.drop_table("signing_secret")  # the user info removed is gone for good


def _new_secret() -> str:
    # as app.domain.signing.new_secret does today (a migration does not follow later code)
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


def _without_user_info(url: str) -> str:
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
