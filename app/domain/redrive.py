"""Redrive: dead letters republished to their ``REAL_TOPIC`` (or another topic) as new
messages, each dead letter once.

A batch of dead letters is one transaction of the producer group ``REDRIVE_GROUP``,
sent and committed through ``Lifecycle`` (the API's send and commit, with their rules).
Each dead letter is republished once, however often its range is redriven, by a claim
written before the send: (dead-letter topic, offset) → the batch's transaction id, in
``dead_letter_redrive``; once a dead letter is claimed no later redrive picks it. The
claim is made before the commit, so a redrive stopped in between (a crash, the database
lost) leaves claims without a new message id: the next redrive of that topic first
finishes them, sending the same transaction again (a send is idempotent by its id, so a
batch sent before the stop is not sent twice) and committing it. The new messages keep
the dead letter's body, keys, tag, ordering key and properties (``REAL_TOPIC`` and ``ORIGIN_*``).

``REDRIVE_GROUP`` is registered on first use, with a check URL that is never called: its
transactions are sent immune to checks (``CHECK_IMMUNITY_SECONDS``) and committed at once,
or finished by the next redrive of their topic.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from itertools import groupby
from typing import Any

import orjson
from sqlalchemy import Engine
from sqlalchemy import exc as sa_exc

from app.domain import clock, groups
from app.domain.lifecycle import Lifecycle
from app.domain.message_shapes import body_fields
from app.domain.messages import MessageIn, ProducerGroupIn, TransactionIn
from app.domain.names import check_readable_topic, is_reserved_topic
from app.errors import Conflict, InvalidRequest, NotFound
from app.problems import ProblemCode
from app.storage import redrives as store
from app.storage.db import write_transaction
from app.vocabulary import Op

log = logging.getLogger(__name__)

REDRIVE_GROUP = "txmsg-redrive"
BATCH_SIZE = 100
CHECK_IMMUNITY_SECONDS = 365 * 24 * 3600
_NEVER_CALLED = "http://127.0.0.1:9/txmsg-redrive-is-never-checked"


def parse_offsets(text: str | None) -> tuple[int | None, int | None]:
    """``a..b`` (either end may be left out: ``a..``, ``..b``), or one offset ``n``."""
    if not text:
        return None, None
    lo, sep, hi = text.partition("..")
    try:
        first = int(lo) if lo.strip() else None
        last = (int(hi) if hi.strip() else None) if sep else first
    except ValueError:
        raise InvalidRequest(f"offsets {text!r}: give a..b, a.., ..b or n",
                             code=ProblemCode.INVALID_OFFSETS) from None
    if (first is not None and first < 0) or (first is not None and last is not None
                                             and last < first):
        raise InvalidRequest(f"offsets {text!r}: not a range of offsets",
                             code=ProblemCode.INVALID_OFFSETS)
    return first, last


def redrive(engine: Engine, lifecycle: Lifecycle, dlq_topic: str, *, first: int | None = None,
            last: int | None = None, to: str | None = None, source: str = "cli",
            batch_size: int = BATCH_SIZE) -> dict[str, Any]:
    """Republish the dead letters of ``dlq_topic`` in ``[first, last]`` not redriven yet;
    the answer lists each as ``{"dlq_offset", "message_id", "topic", "offset"}``."""
    check_readable_topic(dlq_topic)
    if to is not None:
        check_readable_topic(to)
        if is_reserved_topic(to):
            raise InvalidRequest(f"topic {to!r} is reserved and cannot be sent to",
                                 code=ProblemCode.RESERVED_TOPIC)
    _registered(engine)
    done: list[dict[str, Any]] = []
    with write_transaction(engine) as conn:
        left = store.unpublished(conn, dlq_topic)
    for redrive_id, rows in groupby(left, key=lambda r: r.redrive_id):
        batch = list(rows)
        done += _publish(engine, lifecycle, dlq_topic, redrive_id, batch,
                         {r.queue_offset: r.target_topic for r in batch}, source)
    while True:
        with write_transaction(engine) as conn:
            batch = store.unclaimed(conn, dlq_topic, first, last, batch_size)
            if not batch:
                break
            targets = {r.queue_offset: _target(r, to) for r in batch}
            redrive_id = f"redrive-{uuid.uuid4().hex}"
            try:
                store.claim(conn, dlq_topic, targets, redrive_id, clock.utcnow())
            except sa_exc.IntegrityError:
                raise Conflict(f"another redrive of {dlq_topic!r} is running",
                               code=ProblemCode.REDRIVE_RUNNING) from None
        done += _publish(engine, lifecycle, dlq_topic, redrive_id, batch, targets, source)
        if len(batch) < batch_size:
            break
    return {"dlq_topic": dlq_topic, "redriven": done}


def _registered(engine: Engine) -> None:
    try:
        groups.get(engine, REDRIVE_GROUP)
    except NotFound:
        groups.register(engine, REDRIVE_GROUP,
                        ProducerGroupIn.model_validate({"check_urls": [_NEVER_CALLED]}))


def _target(row: Any, to: str | None) -> str:
    if to is not None:
        return to
    real = orjson.loads(row.properties).get("REAL_TOPIC")
    if not real:
        raise InvalidRequest(f"offset {row.queue_offset} has no REAL_TOPIC property: not a "
                             "dead letter; give the topic to redrive to",
                             code=ProblemCode.NO_REAL_TOPIC)
    return str(real)


def _publish(engine: Engine, lifecycle: Lifecycle, dlq_topic: str, redrive_id: str,
             rows: Sequence[Any], targets: dict[int, str], source: str) -> list[dict[str, Any]]:
    """Send and commit one batch as transaction ``redrive_id``, then record the new ids."""
    request = TransactionIn(transaction_id=redrive_id,
                            check_immunity_seconds=CHECK_IMMUNITY_SECONDS,
                            messages=[_message(r, targets[r.queue_offset]) for r in rows])
    lifecycle.send(REDRIVE_GROUP, request)
    result = lifecycle.finish(REDRIVE_GROUP, redrive_id, Op.COMMIT, source="redrive")
    answered = result.body.get("messages", [])
    out = [{"dlq_offset": r.queue_offset, "message_id": m["message_id"], "topic": m["topic"],
            "offset": m["offset"]} for r, m in zip(rows, answered, strict=True)]
    with write_transaction(engine) as conn:
        store.published(conn, dlq_topic, {o["dlq_offset"]: o["message_id"] for o in out})
    log.info("dead letters redriven (%s): %s offsets %s as %s/%s to %s", source, dlq_topic,
             _ranges([r.queue_offset for r in rows]), REDRIVE_GROUP, redrive_id,
             ", ".join(sorted(set(targets.values()))))
    return out


def _message(row: Any, topic: str) -> MessageIn:
    body = body_fields(row.body, row.body_is_text)
    return MessageIn.model_validate({"topic": topic, **body, "keys": orjson.loads(row.keys),
                                     "tag": row.tag, "ordering_key": row.ordering_key,
                                     "properties": orjson.loads(row.properties)})


def _ranges(offsets: Sequence[int]) -> str:
    """Offsets as ``a..b`` runs: ``0..4,7``."""
    runs: list[str] = []
    for _, group in groupby(enumerate(sorted(offsets)), key=lambda p: p[1] - p[0]):
        run = [o for _, o in group]
        runs.append(f"{run[0]}..{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(runs)
