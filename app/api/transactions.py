"""Transactions: send half messages, commit, roll back, resume checks, query."""

from __future__ import annotations

from flask import Blueprint, Response, request

from app.api.http import int_arg, json_body, json_response, limit_arg, state
from app.domain import reads
from app.domain.messages import parse_transaction
from app.domain.names import check_group_name, check_transaction_id
from app.domain.states import Op

bp = Blueprint("transactions", __name__, url_prefix="/v1/producer-groups/<group>/transactions")


@bp.post("")
def send(group: str) -> Response:
    """Store the half messages of a transaction (201), or repeat a retried send (200)."""
    check_group_name(group)
    st = state()
    txn = parse_transaction(json_body(), max_body_bytes=st.settings.max_body_bytes)
    result = st.lifecycle.send(group, txn)
    return json_response(result.body, 201 if result.created else 200)


def _finish(group: str, transaction_id: str, op: Op) -> Response:
    check_group_name(group)
    check_transaction_id(transaction_id)
    return json_response(state().lifecycle.finish(group, transaction_id, op).body)


@bp.post("/<transaction_id>/commit")
def commit(group: str, transaction_id: str) -> Response:
    """Make the transaction's messages visible; answered once they are durable."""
    return _finish(group, transaction_id, Op.COMMIT)


@bp.post("/<transaction_id>/rollback")
def rollback(group: str, transaction_id: str) -> Response:
    """Drop the transaction's messages for good."""
    return _finish(group, transaction_id, Op.ROLLBACK)


@bp.post("/<transaction_id>/resume-check")
def resume_check(group: str, transaction_id: str) -> Response:
    """Put a DISCARDED transaction back to PREPARED with its check count at 0."""
    return _finish(group, transaction_id, Op.RESUME)


@bp.get("/<transaction_id>")
def get_transaction(group: str, transaction_id: str) -> Response:
    """One transaction with its state, check count and messages."""
    check_group_name(group)
    check_transaction_id(transaction_id)
    return json_response(reads.get_transaction(state().engine, group, transaction_id))


@bp.get("")
def list_transactions(group: str) -> Response:
    """The group's transactions, oldest first; ``state`` filters, ``after`` pages."""
    check_group_name(group)
    return json_response(reads.list_transactions(
        state().engine, group, request.args.get("state"), int_arg("after", 0, 0), limit_arg()))
