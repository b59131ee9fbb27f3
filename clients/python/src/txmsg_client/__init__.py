"""Python SDK for txmsg: send half messages, commit or roll back, answer checks, consume.

RocketMQ's transactional producer, over HTTP::

    producer = Producer("http://127.0.0.1:8080", "orders-svc")
    producer.register(["http://10.0.0.5:9000/check"])
    result = producer.send_in_transaction(
        message("orders", '{"id": 42}'), lambda sent: place_order(sent["transaction_id"]))

``local_transaction`` returns a ``Resolution``: COMMIT and ROLLBACK are applied at once;
UNKNOWN (or an exception, which is raised again) leaves the transaction to the check,
where the service asks the group's callback, served by ``txmsg_client.callback``
(``checker_app(checker)``, ``CheckerServer``; the ``[callback]`` extra, werkzeug).
``Consumer`` receives from a subscription: ``receive``, ``ack``, ``nack``, ``renew``,
``seek``, and ``run(handler)``, which with a ``producer`` publishes the handler's output
and acknowledges its input in one transaction. It names itself (``consumer=``), takes the
subscription's type (shared, key_shared, failover, exclusive) and tag filter, acknowledges
cumulatively, and consumes several topics (``topics=``, ``topics_pattern=``).
This package depends on ``requests`` only, never on the service's code.
"""

from txmsg_client._wire import Message, message
from txmsg_client.consumer import BatchResult, Consumer, ReceivedMessage, RunStats
from txmsg_client.errors import TxmsgError
from txmsg_client.producer import LocalTransaction, Producer, TransactionResult
from txmsg_client.resolution import Resolution, TransactionChecker

__all__ = [
    "BatchResult",
    "Consumer",
    "LocalTransaction",
    "Message",
    "Producer",
    "ReceivedMessage",
    "Resolution",
    "RunStats",
    "TransactionChecker",
    "TransactionResult",
    "TxmsgError",
    "message",
]
