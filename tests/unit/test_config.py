"""Settings from TXMSG_* variables: parsing, bounds, and refusals that do not echo secrets."""

from __future__ import annotations

import ipaddress
import os

import pytest
from pydantic import SecretStr, ValidationError

from app.config import (
    DEFAULT_DATABASE_URL,
    MIN_ADMIN_TOKEN_LENGTH,
    Settings,
    retired_settings,
)

TOKEN = "s3cret-admin-token-value"


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("TXMSG_"):
            monkeypatch.delenv(name)


def test_defaults() -> None:
    settings = Settings()
    assert settings.database_url == DEFAULT_DATABASE_URL
    assert settings.admin_token is None and not settings.access_control
    assert settings.callback_allowed_networks == [] and settings.trusted_proxies == []
    assert ipaddress.ip_network("169.254.0.0/16") in settings.callback_denied_networks


def test_values_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TXMSG_CHECK_MAX_TIMES", "3")
    monkeypatch.setenv("TXMSG_ADMIN_TOKEN", TOKEN)
    monkeypatch.setenv("TXMSG_ALLOW_UNAUTHENTICATED", "true")
    settings = Settings()
    assert settings.check_max_times == 3 and settings.allow_unauthenticated
    assert settings.access_control and settings.admin_token is not None
    assert settings.admin_token.get_secret_value() == TOKEN
    assert TOKEN not in repr(settings)


def test_networks_are_comma_separated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TXMSG_TRUSTED_PROXIES", " 10.0.0.0/8 ,, ::1/128,")
    monkeypatch.setenv("TXMSG_CALLBACK_DENIED_NETWORKS", "")
    settings = Settings()
    assert settings.trusted_proxies == [ipaddress.ip_network("10.0.0.0/8"),
                                        ipaddress.ip_network("::1/128")]
    assert settings.callback_denied_networks == []  # set empty: nothing denied


def test_a_bad_network_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TXMSG_TRUSTED_PROXIES", "10.0.0.0/8,not-a-network")
    with pytest.raises(ValidationError):
        Settings()


def test_log_settings_in_any_case(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TXMSG_LOG_LEVEL", "debug")
    monkeypatch.setenv("TXMSG_LOG_FORMAT", "JSON")
    settings = Settings()
    assert (settings.log_level, settings.log_format) == ("DEBUG", "json")
    monkeypatch.setenv("TXMSG_LOG_LEVEL", "verbose")
    with pytest.raises(ValidationError):
        Settings()


def test_an_empty_admin_token_leaves_access_control_off(monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    monkeypatch.setenv("TXMSG_ADMIN_TOKEN", "")
    assert Settings().admin_token is None


@pytest.mark.parametrize("token", ["x" * (MIN_ADMIN_TOKEN_LENGTH - 1), f" {TOKEN}", f"{TOKEN}\n"])
def test_a_short_or_padded_admin_token_is_refused_without_echoing_it(
        monkeypatch: pytest.MonkeyPatch, token: str) -> None:
    monkeypatch.setenv("TXMSG_ADMIN_TOKEN", token)
    with pytest.raises(ValidationError) as caught:
        Settings()
    assert token.strip() not in str(caught.value)
    assert Settings(admin_token=SecretStr("y" * MIN_ADMIN_TOKEN_LENGTH)).access_control


@pytest.mark.parametrize(("name", "value"), [
    ("TXMSG_CHECK_MAX_TIMES", "0"),
    ("TXMSG_MAX_BODY_BYTES", "0"),
    ("TXMSG_RETENTION_INTERVAL_SECONDS", "0"),
    ("TXMSG_CHECKER_POLL_SECONDS", "1.5"),  # the 1 s promise
    ("TXMSG_DATABASE_POOLING", "statement"),
    ("TXMSG_WEB_WORKERS", "many"),
])
def test_values_out_of_bounds_are_refused(monkeypatch: pytest.MonkeyPatch, name: str,
                                          value: str) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError) as caught:
        Settings()
    assert caught.value.errors()[0]["loc"] == (name.removeprefix("TXMSG_").lower(),)


def test_a_refused_value_is_not_echoed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TXMSG_DATABASE_POOLING", "pa55w0rd-pooling")
    with pytest.raises(ValidationError) as caught:
        Settings()
    assert "pa55w0rd" not in str(caught.value)


def test_retired_settings_are_named_with_advice() -> None:
    assert retired_settings({"TXMSG_DATABASE_URL": "x"}) == []
    [warning] = retired_settings({"TXMSG_WEB_INTERFACE": "wsgi", "PATH": "/bin"})
    assert warning.startswith("TXMSG_WEB_INTERFACE is ignored: ") and "unset it" in warning
