"""The tables. Alembic's history (``migrations/``) creates them; this module describes them.

Table groups:
- ``producer_group``: check-callback registrations.
- ``signing_secret``: each group's secret for signing its check callbacks (and the
  previous one while a rotation's overlap lasts); it outlives a deleted registration, so
  the group's remaining transactions are still checked with signed callbacks.
- ``txn`` and ``half_message``: the half table, one row per transaction and per message.
  ``txn.state`` is the op log folded into one column, kept in the same database
  transaction as the op row that changes it, so that "unresolved" is an indexed lookup
  (the partial index ``ix_txn_due``) whose cost does not grow with resolved history.
- ``op_log``: append-only COMMIT / ROLLBACK / DISCARD / RESUME records.
- ``check_log``: one row per check delivered, with its number, result and duration.
- ``message_log`` and ``topic_offset``: the committed log, with dense per-topic offsets
  (``queue_offset``) handed out from a per-topic counter row inside the commit.
- ``api_token``: scoped bearer tokens; the secret itself is never stored, only its hash.
- ``ui_session``: the dashboard's sessions (``app.storage.ui_sessions``), so that signing
  out ends one in every process; the cookie's session id is stored only hashed.
- ``subscription`` and ``subscription_offset``: shared subscriptions (``app.storage.subscriptions``).
  A subscription is a cursor (every offset below ``ack_cursor`` is acknowledged), a read
  offset (none from it on was looked at) plus one row per offset between them that is
  not acknowledged (leased, nacked, delayed, held by a transaction): an ack deletes its
  row, so what is stored is what is in flight (Pulsar's "individually deleted messages"
  the other way round: the ones not deleted yet), not history.
- ``subscription_consumer``: the named consumers of each subscription and when each was
  last seen (``app.storage.consumers``): liveness for failover and exclusive takeovers.
- ``topic_retention``, ``retention_pending`` and ``retention_cursor``: what retention needs
  (``app.storage.retention``): each topic's first retained offset and retention, the
  transactions whose committed log rows were just deleted, and how far the walk over
  resolved transactions has gone. They are rows of their own, apart from the counter
  row every commit locks, so that retention never waits for a commit nor a commit for it.
- ``forgotten_txn``: the (producer group, transaction id) of every transaction retention
  deleted, with when: a send never reuses one (``app.storage.sends``).

No foreign keys among the transaction tables (``half_message.txn_id``, ``op_log.txn_id``,
``check_log.txn_id`` to ``txn.id``; ``message_log.half_message_id`` to ``half_message.id``):
the storage layer, their only writer, keeps them consistent. A send inserts the
transaction with its messages in one database transaction; a finish or a recorded check
writes its rows in the database transaction that locks or updates the transaction's row
(on SQLite every writer holds the one write lock); a dead letter copies a log row its
subscription still holds, under the subscription's lock, which retention takes before
deleting that row (``subscriptions.expire_below``); retention deletes a transaction with
all its rows in one database transaction, only once it is resolved and no committed log
row refers to its messages. The constraints' per-row trigger queries (one per parent row
deleted, one per child row inserted) made retention 3.5 times slower and taxed every
send and commit. The indexes on those columns stay: the reads and retention's deletes go
through them. ``subscription_offset`` has none either (since revision
``0008_open_offsets_only``): a receive inserts up to a thousand of its rows at once, with
the subscription row it would check locked, and a subscription's rows are deleted with
it in one database transaction.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, TypeAlias

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Float,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    Row,
    Select,
    String,
    Table,
    Text,
    UniqueConstraint,
    and_,
    func,
    text,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator

from app.storage.dialects import of_sqlalchemy
from app.vocabulary import State

NAME = String(127)
# the predicate of the partial index ix_txn_due; a query that should use the index
# repeats it literally (both planners match a partial index only against it)
PREPARED_PREDICATE = f"state = '{State.PREPARED.value}'"
BigId = BigInteger().with_variant(Integer(), "sqlite")
# a row, or a SELECT, of any columns (SQLAlchemy 2.1 types both as variadic generics)
AnyRow: TypeAlias = "Row[*tuple[Any, ...]]"
AnySelect: TypeAlias = "Select[*tuple[Any, ...]]"


class UTCDateTime(TypeDecorator[datetime]):
    """Aware UTC datetimes in Python on every backend (SQLite stores naive text)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if of_sqlalchemy(dialect).naive_datetimes else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

