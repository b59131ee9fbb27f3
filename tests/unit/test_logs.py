"""Log lines: the JSON shape, the text default, and redaction of every kind of secret."""

from __future__ import annotations

import logging
import re
from datetime import datetime
from pathlib import Path

import pytest
from pydantic import SecretStr

from app import logs
from app.config import Settings
from app.logs import REDACTED, Redactor, safe_url, settings_secrets
from app.storage.db import make_engine, upgrade_to_head
from tests.logs import captured_logs

TOKEN_ID = "0123456789abcdef"
TOKEN_SECRET = "Zm9vYmFyYmF6cXV4cXV1eHF1dXpxdXV4cXV1eHF1dXo"
SIGNING = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

# (text with a secret, the secret, what must stay)
PLANTED = [
    (f"Authorization: Bearer {TOKEN_SECRET}", TOKEN_SECRET, "Authorization"),
    (f"got header authorization='Token tk-{TOKEN_SECRET}'", TOKEN_SECRET, "got header"),
    (f"token txmsg_{TOKEN_ID}_{TOKEN_SECRET} revoked", TOKEN_SECRET, f"txmsg_{TOKEN_ID}_"),
    (f"rotated to {SIGNING}", SIGNING.removeprefix("whsec_"), "rotated to whsec_"),
    ("postgresql+psycopg://txmsg:pa55-w0rd@db:5432/txmsg", "pa55-w0rd", "@db:5432/txmsg"),
    ("http://user:hunter2@10.0.0.1/check failed", "hunter2", "10.0.0.1/check failed"),
    ("GET /cb?order=7&access_token=abc123XYZ&x=1", "abc123XYZ", "order=7"),
    ("GET /cb?sig=1&api_key=k-998877", "k-998877", "sig=1"),
    ("dsn host=db password=opensesame user=txmsg", "opensesame", "user=txmsg"),
    ("{'client_secret': 'shh-its-a-secret'}", "shh-its-a-secret", "client_secret"),
    ('{"password": "p@ss word"}', "p@ss", "password"),
]


@pytest.mark.parametrize(("text", "secret", "kept"), PLANTED)
def test_each_kind_of_secret_is_redacted_and_the_rest_kept(text: str, secret: str,
                                                           kept: str) -> None:
    redacted = Redactor()(text)
    assert secret not in redacted
    assert REDACTED in redacted
    assert kept in redacted


def test_plain_text_passes_unchanged() -> None:
    text = "check #3 of shop/order-1: TIMEOUT from http://10.0.0.1:9000/check in 3000.2 ms"
    assert Redactor()(text) == text


def test_the_settings_secrets_are_redacted_wherever_they_appear() -> None:
    settings = Settings(database_url="postgresql+psycopg://txmsg:Kq7-zz@db/txmsg")
    assert settings_secrets(settings) == ["Kq7-zz"]
    redact = Redactor(settings_secrets(settings))
    assert redact("connecting with Kq7-zz as the password") == (
        f"connecting with {REDACTED} as the password")


def test_secret_str_settings_count_as_secrets() -> None:
    class WithToken(Settings):
        admin_token: SecretStr | None = None

    settings = WithToken(admin_token=SecretStr("adm1n-t0ken-value"))
    assert "adm1n-t0ken-value" in settings_secrets(settings)


def test_safe_url_drops_user_info_query_and_fragment() -> None:
    assert safe_url("https://u:p@Example.com:8443/a/b?token=x#frag") == (
        "https://example.com:8443/a/b?…")
    assert safe_url("http://[::1]:9/check") == "http://[::1]:9/check"
    assert safe_url("http://10.0.0.1/check") == "http://10.0.0.1/check"
    assert safe_url(None) is None
    assert safe_url("http://[bad") == "<unparsable URL>"


def test_text_is_the_default_format_and_json_is_chosen_in_any_case() -> None:
    assert Settings().log_format == "text"
    assert Settings(log_format="JSON").log_format == "json"  # type: ignore[arg-type]
    assert Settings(log_level="debug").log_level == "DEBUG"  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        Settings(log_format="xml")  # type: ignore[arg-type]


def test_json_lines_carry_time_level_logger_message_and_extras() -> None:
    with captured_logs(Settings(log_format="json")) as captured:
        logging.getLogger("txmsg.test").info("hello %s", "world", extra={"status": 201})
    [record] = captured.records()
    assert list(record)[:4] == ["time", "level", "logger", "message"]
    assert record["level"] == "INFO" and record["logger"] == "txmsg.test"
    assert record["message"] == "hello world" and record["status"] == 201
    assert datetime.fromisoformat(record["time"]).utcoffset().total_seconds() == 0


def test_text_lines_are_the_classic_format() -> None:
    with captured_logs(Settings()) as captured:
        logging.getLogger("txmsg.test").warning("careful")
    assert captured.text.rstrip().endswith("WARNING txmsg.test: careful")
    assert "{" not in captured.text


