"""Logging: text (the default) or one JSON object per line, and never a secret.

``TXMSG_LOG_FORMAT=json`` writes each record as a JSON object (python-json-logger, on
orjson) with ``time``, ``level``, ``logger`` and ``message``, the record's extra fields
(a request's ``request_id``, ``method``, ``route``, ``status``, ``duration_ms``; a check's
``transaction``, ``group``, ``url``, ``check``, ``result``, ``duration_ms``), and the id of
the request being served by the thread that logs, if any.

Every record passes the ``Redact`` filter on the way out, whatever its logger: bearer
tokens, txmsg tokens and signing secrets, passwords in URLs, secret-looking query or
key=value parameters, and the literal values of the secret settings (the admin token, the
database password) are replaced. A test plants each kind and greps the output.

Text lines are escaped (``TextFormatter``): a control character (a newline, a NUL, an
ANSI escape, a Unicode line separator) from whatever reached the message (a request's
path, a header, a name) is written as ``\\n``, ``\\x00``, ``\\u2028``, so one record is one
line and no request can forge another; a traceback's lines are indented under it. JSON
encodes them anyway.

``txmsg`` configures the main process with ``configure``, and hands ``dict_config`` to
Granian, which applies it in each web worker, so that Granian's own lines are in the same
format.
"""

from __future__ import annotations

import logging
import logging.config
import re
import traceback
from collections.abc import Iterable
from contextvars import ContextVar
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from pydantic import SecretStr
from pythonjsonlogger.orjson import OrjsonFormatter
from sqlalchemy.engine import make_url

from app.config import Settings

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
REDACTED = "[REDACTED]"

# the request a thread is serving (set by the web layer around each Flask request)
REQUEST_ID: ContextVar[str | None] = ContextVar("txmsg_request_id", default=None)

_SECRET_WORD = r"(?:password|passwd|pwd|secret|token|api[_-]?key|signature|credential)"
# each pattern starts at a literal (no leading wildcard to backtrack over), and a text
# none of them could match is let through after one search
_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # txmsg tokens keep their public id: txmsg_<16 hex>_<secret>
    (re.compile(r"(txmsg_[0-9a-f]{16}_)[A-Za-z0-9_-]+"), rf"\1{REDACTED}"),
    (re.compile(r"whsec_[A-Za-z0-9+/=]+"), f"whsec_{REDACTED}"),
    (re.compile(r"(?i)(bearer|basic)\s+[A-Za-z0-9._~+/=-]+"), rf"\1 {REDACTED}"),
    (re.compile(r"(?i)(authorization[\"']?\s*[:=]\s*[\"']?)[^\"'\n,;}]+"), rf"\1{REDACTED}"),
    # user:password@ in any URL
    (re.compile(r"(://[^/\s:@]*:)[^@\s/]+@"), rf"\1{REDACTED}@"),
    # token=..., ?api_key=..., password: ... , "secret": "..."
    (re.compile(rf"(?i)({_SECRET_WORD}[\w-]*[\"']?\s*[=:]\s*[\"']?)(?![\s\"'])"
                r"[^\s&\"',;)}]+"), rf"\1{REDACTED}"),
)
# what any of them needs to find, lowercased: most lines hold none of these
_CLUES = ("txmsg_", "whsec_", "bearer", "basic", "authorization", "@", "passw", "pwd",
          "secret", "token", "key", "signature", "credential")
# the attributes every LogRecord has; anything else on a record is an extra field
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message", "asctime"}


class Redactor:
    """Replaces secrets in text: the known kinds by pattern, plus given literal values."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        # longest first, so that a secret containing another is replaced whole
        self._literals = sorted({s for s in secrets if len(s) >= 4}, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for literal in self._literals:
            if literal in text:
                text = text.replace(literal, REDACTED)
        lowered = text.lower()
        if not any(clue in lowered for clue in _CLUES):
            return text
        for pattern, replacement in _PATTERNS:
            text = pattern.sub(replacement, text)
        return text


def settings_secrets(settings: Settings) -> list[str]:
    """The secret values in the settings: every SecretStr, and the database password."""
    values = [value.get_secret_value() for name in type(settings).model_fields
              if isinstance(value := getattr(settings, name), SecretStr)]
    password = make_url(settings.database_url).password
    if password:
        values.append(str(password))
    return values


class Redact(logging.Filter):
    """Scrubs a record's message, its text extras, traceback and stack before any
    formatter sees them (the record is changed in place: every handler after this one
    gets the scrubbed record too)."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__()
        self.redact = Redactor(secrets)

    def filter(self, record: logging.LogRecord) -> bool:
        redact = self.redact
        try:
            message = record.getMessage()
        except (TypeError, ValueError):  # arguments that do not fit the message
            message = f"{record.msg!s} {record.args!r}"
        record.msg, record.args = redact(message), None
        for key, value in list(vars(record).items()):
            if key not in _STANDARD and isinstance(value, str):
                setattr(record, key, redact(value))
        if record.exc_info:
            record.exc_text = "".join(traceback.format_exception(*record.exc_info)).rstrip()
            record.exc_info = None
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True


