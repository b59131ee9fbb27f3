"""The OpenAPI document (placeholder until written out in full)."""

from __future__ import annotations

from typing import Any


def openapi_document() -> dict[str, Any]:
    return {"openapi": "3.1.0", "info": {"title": "txmsg", "version": "0.1.0"}, "paths": {}}
