"""What the request telemetry costs one hot-route request, in CPU microseconds.

``python -m bench.phases.telemetry`` runs ``app.api.telemetry`` as the ASGI front does for a
commit (an id made, the duration histogram observed in a multiprocess directory, as under
``txmsg serve``), with its access line at DEBUG (off: what the hot routes' successes do)
and at INFO in each format, written to /dev/null through txmsg's own logging
configuration (redaction included). Each figure is the best of many short runs, so
that another process taking the CPU does not count; compare them with the service's CPU
per send + commit pair in docs/performance.md (two requests).
"""

from __future__ import annotations

import logging
import logging.config
import os
import tempfile
import time
import timeit
from collections.abc import Callable

ROUTE = "/v1/producer-groups/<group>/transactions/<transaction_id>/commit"
PATH = "/v1/producer-groups/order-service/transactions/order-000123456/commit"


def _best_us(fn: Callable[[], None], number: int = 200, repeat: int = 400) -> float:
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6


def main() -> None:
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="txmsg-bench-metrics-")
    from app import logs
    from app.api import telemetry
    from app.config import Settings

    def request(hot: bool) -> Callable[[], None]:
        def one() -> None:
            started = time.perf_counter()
            request_id = telemetry.request_id(None)
            request_id.encode()  # the answer's header
            telemetry.record(request_id, "POST", ROUTE, PATH, 200, started, hot=hot)
        return one

    for log_format in ("text", "json"):
        config = logs.dict_config(Settings(log_format=log_format), "INFO")
        config["handlers"]["txmsg"] = {"class": "logging.FileHandler", "filename": os.devnull,
                                       "formatter": "txmsg", "filters": ["request", "redact"]}
        logging.config.dictConfig(config)
        if log_format == "text":
            print(f"request id only:                    "
                  f"{_best_us(lambda: telemetry.request_id(None).encode()):6.1f} us")
            print(f"hot route, access line at DEBUG:    {_best_us(request(hot=True)):6.1f} us")
        print(f"access line at INFO, {log_format:4}:          "
              f"{_best_us(request(hot=False)):6.1f} us")


if __name__ == "__main__":
    main()