class JoinedLines(logging.Filter):
    """A message its own code writes on several lines, as one: its lines stripped and
    joined by a space. For loggers whose lines are ours, not a request's: Alembic's
    "Running upgrade" lines carry each revision's docstring, which the text format would
    otherwise show with literal ``\\n`` escapes."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if "\n" in message or "\r" in message:
            record.msg = " ".join(part.strip() for part in message.splitlines() if part.strip())
            record.args = None
        return True


class RequestContext(logging.Filter):
    """Adds the id of the request the logging thread serves, when it serves one."""

    def filter(self, record: logging.LogRecord) -> bool:
        if "request_id" not in vars(record):
            request_id = REQUEST_ID.get()
            if request_id is not None:
                record.request_id = request_id
        return True


# C0 and C1 controls, DEL, and the Unicode line and paragraph separators
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_ESCAPES = {**{c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7f, 0xa0))},
            0x2028: "\\u2028", 0x2029: "\\u2029",
            ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t"}

_JSON_UNESCAPED = re.compile(r"[\x7f-\x9f\u2028\u2029]")
_JSON_ESCAPES = {c: f"\\u{c:04x}" for c in (*range(0x7f, 0xa0), 0x2028, 0x2029)}


def escaped(text: str) -> str:
    """``text`` with every control character written as its escape (one line)."""
    return text.translate(_ESCAPES) if _CONTROL.search(text) else text


class TextFormatter(logging.Formatter):
    """``TEXT_FORMAT``, one line per record: the line escaped, and a traceback or stack
    (escaped but for its newlines) indented under it, so only a record's first line
    starts at the margin."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        record.message = record.getMessage()
        record.asctime = self.formatTime(record, self.datefmt)
        line = escaped(self.formatMessage(record))
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        for block in (record.exc_text,
                      record.stack_info and self.formatStack(record.stack_info)):
            if block:
                line += "".join(f"\n    {escaped(part)}" for part in block.splitlines())
        return line


class JsonFormatter(OrjsonFormatter):
    """One JSON object per line: time (RFC 3339, UTC), level, logger, message, extras."""

    def __init__(self) -> None:
        super().__init__("%(levelname)s %(name)s %(message)s", timestamp="time",
                         rename_fields={"levelname": "level", "name": "logger",
                                        "exc_info": "exception"})

    def jsonify_log_record(self, log_data: dict[str, Any]) -> str:
        line = super().jsonify_log_record({"time": log_data.pop("time"), **log_data})
        # JSON escapes the C0 controls only; these three end a line for many readers
        # (Python's splitlines too), and may only occur inside a string here
        return line.translate(_JSON_ESCAPES) if _JSON_UNESCAPED.search(line) else line


def dict_config(settings: Settings, level: str | int = "INFO") -> dict[str, Any]:
    """The ``logging.config.dictConfig`` of a txmsg process (and of Granian's logger)."""
    formatter: dict[str, Any] = (
        {"()": f"{__name__}.JsonFormatter"} if settings.log_format == "json"
        else {"()": f"{__name__}.TextFormatter"})
    handler = {"class": "logging.StreamHandler", "stream": "ext://sys.stderr",
               "formatter": "txmsg", "filters": ["request", "redact"]}
    quiet = {"level": "WARNING"}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"txmsg": formatter},
        "filters": {"request": {"()": f"{__name__}.RequestContext"},
                    "joined": {"()": f"{__name__}.JoinedLines"},
                    "redact": {"()": f"{__name__}.Redact",
                               "secrets": settings_secrets(settings)}},
        "handlers": {"txmsg": handler},
        "root": {"level": logging.getLevelName(level) if isinstance(level, int)
                 else level.upper(), "handlers": ["txmsg"]},
        "loggers": {
            # Granian's own logger, in the same format (it does not propagate)
            "_granian": {"handlers": ["txmsg"], "propagate": False},
            "granian.access": {"handlers": ["txmsg"], "propagate": False},
            "alembic.runtime.plugins": quiet,
            "alembic.runtime.migration": {"filters": ["joined"]},
        },
    }


def configure(settings: Settings, level: str | int = "INFO") -> None:
    logging.config.dictConfig(dict_config(settings, level))


def safe_url(url: str | None) -> str | None:
    """A URL fit for a log line: no user info, and no query or fragment (which may
    carry a secret); ``?…`` says a query was there."""
    if not url:
        return url
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        if ":" in host:
            host = f"[{host}]"
        netloc = host if parts.port is None else f"{host}:{parts.port}"
    except ValueError:
        return "<unparsable URL>"
    return urlunsplit((parts.scheme, netloc, parts.path, "", "")) + ("?…" if parts.query else "")


