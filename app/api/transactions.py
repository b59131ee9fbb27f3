"""Transactions: send half messages, commit, roll back, resume checks, query."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, request

from app.api.http import int_arg, json_response, limit_arg, parse_json, state
from app.domain import reads
from app.domain.lifecycle import Lifecycle
from app.domain.messages import parse_transaction
from app.domain.names import check_group_name, check_transaction_id
from app.domain.states import Op

bp = Blueprint("transactions", __name__, url_prefix="/v1/producer-groups/<group>/transactions")


def send_transaction(lifecycle: Lifecycle, group: str, raw: bytes) -> tuple[dict[str, Any], int]:
    """Store the half messages of a transaction (201), or repeat a retried send (200).

    Shared by the Flask route and the hot-route dispatcher (``app.api.hot``).
    """
    check_group_name(group)
    txn = parse_transaction(parse_json(raw), max_body_bytes=lifecycle.settings.max_body_bytes)
    result = lifecycle.send(group, txn)
    return result.body, 201 if result.created else 200


def finish_transaction(lifecycle: Lifecycle, group: str, transaction_id: str,
                       op: Op) -> dict[str, Any]:
    """Commit, roll back or resume checks: the answer's body (always 200)."""
    check_group_name(group)
    check_transaction_id(transaction_id)
    return lifecycle.finish(group, transaction_id, op).body


@bp.post("")
def send(group: str) -> Response:
    return json_response(*send_transaction(state().lifecycle, group,
                                           request.get_data(cache=False)))


def _finish(group: str, transaction_id: str, op: Op) -> Response:
    return json_response(finish_transaction(state().lifecycle, group, transaction_id, op))


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
