"""The least a request costs on this server: an ASGI app answering every request with one
small JSON body, served by Granian as ``txmsg serve`` serves (one worker, asyncio).

``python -m bench.phases.lone`` times it beside txmsg's routes: no route of txmsg can answer
faster, or with less of the service's CPU, than this.
"""

from __future__ import annotations

import sys
from typing import Any

from bench.harness.pgdb import clean_env
from bench.harness.service import Server, free_port

_BODY = b'{"status":"ok"}'
_HEADERS = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(_BODY))]


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    await send({"type": "http.response.start", "status": 200, "headers": _HEADERS})
    await send({"type": "http.response.body", "body": _BODY})


def serve_bare() -> Server:
    """This app under Granian on a free port (ready once ``/readyz`` answers 200)."""
    port = free_port()
    argv = [sys.executable, "-m", "granian", "--interface", "asgi", "--workers", "1",
            "--no-ws", "--log-level", "warning", "--port", str(port), "bench.harness.bare_asgi:app"]
    return Server(argv, clean_env(), port, "bare-asgi")
