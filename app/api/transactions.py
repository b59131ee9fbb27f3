"""Transactions: send half messages, commit, roll back, resume checks, query."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, request

from app.api.access import current_principal, requires
from app.api.bodies import carries_messages
from app.api.http import int_arg, json_response, limit_arg, parse_json, request_body, state
from app.api.tracing import flask_trace
from app.domain import reads
from app.domain.access import CONSUME, PRODUCE, Principal
from app.domain.lifecycle import Lifecycle, SendResult
from app.domain.messages import TransactionIn, parse_transaction
from app.domain.names import check_group_name, check_transaction_id
from app.domain.trace_context import TraceContext, stamp
from app.errors import Forbidden
from app.vocabulary import Op

bp = Blueprint("transactions", __name__, url_prefix="/v1/producer-groups/<group>/transactions")


def parse_send(lifecycle: Lifecycle, group: str, raw: bytes,
               trace: TraceContext | None = None) -> TransactionIn:
    """A send's group name and body, validated: the transaction to store, its messages
    carrying the request's trace context (``app.domain.trace_context``).

    Shared by the Flask route and the ASGI front (``app.api.asgi``), as are
    ``send_answer`` and ``check_finish``.
    """
    check_group_name(group)
    txn = parse_transaction(parse_json(raw), max_body_bytes=lifecycle.settings.max_body_bytes,
                            callback_policy=lifecycle.callback_policy)
    return txn if trace is None else stamp(txn, trace)


def check_ack_scopes(principal: Principal, request: TransactionIn) -> None:
    """Acks in a send act on subscriptions: each needs ``consume:<topic>`` as well."""
    for topic, _ in request.ack_set():
        if not principal.may(CONSUME, topic):
            scope = f"{CONSUME}:{topic}"
            raise Forbidden(f"acks on topic {topic!r} need the scope {scope!r}",
                            required_scope=scope)


def send_answer(result: SendResult) -> tuple[dict[str, Any], int]:
    """A stored transaction (201), or a retried send repeated (200)."""
    return result.body, 201 if result.created else 200


def check_finish(group: str, transaction_id: str) -> None:
    check_group_name(group)
    check_transaction_id(transaction_id)


@bp.post("")
@requires(PRODUCE, "group")
@carries_messages
def send(group: str) -> Response:
    """Store half messages (with acks: each acked topic needs consume:<topic> too)."""
    lifecycle = state().lifecycle
    trace = flask_trace()
    txn = parse_send(lifecycle, group, request_body(), trace)
    check_ack_scopes(current_principal(), txn)
    return json_response(*send_answer(lifecycle.send(group, txn, trace)))


def _finish(group: str, transaction_id: str, op: Op) -> Response:
    """Commit, roll back or resume checks (always 200)."""
    check_finish(group, transaction_id)
    return json_response(state().lifecycle.finish(group, transaction_id, op,
                                                  trace=flask_trace()).body)


@bp.post("/<transaction_id>/commit")
@requires(PRODUCE, "group")
def commit(group: str, transaction_id: str) -> Response:
    """Make the transaction's messages visible; answered once they are durable."""
    return _finish(group, transaction_id, Op.COMMIT)


@bp.post("/<transaction_id>/rollback")
@requires(PRODUCE, "group")
def rollback(group: str, transaction_id: str) -> Response:
    """Drop the transaction's messages for good."""
    return _finish(group, transaction_id, Op.ROLLBACK)


@bp.post("/<transaction_id>/resume-check")
@requires(PRODUCE, "group")
def resume_check(group: str, transaction_id: str) -> Response:
    """Put a DISCARDED transaction back to PREPARED with its check count at 0."""
    return _finish(group, transaction_id, Op.RESUME)


@bp.get("/<transaction_id>")
@requires(PRODUCE, "group")
def get_transaction(group: str, transaction_id: str) -> Response:
    """One transaction with its state, check count and messages."""
    check_group_name(group)
    check_transaction_id(transaction_id)
    return json_response(reads.get_transaction(state().engine, group, transaction_id))


@bp.get("")
@requires(PRODUCE, "group")
def list_transactions(group: str) -> Response:
    """The group's transactions, oldest first; ``state`` filters, ``after`` pages."""
    check_group_name(group)
    return json_response(reads.list_transactions(
        state().engine, group, request.args.get("state"), int_arg("after", 0, 0), limit_arg()))
