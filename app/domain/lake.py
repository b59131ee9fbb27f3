"""What the lake's jobs (``spark_outbox``: ``txmsg ingest`` and the streaming source) use
of the store, as ``app.domain.checks`` is what the checker uses: they import this module,
never ``app.storage`` (an import-linter contract), so that a change of the storage's
modules meets one list here.

They read the committed views (``txmsg_committed``, by topic and offset) with engines made
as the service makes them, and ask the topics' watermarks (retention's first offset, the
next offset) to plan exact ranges."""

from __future__ import annotations

from app.storage.db import make_engine, read_settings
from app.storage.dialects import UnknownDatabase, dialect_for_url
from app.storage.schema import UTCDateTime
from app.storage.topics import watermarks

__all__ = ["UTCDateTime", "UnknownDatabase", "dialect_for_url", "make_engine", "read_settings",
           "watermarks"]
