"""txmsg for asyncio: ``AsyncProducer`` and ``AsyncConsumer`` (every call of ``Producer`` and
``Consumer`` as a coroutine, on httpx), ``AsyncBarrier`` on a SQLAlchemy ``AsyncEngine``, and
``asgi_checker_app`` for the check callback in any ASGI app (FastAPI, Starlette).

Needs the ``[aio]`` extra (httpx, standardwebhooks); ``AsyncBarrier`` also SQLAlchemy
(``[barrier]``) and an async driver of the producer's database.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

try:
    from txmsg_client.aio.callback import AsgiCheckerApp, AsyncTransactionChecker, asgi_checker_app
    from txmsg_client.aio.consumer import AsyncConsumer
    from txmsg_client.aio.producer import AsyncProducer
except ImportError as exc:
    raise ImportError("txmsg_client.aio needs httpx and standardwebhooks: "
                      "pip install 'txmsg-client[aio]'") from exc

if TYPE_CHECKING:
    from txmsg_client.aio.barrier import AsyncBarrier

__all__ = ["AsgiCheckerApp", "AsyncBarrier", "AsyncConsumer", "AsyncProducer",
           "AsyncTransactionChecker", "asgi_checker_app"]


def __getattr__(name: str) -> Any:
    """``AsyncBarrier`` imports SQLAlchemy: only when asked for."""
    if name == "AsyncBarrier":
        from txmsg_client.aio.barrier import AsyncBarrier
        return AsyncBarrier
    raise AttributeError(name)
