"""The callback address policy (app.domain.callback_policy) and its settings."""

from __future__ import annotations

import ipaddress
import socket

import pytest
from pydantic import ValidationError

from app.config import Settings
from app.domain.callback_policy import (
    CallbackPolicy,
    CallbackUrlError,
    ip_literal,
    redacted,
)

DEFAULT = CallbackPolicy.default()
net = ipaddress.ip_network


@pytest.mark.parametrize("host", [
    "127.0.0.1", "2130706433", "127.1", "127.0.1", "0x7f.1", "0x7F000001", "0177.0.0.1",
    "017700000001", "169.254.43518", "0251.0376.0251.0376", "0", "10.1", "0xa9.0xfe.0xa9.0xfe",
])
def test_numeric_ipv4_forms_are_the_address_the_resolver_reaches(host: str) -> None:
    [(_, _, _, _, (resolved, _))] = socket.getaddrinfo(host, 80, socket.AF_INET,
                                                       socket.SOCK_STREAM)
    assert ip_literal(host) == ipaddress.ip_address(resolved)


@pytest.mark.parametrize("host", ["localhost", "example.com", "1e1", "127.0.0.1.",
                                  "256.1", "4294967296", "0x", "1.2.3.4.5", "", "a.b"])
def test_names_and_unresolvable_forms_are_not_literals(host: str) -> None:
    assert ip_literal(host) is None


@pytest.mark.parametrize(("address", "allowed"), [
    ("169.254.169.254", False), ("::ffff:169.254.169.254", False),
    ("::ffff:a9fe:a9fe", False), ("100.100.100.200", False), ("fd00:ec2::254", False),
    ("0.0.0.0", False), ("0.1.2.3", False), ("::", False), ("fe80::1", False),
    ("fe80::1%eth0", False), ("224.0.0.251", False), ("ff02::1", False), ("255.255.255.255", False),
    ("127.0.0.1", True), ("::1", True), ("10.0.0.1", True), ("192.168.1.1", True),
    ("8.8.8.8", True), ("2001:db8::1", True), ("::ffff:10.0.0.1", True),
])
def test_the_default_policy(address: str, allowed: bool) -> None:
    assert (DEFAULT.check_address(address) is None) is allowed


def test_ipv4_mapped_addresses_are_judged_as_ipv4_both_ways() -> None:
    policy = CallbackPolicy.of([net("10.9.0.0/16")], [net("10.0.0.0/8")])
    assert policy.check_address("::ffff:10.1.0.1") is None
    assert policy.check_address("::ffff:10.9.0.1") == ipaddress.ip_address("10.9.0.1")
    assert policy.check_address("::ffff:11.0.0.1") == ipaddress.ip_address("11.0.0.1")
    assert policy.check_address("2001:db8::1") is not None  # not in the allowed networks
    # a network of IPv4-mapped addresses, named as such, catches them too
    mapped = CallbackPolicy.of([net("::ffff:0:0/96")])
    assert mapped.check_address("::ffff:10.1.0.1") is not None
    assert mapped.check_address("10.1.0.1") is None


# the IPv6 spellings of 169.254.169.254 and of 127.0.0.1 (Teredo: the client inverted)
METADATA_IN_IPV6 = ["::169.254.169.254", "::a9fe:a9fe", "::ffff:169.254.169.254",
                    "64:ff9b::169.254.169.254", "64:ff9b::a9fe:a9fe", "2002:a9fe:a9fe::",
                    "2002:a9fe:a9fe:1::1", "2001:0:4136:e378:8000:63bf:5601:5601"]
LOOPBACK_IN_IPV6 = ["::127.0.0.1", "::ffff:127.0.0.1", "64:ff9b::7f00:1", "2002:7f00:1::",
                    "2001:0:4136:e378:8000:63bf:80ff:fffe"]


@pytest.mark.parametrize("address", METADATA_IN_IPV6)
def test_ipv6_forms_embedding_a_denied_ipv4_address_are_denied(address: str) -> None:
    assert DEFAULT.check_address(address) == ipaddress.ip_address("169.254.169.254")
    with pytest.raises(CallbackUrlError) as err:
        DEFAULT.check_url(f"http://[{address}]:8080/check")
    assert err.value.code == "callback_url_not_allowed"
    assert "169.254.169.254" in str(err.value)


