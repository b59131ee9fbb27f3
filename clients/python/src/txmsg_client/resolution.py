"""The producer's answer about a transaction, and the protocol of whoever gives it."""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Protocol


class Resolution(StrEnum):
    """A producer's answer about one transaction (RocketMQ's LocalTransactionState)."""

    COMMIT = "COMMIT"
    ROLLBACK = "ROLLBACK"
    UNKNOWN = "UNKNOWN"


class TransactionChecker(Protocol):
    """Answers the service's check of an unresolved transaction.

    ``transaction`` is the check callback body: ``producer_group``, ``transaction_id``,
    ``check_times`` (1 for the first check), ``created_at`` and ``messages``.
    """

    def check(self, transaction: dict[str, Any]) -> Resolution: ...
