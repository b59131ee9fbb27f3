"""What a handler is given and what it gives back.

A handler (``app.api.routes``) is a function of a ``Call``: the route's path parameters,
the query (parsed only if asked for; its parameters as the route declares them), the raw
body (already read within the route's limit), who the request acts as, the app's state and the request's header fields. It
answers ``(status, body)``: a body to write as JSON, ``None`` for a 204, or ``Raw``
bytes with their media type; or it raises an ``ApiError``. The ASGI front
(``app.api.asgi``) builds the call and renders the answer (``app.api.http``).

A handler that waits (a send or a commit for its group-commit batch, a long-polling
receive) is ``async``: it waits on the front's event loop, holding no thread; what it
must do off the loop it hands to ``offload``, and a long poll's wait goes through
``wait`` (the front's probed waits). The others run on the front's threads.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar
from urllib.parse import parse_qsl

from app.api.query import Query
from app.domain.access import Principal

if TYPE_CHECKING:
    from app.state import AppState

T = TypeVar("T")


class Raw(NamedTuple):
    """An answer's body that is not JSON."""

    data: bytes
    media_type: str


Answer = tuple[int, Any]  # (status, JSON body | None for 204 | Raw)
Offload = Callable[..., Awaitable[Any]]
Wait = Callable[[str, str, int, float], Awaitable[None]]


@dataclass(slots=True)
class Call:
    params: dict[str, str]
    body: bytes
    principal: Principal
    state: AppState
    headers: Iterable[tuple[bytes, bytes]]  # lower-case names, as in an ASGI scope
    query_string: bytes = b""
    offload: Offload | None = None  # run a blocking function off the event loop
    wait: Wait | None = None  # a long poll's wait: (topic, subscription, seen, timeout)
    queries: tuple[Query, ...] = ()  # the route's query parameters
    _query: Mapping[str, str] | None = field(default=None)

    @property
    def query(self) -> Mapping[str, str]:
        """The query's parameters (the first value of each), parsed when first asked."""
        if self._query is None:
            self._query = {}
            for name, value in parse_qsl(self.query_string.decode("latin-1"),
                                         keep_blank_values=True, encoding="utf-8",
                                         errors="replace"):
                self._query.setdefault(name, value)
        return self._query

    def arg(self, name: str) -> Any:
        """The query parameter ``name`` as its route declares it (``Route.query``): parsed,
        or its default when absent; malformed → 400 ``invalid_query_parameter``."""
        for declared in self.queries:
            if declared.name == name:
                return declared.parse(self.query.get(name))
        raise LookupError(f"the route declares no query parameter {name!r}")

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` off the event loop (where there is one to keep free)."""
        if self.offload is None:
            return fn(*args)
        result: T = await self.offload(fn, *args)
        return result