producer_group = Table(
    "producer_group",
    metadata,
    Column("name", NAME, primary_key=True),
    Column("check_urls", Text, nullable=False),
    Column("check_timeout_ms", Integer, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
)

signing_secret = Table(
    "signing_secret",
    metadata,
    Column("producer_group", NAME, primary_key=True),
    Column("secret", Text, nullable=False),
    Column("previous_secret", Text, nullable=True),
    Column("previous_expires_at", UTCDateTime, nullable=True),
    Column("created_at", UTCDateTime, nullable=False),
    Column("rotated_at", UTCDateTime, nullable=True),
)

txn = Table(
    "txn",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("producer_group", NAME, nullable=False),
    Column("transaction_id", String(128), nullable=False),
    Column("state", String(16), nullable=False),
    Column("fingerprint", String(64), nullable=False),
    Column("message_count", Integer, nullable=False),
    Column("check_url", Text, nullable=True),
    Column("check_immunity_seconds", Integer, nullable=False),
    Column("check_times", Integer, nullable=False, server_default=text("0")),
    Column("next_check_at", UTCDateTime, nullable=False),
    Column("lease_owner", String(64), nullable=True),
    Column("lease_until", UTCDateTime, nullable=True),
    Column("created_at", UTCDateTime, nullable=False),
    Column("resolved_at", UTCDateTime, nullable=True),
    # how many subscription offsets this transaction holds now (its acks, applied by its
    # commit): 0 when it has acks (``txn_ack``) but holds none (a discard released them);
    # NULL when it has none, so that finishing it looks for none
    Column("held_acks", Integer, nullable=True),
    UniqueConstraint("producer_group", "transaction_id"),
    Index(
        "ix_txn_due",
        "next_check_at",
        postgresql_where=text(PREPARED_PREDICATE),
        sqlite_where=text(PREPARED_PREDICATE),
    ),
    Index("ix_txn_group_state", "producer_group", "state", "id"),
    # retention walks resolved transactions by resolution time; only they have one
    Index("ix_txn_resolved", "resolved_at", "id",
          postgresql_where=text("resolved_at IS NOT NULL"),
          sqlite_where=text("resolved_at IS NOT NULL")),
)

# the acks a send carried, kept while its transaction is unresolved (PREPARED or
# DISCARDED): a late commit, or a resume, takes them again after a discard released them
txn_ack = Table(
    "txn_ack",
    metadata,
    Column("txn_id", BigId, primary_key=True),
    Column("subscription_id", BigId, primary_key=True),
    Column("queue_offset", BigInteger, primary_key=True, autoincrement=False),
)

half_message = Table(
    "half_message",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("message_id", String(32), nullable=False, unique=True),
    Column("txn_id", BigId, nullable=False),
    Column("seq", Integer, nullable=False),
    Column("topic", NAME, nullable=False),
    Column("tag", Text, nullable=True),
    # key_shared subscriptions deliver one message of a key at a time, in offset order
    Column("ordering_key", String(256), nullable=True),
    Column("keys", Text, nullable=False),
    Column("properties", Text, nullable=False),
    Column("body", LargeBinary, nullable=False),
    Column("body_is_text", Boolean, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    # delayed delivery as sent: at most one of the two; the commit turns it into
    # message_log.deliver_at
    Column("deliver_after_ms", BigInteger, nullable=True),
    Column("deliver_at", UTCDateTime, nullable=True),
    Index("ix_half_message_txn_id_seq", "txn_id", "seq"),
)

op_log = Table(
    "op_log",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("txn_id", BigId, nullable=False),
    Column("op", String(16), nullable=False),
    Column("source", String(16), nullable=False),
    Column("check_times", Integer, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Index("ix_op_log_txn_id", "txn_id"),
)

check_log = Table(
    "check_log",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("txn_id", BigId, nullable=False),
    Column("check_times", Integer, nullable=False),
    Column("result", String(16), nullable=False),
    Column("url", Text, nullable=True),
    Column("detail", Text, nullable=True),
    Column("created_at", UTCDateTime, nullable=False),
    # asking the producer's URLs, in milliseconds (NULL for checks recorded before 0006)
    Column("duration_ms", Float, nullable=True),
    Index("ix_check_log_txn_id", "txn_id"),
    # the dashboard's "checks in the last hour"
    Index("ix_check_log_created_at", "created_at"),
)

message_log = Table(
    "message_log",
    metadata,
    Column("topic", NAME, primary_key=True),
    Column("queue_offset", BigInteger, primary_key=True, autoincrement=False),
    Column("half_message_id", BigId, nullable=False),
    Column("properties", Text, nullable=True),
    Column("committed_at", UTCDateTime, nullable=False),
    # subscriptions do not deliver it before then (NULL: at once)
    Column("deliver_at", UTCDateTime, nullable=True),
    # a dead-letter copy's own id (NULL: the half message's); see ``logged_message_id``
    Column("message_id", String(32), nullable=True),
    Index("ix_message_log_half_message_id", "half_message_id"),
    Index("ix_message_log_message_id", "message_id", unique=True,
          postgresql_where=text("message_id IS NOT NULL"),
          sqlite_where=text("message_id IS NOT NULL")),
)


def logged_message_id() -> Any:
    """The id of a committed log row (joined to its half message): a dead-letter copy's
    own, else its half message's."""
    return func.coalesce(message_log.c.message_id, half_message.c.message_id).label("message_id")

def own_place() -> Any:
    """The join of a half message to its own committed log row: the one its commit
    appended to its topic, not a discard's (on the discard topic) nor a dead-letter copy's
    (a message id of its own), which a chain of subscriptions can bring back to the
    message's own topic."""
    return and_(message_log.c.half_message_id == half_message.c.id,
                message_log.c.topic == half_message.c.topic, message_log.c.message_id.is_(None))


topic_offset = Table(
    "topic_offset",
    metadata,
    Column("topic", NAME, primary_key=True),
    Column("next_offset", BigInteger, nullable=False),
)

api_token = Table(
    "api_token",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("token_id", String(32), nullable=False, unique=True),
    Column("name", String(200), nullable=False),
    Column("scopes", Text, nullable=False),
    # hex SHA-256 of the whole token (see app.domain.tokens for why not a slow hash)
    Column("secret_hash", String(64), nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
)

ui_session = Table(
    "ui_session",
    metadata,
    # hex SHA-256 of the session id the cookie carries
    Column("session_hash", String(64), primary_key=True),
    # the token signed in with (NULL: the admin token); no foreign key, the lookup joins
    # api_token, so a revoked token's sessions open nothing
    Column("token_id", String(32), nullable=True),
    Column("created_at", UTCDateTime, nullable=False),
    Column("expires_at", UTCDateTime, nullable=False, index=True),
)

# dead letters republished by a redrive (app.domain.redrive): each (dead-letter topic,
# offset) once, claimed with the redrive transaction (producer group txmsg-redrive) that
# publishes it to ``target_topic``; ``message_id``, the new message's, once committed
dead_letter_redrive = Table(
    "dead_letter_redrive",
    metadata,
    Column("dlq_topic", NAME, primary_key=True),
    Column("dlq_offset", BigInteger, primary_key=True, autoincrement=False),
    Column("target_topic", NAME, nullable=False),
    Column("transaction_id", NAME, nullable=False),
    Column("message_id", String(32), nullable=True),
    Column("redriven_at", UTCDateTime, nullable=False),
)

topic_retention = Table(
    "topic_retention",
    metadata,
    Column("topic", NAME, primary_key=True),
    # the lowest offset still retained: every offset below it was deleted by retention
    Column("first_offset", BigInteger, nullable=False, server_default=text("0")),
    # NULL: TXMSG_RETENTION_SECONDS
    Column("retention_seconds", Integer, nullable=True),
)

retention_pending = Table(
    "retention_pending",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    # no foreign key: the transaction may already be gone when this row is read
    Column("txn_id", BigId, nullable=False),
)

# the transactions retention forgot: their ids stay taken, so that a send retried after
# retention never publishes a second copy (``app.storage.sends``); kept for good
forgotten_txn = Table(
    "forgotten_txn",
    metadata,
    Column("producer_group", NAME, primary_key=True),
    Column("transaction_id", String(128), primary_key=True),
    Column("forgotten_at", UTCDateTime, nullable=False),
)

retention_cursor = Table(
    "retention_cursor",
    metadata,
    Column("kind", String(32), primary_key=True),
    Column("resolved_at", UTCDateTime, nullable=True),
    Column("txn_id", BigInteger, nullable=False, server_default=text("0")),
)

subscription = Table(
    "subscription",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("topic", NAME, nullable=False),
    Column("name", NAME, nullable=False),
    Column("ack_timeout_ms", Integer, nullable=False),
    Column("max_redeliveries", Integer, nullable=False),
    Column("backoff_min_ms", Integer, nullable=False),
    Column("backoff_max_ms", Integer, nullable=False),
    Column("dead_letter_topic", NAME, nullable=False),
    # the lowest unacknowledged offset: every offset below it is acknowledged
    Column("ack_cursor", BigInteger, nullable=False),
    # offsets from read_offset on were never looked at; below it, one without a
    # subscription_offset row is acknowledged
    Column("read_offset", BigInteger, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    # shared | key_shared | failover | exclusive (``app.domain.subscription_types``)
    Column("type", String(16), nullable=False, server_default="shared"),
    Column("consumer_timeout_ms", Integer, nullable=False, server_default="30000"),
    Column("tag_filter", Text, nullable=False, server_default="*"),
    # failover and exclusive: the consumer given messages (while it is alive)
    Column("active_consumer", NAME, nullable=True),
    UniqueConstraint("topic", "name"),
)

subscription_consumer = Table(
    "subscription_consumer",
    metadata,
    Column("subscription_id", BigId, primary_key=True),
    Column("name", NAME, primary_key=True),
    # alive while this is less than the subscription's consumer_timeout_ms ago
    Column("last_seen", UTCDateTime, nullable=False),
)

subscription_offset = Table(
    "subscription_offset",
    metadata,
    Column("subscription_id", BigId, primary_key=True),
    Column("queue_offset", BigInteger, primary_key=True, autoincrement=False),
    # deliveries so far (a message's redelivery_count is this before its delivery)
    Column("deliveries", Integer, nullable=False),
    # leased to a receive until then
    Column("leased_until", UTCDateTime, nullable=True),
    # deliverable (again) from then: a lease's end plus the backoff, a nack's delay, a
    # delayed message's time, a release's time (rows written before revision 0009 had
    # NULL for "now"; it set them in the past)
    Column("next_at", UTCDateTime, nullable=True),
    # txn.id of the unresolved transaction whose commit acknowledges it (not redelivered
    # meanwhile)
    Column("held_by", BigId, nullable=True),
    # the consumer its lease was given to (NULL: none named, or not leased)
    Column("consumer", NAME, nullable=True),
    # its message's ordering key; on key_shared, a keyed row that is not its key's lowest
    # waits with next_at NULL (out of the due index) until the one before it is acknowledged
    Column("ordering_key", String(256), nullable=True),
    Index("ix_subscription_offset_key", "subscription_id", "ordering_key", "queue_offset",
          postgresql_where=text("ordering_key IS NOT NULL"),
          sqlite_where=text("ordering_key IS NOT NULL")),
    Index("ix_subscription_offset_held_by", "held_by",
          postgresql_where=text("held_by IS NOT NULL"),
          sqlite_where=text("held_by IS NOT NULL")),
    # what is due: every receive asks whether anything is, without reading the rows of
    # the leases out (nor, on PostgreSQL, the acknowledged ones until a vacuum). Its
    # predicate is one that only the due-time queries imply: with ``held_by IS NULL``,
    # the planner took it for an ack's rows too, and read every row of the subscription
    Index("ix_subscription_offset_due", "subscription_id", "next_at",
          postgresql_where=text("next_at IS NOT NULL"),
          sqlite_where=text("next_at IS NOT NULL")),
)
