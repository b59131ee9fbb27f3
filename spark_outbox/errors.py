"""The one failure an ingestion run reports: a sentence for a person, and an exit code."""

from __future__ import annotations

EXIT_FAILED = 1  # the run started and failed (database unreachable, data check failed, ...)
EXIT_CANNOT_RUN = 2  # nothing was attempted: missing Java, JDBC driver, database file, bad topic


class IngestError(Exception):
    def __init__(self, message: str, exit_code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def java_reason(exc: BaseException) -> str:
    """The first line of what went wrong, from the Java side when there is one.

    Spark wraps driver errors (``FAILED_JDBC.CONNECTION`` ...) around the JDBC driver's
    own exception, which is the one that says why (connection refused, no such table):
    we report the first exception of the chain that Spark itself did not raise.
    """
    throwable = getattr(exc, "java_exception", None) or getattr(exc, "_origin", None)
    chain: list[tuple[str, str]] = []
    seen = 0
    while throwable is not None and seen < 20:
        chain.append((str(throwable.getClass().getName()), str(throwable.getMessage() or "")))
        throwable = throwable.getCause()
        seen += 1
    for name, message in chain:
        if not name.startswith(("org.apache.spark.", "py4j.")):
            return _first_line(f"{name.rsplit('.', 1)[-1]}: {message}")
    if chain:
        return _first_line(chain[-1][1] or chain[-1][0])
    return _first_line(str(exc) or type(exc).__name__)


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else text
