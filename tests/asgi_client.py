"""Drive an ASGI app in the test process, as a server does.

The app runs on an event loop in a thread of its own, which lives as long as the client,
so that answers the group-commit writers hand back to that loop find it running. Like
Granian's, ``receive`` returns a plain awaitable (a future), not a coroutine.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any, NamedTuple
from urllib.parse import unquote


class Reply(NamedTuple):
    status: int
    headers: dict[str, str]
    body: bytes
    pulled: int  # bytes of request body the app took from receive


class AsgiClient:
    def __init__(self, app: Any) -> None:
        self.app = app
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()

    def request(self, method: str, path: str, *, body: bytes | Sequence[bytes] = b"",
                headers: Sequence[tuple[str, str]] = (), root_path: str = "",
                disconnect: bool = False, client: str = "127.0.0.1",
                scheme: str = "http") -> Reply:
        """One request; a sequence of bytes is sent as that many body messages, and the
        Content-Length is the caller's to give (or not). ``disconnect``: the client goes
        away after its body messages (status 0 if nothing was answered)."""
        chunks = [body] if isinstance(body, bytes) else list(body)
        return self.run(self._request(method, path, chunks, headers, root_path, disconnect,
                                      client, scheme))

    def lifespan(self, *events: str) -> list[str]:
        """Send lifespan events ("startup", "shutdown"); the message types answered."""
        return self.run(self._lifespan(events))

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    def run(self, coro: Any) -> Any:
        """Run a coroutine on the client's loop; its result."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=60)

    async def _request(self, method: str, path: str, chunks: list[bytes],
                       headers: Sequence[tuple[str, str]], root_path: str,
                       disconnect: bool, client: str, scheme: str) -> Reply:
        raw_path, _, query = path.partition("?")
        scope = {
            "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
            "method": method, "scheme": scheme, "path": unquote(raw_path),
            "raw_path": raw_path.encode(), "query_string": query.encode(),
            "root_path": root_path, "server": ("127.0.0.1", 8080),
            "client": (client, 50000),
            "headers": [*(() if any(k.lower() == "host" for k, _ in headers)
                          else ((b"host", b"127.0.0.1:8080"),)),
                        *((k.lower().encode("latin1"), v.encode("latin1")) for k, v in headers)],
        }
        messages = [{"type": "http.request", "body": c,
                     "more_body": disconnect or i < len(chunks) - 1}
                    for i, c in enumerate(chunks)]
        if disconnect:
            messages.append({"type": "http.disconnect"})
        loop = asyncio.get_running_loop()
        gone = loop.create_future()  # the client stays until the answer is whole

        pulled = 0

        def receive() -> asyncio.Future[dict[str, Any]]:
            nonlocal pulled
            if messages:
                future = loop.create_future()
                future.set_result(messages.pop(0))
                pulled += len(future.result().get("body", b""))
                return future
            return gone

        started: dict[str, Any] = {}
        body: list[bytes] = []

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                assert not started, "the response was started twice"
                started.update(message)
            else:
                assert started, "a body before the response was started"
                body.append(message.get("body", b""))

        await self.app(scope, receive, send)
        gone.cancel()
        if not started:
            return Reply(0, {}, b"", pulled)
        return Reply(started["status"],
                     {k.decode("latin1"): v.decode("latin1") for k, v in started["headers"]},
                     b"".join(body), pulled)

    async def _lifespan(self, events: Sequence[str]) -> list[str]:
        inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        for event in events:
            inbox.put_nowait({"type": f"lifespan.{event}"})
        answered: list[str] = []

        async def send(message: dict[str, Any]) -> None:
            answered.append(message["type"])

        task = asyncio.ensure_future(self.app({"type": "lifespan", "asgi": {"version": "3.0"}},
                                              inbox.get, send))
        while len(answered) < len(events) and not task.done():
            await asyncio.sleep(0.01)
        if not task.done():
            task.cancel()
        elif task.exception() is not None:
            raise task.exception()  # type: ignore[misc]
        return answered