@pytest.mark.parametrize("log_format", ["json", "text"])
def test_no_planted_secret_survives_a_log_line(log_format: str) -> None:
    """Secrets in the message, its arguments, extra fields and a traceback."""
    db_password = "db-pw-4711"
    settings = Settings(log_format=log_format,  # type: ignore[arg-type]
                        database_url=f"postgresql+psycopg://txmsg:{db_password}@db/txmsg")
    secrets = [db_password, *(secret for _text, secret, _kept in PLANTED)]
    log = logging.getLogger("txmsg.test")
    with captured_logs(settings) as captured:
        for text, _secret, _kept in PLANTED:
            log.warning("message: %s", text)
            log.info("extra", extra={"detail": text})
        log.error("the password is %s", db_password)
        try:
            raise RuntimeError(f"cannot connect to {settings.database_url}")
        except RuntimeError:
            log.exception("failed")
    output = captured.text
    assert "RuntimeError" in output and output.count(REDACTED) >= len(secrets)
    for secret in secrets:
        assert secret not in output
    if log_format == "json":
        assert len(captured.records()) == 2 * len(PLANTED) + 2


def test_the_request_id_of_the_serving_thread_is_on_every_line() -> None:
    with captured_logs(Settings(log_format="json")) as captured:
        token = logs.REQUEST_ID.set("req-42")
        try:
            logging.getLogger("app.domain").warning("inside")
        finally:
            logs.REQUEST_ID.reset(token)
        logging.getLogger("app.domain").warning("outside")
    inside, outside = captured.records()
    assert inside["request_id"] == "req-42"
    assert "request_id" not in outside


# a request path as a client may send it (percent-decoded): a forged line, a NUL, a
# carriage return, an ANSI escape, Unicode's line breaks
FORGED = "2026-11-26 15:37:00,000 WARNING txmsg.access: FORGED"
HOSTILE = f"/v1/nothing\n{FORGED}\x00\r\x1b[31m\u2028{FORGED}\u2029\x85\x7f\tend"
LINE_START = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [A-Z]+ [\w.]+: ")


def test_text_lines_escape_control_characters_so_one_record_is_one_line() -> None:
    log = logging.getLogger("txmsg.test")
    with captured_logs(Settings()) as captured:
        log.info("GET %s 404", HOSTILE)
        log.warning(HOSTILE)
    output = captured.text
    lines = output.splitlines()  # splits on \x85, \u2028 and the like too
    assert len(lines) == 2 and all(LINE_START.match(line) for line in lines)
    assert lines[0].endswith("INFO txmsg.test: GET /v1/nothing\\n2026-11-26 15:37:00,000 "
                             "WARNING txmsg.access: FORGED\\x00\\r\\x1b[31m\\u2028"
                             "2026-11-26 15:37:00,000 WARNING txmsg.access: FORGED"
                             "\\u2029\\x85\\x7f\\tend 404")
    assert not logs._CONTROL.search(output.replace("\n", ""))


def test_a_traceback_stays_under_its_line_whatever_its_message() -> None:
    log = logging.getLogger("txmsg.test")
    with captured_logs(Settings()) as captured:
        try:
            raise ValueError(f"bad name {HOSTILE}")
        except ValueError:
            log.exception("failed on %s", HOSTILE)
        log.info("after")
    lines = captured.text.splitlines()
    at_margin = [line for line in lines if not line.startswith(" ")]
    assert len(at_margin) == 2 and all(LINE_START.match(line) for line in at_margin)
    assert any(line.startswith("    Traceback") for line in lines)
    assert "    ValueError: bad name /v1/nothing" in lines
    assert f"    {FORGED}\\x00" in lines  # the exception's own lines, indented
    assert "\x00" not in captured.text and "\x1b" not in captured.text


def test_json_lines_encode_every_control_character() -> None:
    with captured_logs(Settings(log_format="json")) as captured:
        logging.getLogger("txmsg.test").info(HOSTILE, extra={"path": HOSTILE})
    assert not logs._CONTROL.search(captured.text.removesuffix("\n"))
    [record] = captured.records()  # one line, splitlines' way too
    assert record["message"] == record["path"] == HOSTILE


def test_migration_lines_are_joined_not_escaped(tmp_path: Path) -> None:
    """Alembic's "Running upgrade" lines carry each revision's docstring, several lines
    long: logged as one line, its lines joined by spaces, never with a literal ``\\n``."""
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'txmsg.db'}")
    with captured_logs(settings, "INFO") as captured:
        upgrade_to_head(settings)
    running = [line for line in captured.text.splitlines() if "Running upgrade" in line]
    assert len(running) >= 10
    assert all(LINE_START.match(line) for line in captured.text.splitlines())
    assert "\\n" not in captured.text
    # 0003's docstring, its two lines joined
    assert any("the walk over resolved transactions, and the partial index" in line
               for line in running)


def test_disposing_the_pool_says_nothing_at_info(tmp_path: Path) -> None:
    """SQLAlchemy's "Pool disposed ... Current Overflow: -5" at each shutdown was an INFO
    line of txmsg's (its pool class named after app.storage.db)."""
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'txmsg.db'}")
    with captured_logs(settings, "INFO") as captured:
        engine = make_engine(settings)
        with engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1")
        engine.dispose()
        engine.dispose()
        logging.getLogger("txmsg.test").info("after")
    assert "Pool" not in captured.text and "Overflow" not in captured.text
    assert "after" in captured.text