@pytest.mark.parametrize("address", LOOPBACK_IN_IPV6)
def test_ipv6_forms_embedding_loopback_are_denied_with_loopback(address: str) -> None:
    policy = CallbackPolicy.of([net("127.0.0.0/8")])
    assert policy.check_address(address) == ipaddress.ip_address("127.0.0.1")
    assert DEFAULT.check_address(address) is None  # loopback is allowed by default


@pytest.mark.parametrize("address", ["::", "::1"])
def test_the_unspecified_and_loopback_ipv6_addresses_are_not_ipv4_compatible(
        address: str) -> None:
    # judged as IPv6 (::/128 denied, ::1 allowed), never as 0.0.0.0 or 0.0.0.1
    assert (DEFAULT.check_address(address) is None) is (address == "::1")
    assert CallbackPolicy.of([net("0.0.0.0/8")]).check_address(address) is None


def test_embedded_ipv4_addresses_must_be_in_the_allow_list() -> None:
    policy = CallbackPolicy.of([], [net("10.0.0.0/8"), net("2002::/16"), net("64:ff9b::/96")])
    for address in ("::10.1.2.3", "64:ff9b::10.1.2.3", "2002:a01:203::1",
                    "2001:0:4136:e378:8000:63bf:f5fe:fdfc"):
        assert policy.check_address(address) is None, address
    for address in ("::11.1.2.3", "64:ff9b::11.1.2.3", "2002:b01:203::1"):
        assert policy.check_address(address) == ipaddress.ip_address("11.1.2.3"), address


def test_an_ipv6_network_denied_denies_its_addresses_whatever_they_embed() -> None:
    policy = CallbackPolicy.of([net("2002::/16")])
    assert policy.check_address("2002:a01:203::1") is not None
    assert policy.check_address("10.1.2.3") is None


def test_denied_networks_win_over_allowed_ones() -> None:
    policy = CallbackPolicy.of([net("10.0.0.0/24")], [net("10.0.0.0/8")])
    assert policy.check_address("10.0.0.7") is not None
    assert policy.check_address("10.0.1.7") is None


@pytest.mark.parametrize(("url", "code"), [
    ("http://169.254.169.254/latest/meta-data", "callback_url_not_allowed"),
    ("http://2852039166/", "callback_url_not_allowed"),
    ("http://[::ffff:169.254.169.254]:80/", "callback_url_not_allowed"),
    ("http://[fe80::1%25eth0]/", "invalid_callback_url"),  # a zone id is not RFC 3986
    ("http://bücher.example/", "invalid_callback_url"),  # IDNA form: xn--bcher-kva
    ("http://u:p@10.0.0.1/", "invalid_callback_url"),
    ("gopher://10.0.0.1/", "invalid_callback_url"),
])
def test_urls_refused_with_their_code(url: str, code: str) -> None:
    with pytest.raises(CallbackUrlError) as err:
        DEFAULT.check_url(url)
    assert err.value.code == code
    assert "u:p" not in str(err.value)


@pytest.mark.parametrize("url", ["http://metadata.google.internal/", "https://producer:8443/c",
                                 "http://127.0.0.1:9/c", "http://[::1]:9/c", "http://10.1/",
                                 "http://xn--bcher-kva.example/a%20b?x=1#y"])
def test_names_and_allowed_literals_are_stored(url: str) -> None:
    assert DEFAULT.check_url(url) == url


def test_redacted_hides_user_info_only() -> None:
    assert redacted("http://u:pw@h:1/c?x#y") == "http://***@h:1/c?x#y"
    assert redacted("http://h:1/c@x") == "http://h:1/c@x"


def test_settings_read_comma_separated_networks(monkeypatch: pytest.MonkeyPatch) -> None:
    assert CallbackPolicy.from_settings(Settings()) == DEFAULT
    monkeypatch.setenv("TXMSG_CALLBACK_DENIED_NETWORKS", " 10.0.0.0/8 , ::1/128,")
    monkeypatch.setenv("TXMSG_CALLBACK_ALLOWED_NETWORKS", "10.0.0.0/8")
    policy = CallbackPolicy.from_settings(Settings())
    assert policy == CallbackPolicy.of([net("10.0.0.0/8"), net("::1/128")], [net("10.0.0.0/8")])
    monkeypatch.setenv("TXMSG_CALLBACK_DENIED_NETWORKS", "")
    assert CallbackPolicy.from_settings(Settings()).denied == ()
    for bad in ("10.0.0.1/8", "nonsense", "10.0.0.0/33"):
        monkeypatch.setenv("TXMSG_CALLBACK_ALLOWED_NETWORKS", bad)
        with pytest.raises(ValidationError):
            Settings()
