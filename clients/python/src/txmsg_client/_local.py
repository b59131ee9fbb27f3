"""What ``local_transaction`` decides at each step, without I/O: ``Producer`` and
``AsyncProducer`` do the calls.

The rule it keeps: the service's transaction is committed if and only if the local work
committed, once. The barrier row decides. Local work begins only on a send that answers
PREPARED (an id used again after it was resolved never runs its work); the SDK commits the
messages only after the barrier row is its local work's, and rolls them back only after
the barrier holds a rollback marker (written by ``Barrier.resolve``, the check's own
function, which waits for any local transaction still open under that id).
"""

from __future__ import annotations

import logging
from typing import Any

from txmsg_client.errors import AlreadyCommitted, NotPrepared, TxmsgError
from txmsg_client.resolution import Resolution

log = logging.getLogger("txmsg_client.producer")

PREPARED = "PREPARED"


def require_prepared(sent: dict[str, Any]) -> None:
    """Raise unless the send answered a transaction still PREPARED: a retried send of one
    already resolved (or discarded) must not run its local work again."""
    state = str(sent.get("state", PREPARED))
    if state == PREPARED:
        return
    transaction_id = str(sent["transaction_id"])
    if state == "COMMITTED":
        raise AlreadyCommitted(transaction_id, f"transaction {transaction_id} is committed "
                               "already: its local work is not run again")
    raise NotPrepared(transaction_id, state)


def is_refusal(exc: BaseException) -> bool:
    """A refusal by the service (4xx), raised to the caller; else (unreachable, 5xx) the
    check finishes the job."""
    return isinstance(exc, TxmsgError) and exc.status < 500


def settled(transaction_id: str, resolution: Resolution) -> None:
    """Log what the barrier said of a local transaction that did not commit here."""
    if resolution is Resolution.COMMIT:
        log.warning("transaction %s: another local transaction with this id committed its "
                    "work, so its messages are committed", transaction_id)
    elif resolution is Resolution.UNKNOWN:
        log.warning("transaction %s: another local transaction with this id is still open, "
                    "the check will settle it", transaction_id)


def unsettled(transaction_id: str, exc: BaseException) -> None:
    log.warning("transaction %s: could not ask the barrier, the check will settle it: %s",
                transaction_id, exc)
