"""Capture what txmsg's own logging configuration writes, as its handler writes it."""

from __future__ import annotations

import io
import json
import logging
import logging.config
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from app import logs
from app.config import Settings


class Captured:
    def __init__(self) -> None:
        self.stream = io.StringIO()

    @property
    def text(self) -> str:
        return self.stream.getvalue()

    def records(self) -> list[dict[str, Any]]:
        """Every line, each of which must be one JSON object."""
        return [json.loads(line) for line in self.text.splitlines()]

    def access(self) -> list[dict[str, Any]]:
        return [r for r in self.records() if r["logger"] == "txmsg.access"]


@contextmanager
def captured_logs(settings: Settings, level: str = "DEBUG") -> Iterator[Captured]:
    """``logs.dict_config(settings)`` applied for real, its handler writing to memory;
    the root logger as it was afterwards."""
    captured = Captured()
    config = logs.dict_config(settings, level)
    config["handlers"]["txmsg"]["stream"] = captured.stream
    root = logging.getLogger()
    handlers, root_level = root.handlers[:], root.level
    logging.config.dictConfig(config)
    try:
        yield captured
    finally:
        for handler in root.handlers[:]:
            root.removeHandler(handler)
        for handler in handlers:
            root.addHandler(handler)
        root.setLevel(root_level)
