"""Transactions: send half messages, commit, roll back, resume checks, query.

A send, a commit and a rollback wait for their group-commit batch on the front's event
loop, holding no thread; the others run on the front's threads.
"""

from __future__ import annotations

from app import tracing
from app.api.call import Answer, Call
from app.api.http import parse_json
from app.api.tracing import request_trace
from app.domain import reads
from app.domain.access import CONSUME
from app.domain.lifecycle import SendResult
from app.domain.messages import TransactionIn, parse_transaction
from app.domain.names import check_group_name, check_transaction_id
from app.domain.trace_context import TraceContext, stamp
from app.errors import Forbidden
from app.vocabulary import Op


def _send_request(call: Call) -> tuple[str, TransactionIn, TraceContext | None]:
    """The group and the transaction to store, its messages carrying the request's trace
    context (``app.domain.trace_context``), and that context; acks in a send act on
    subscriptions, so each acked topic needs ``consume:<topic>`` as well."""
    group = check_group_name(call.params["group"])
    lifecycle = call.state.lifecycle
    trace = request_trace(call.headers)
    txn = parse_transaction(parse_json(call.body),
                            max_body_bytes=lifecycle.settings.max_body_bytes,
                            callback_policy=lifecycle.callback_policy)
    if trace is not None:
        txn = stamp(txn, trace)
    for topic, _ in txn.ack_set() if txn.acks else ():
        if not call.principal.may(CONSUME, topic):
            scope = f"{CONSUME}:{topic}"
            raise Forbidden(f"acks on topic {topic!r} need the scope {scope!r}",
                            required_scope=scope)
    return group, txn, trace


def _sent(result: SendResult) -> Answer:
    """A stored transaction (201), or a retried send repeated (200)."""
    return 201 if result.created else 200, result.body


async def send(call: Call) -> Answer:
    """Store half messages (with acks: each acked topic needs consume:<topic> too)."""
    group, txn, trace = _send_request(call)
    return _sent(await call.state.lifecycle.send_async(group, txn, trace))


def _names(call: Call) -> tuple[str, str]:
    return (check_group_name(call.params["group"]),
            check_transaction_id(call.params["transaction_id"]))


def _finish_trace(call: Call) -> TraceContext | None:
    """The request's trace context, for a finish's span: read only while tracing is on
    (unlike a send's, it is not stored)."""
    return request_trace(call.headers) if tracing.TRACER is not None else None


async def _finish_async(call: Call, op: Op) -> Answer:
    group, transaction_id = _names(call)
    return 200, (await call.state.lifecycle.finish_async(group, transaction_id, op,
                                                         _finish_trace(call))).body


def _finish(call: Call, op: Op) -> Answer:
    """Resume checks, on a thread (always 200)."""
    group, transaction_id = _names(call)
    return 200, call.state.lifecycle.finish(group, transaction_id, op,
                                            trace=_finish_trace(call)).body


async def commit(call: Call) -> Answer:
    """Make the transaction's messages visible; answered once they are durable."""
    return await _finish_async(call, Op.COMMIT)


async def rollback(call: Call) -> Answer:
    """Drop the transaction's messages for good."""
    return await _finish_async(call, Op.ROLLBACK)


def resume_check(call: Call) -> Answer:
    """Put a DISCARDED transaction back to PREPARED with its check count at 0."""
    return _finish(call, Op.RESUME)


def get_transaction(call: Call) -> Answer:
    """One transaction with its state, check count and messages."""
    group, transaction_id = _names(call)
    return 200, reads.get_transaction(call.state.engine, group, transaction_id)


def list_transactions(call: Call) -> Answer:
    """The group's transactions, oldest first; ``state`` filters, ``after`` pages."""
    group = check_group_name(call.params["group"])
    return 200, reads.list_transactions(call.state.engine, group, call.arg("state"),
                                        call.arg("after"), call.arg("limit"))
