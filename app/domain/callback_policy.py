"""The callback address policy: which check callback URLs may be stored and called.

A URL is an absolute http(s) URL without user info (else ``invalid_callback_url``). Its
host is judged against the denied and allowed networks (``TXMSG_CALLBACK_DENIED_NETWORKS``,
``TXMSG_CALLBACK_ALLOWED_NETWORKS``): at registration or send when it is an IP literal
(``callback_url_not_allowed``), and by the check service on every connection, after name
resolution, for the address actually connected to (``checker.callback``).

An address is judged as the address it reaches: an IPv6 address that embeds an IPv4
address (``embedded_ipv4``: IPv4-mapped, IPv4-compatible, NAT64, 6to4, Teredo) as that
IPv4 address too, and the numeric IPv4 forms the resolver accepts (``2130706433``,
``127.1``, ``0x7f.0.0.1``: inet_aton's) as the dotted quad they stand for.
"""

from __future__ import annotations

import functools
import ipaddress
import re
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit

from app.config import DEFAULT_CALLBACK_DENIED_NETWORKS, Settings
from app.problems import ProblemCode

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

INVALID = ProblemCode.INVALID_CALLBACK_URL
NOT_ALLOWED = ProblemCode.CALLBACK_URL_NOT_ALLOWED

# An absolute http(s) URI as RFC 3986 writes it (so ASCII: an international name goes
# in its IDNA form), without user info; a host name of unreserved characters and
# sub-delims, an IPv6 literal in brackets (no zone id).
_UNRESERVED, _SUB_DELIMS, _PCT = r"A-Za-z0-9\-._~", r"!$&'()*+,;=", r"%[0-9A-Fa-f]{2}"
_PCHAR = rf"(?:[{_UNRESERVED}{_SUB_DELIMS}:@]|{_PCT})"
_URL_RE = re.compile(rf"""
    [Hh][Tt][Tt][Pp][Ss]?://
    (?:\[[0-9A-Fa-f:.]+\]|[{_UNRESERVED}{_SUB_DELIMS}]+)  # host
    (?::[0-9]*)?                                         # port
    (?:/{_PCHAR}*)*                                      # path
    (?:\?(?:{_PCHAR}|[/?])*)?                            # query
    (?:\#(?:{_PCHAR}|[/?])*)?                            # fragment
""", re.VERBOSE)
# the characters of inet_aton's forms: decimal, octal (0 prefix), hex (0x prefix), 1-4 parts
_NUMERIC_IPV4_RE = re.compile(r"[0-9a-fA-FxX.]+")
# 64:ff9b::/96, RFC 6052's well-known NAT64 prefix, as the top 96 bits of an address
_NAT64_PREFIX = int(ipaddress.IPv6Address("64:ff9b::")) >> 32


class CallbackUrlError(ValueError):
    """A URL the policy refuses; ``code`` is the API's problem code."""

    def __init__(self, code: ProblemCode, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class CallbackPolicy:
    denied: tuple[IPNetwork, ...]
    allowed: tuple[IPNetwork, ...] = ()  # empty: every address not denied

    @classmethod
    def of(cls, denied: Iterable[IPNetwork], allowed: Iterable[IPNetwork] = ()) -> CallbackPolicy:
        return cls(tuple(denied), tuple(allowed))

    @classmethod
    def from_settings(cls, settings: Settings) -> CallbackPolicy:
        return cls.of(settings.callback_denied_networks, settings.callback_allowed_networks)

    @staticmethod
    def default() -> CallbackPolicy:
        """The contract's defaults (every address not denied by default is allowed)."""
        return _default()

    def allows(self, address: IPAddress) -> bool:
        """Refused when the address or the IPv4 address it embeds is denied; with an
        allow-list, allowed only when the embedded IPv4 address (if any, else the address
        itself) is in it. The one judgement of registration, send and connection."""
        ipv4 = embedded_ipv4(address) if isinstance(address, ipaddress.IPv6Address) else None
        if any(a in net for a in (address, ipv4) if a is not None for net in self.denied):
            return False
        judged = address if ipv4 is None else ipv4
        return not self.allowed or any(judged in net for net in self.allowed)

    def check_address(self, address: str) -> IPAddress | None:
        """The address (as ``getaddrinfo`` gives it) if the policy refuses it, else None."""
        ip = ipaddress.ip_address(address)
        return None if self.allows(ip) else reached(ip)

    def check_url(self, url: str) -> str:
        """``url`` if it may be stored, else ``CallbackUrlError`` with its code."""
        parts = _split(url)
        literal = ip_literal(parts.hostname or "")
        if literal is not None and not self.allows(literal):
            raise CallbackUrlError(NOT_ALLOWED, f"{_shown(url)} points at {reached(literal)}, "
                                                "which the callback address policy refuses")
        return url


@functools.cache
def _default() -> CallbackPolicy:
    return CallbackPolicy.of(ipaddress.ip_network(n)
                             for n in DEFAULT_CALLBACK_DENIED_NETWORKS.split(","))


def redacted(url: str) -> str:
    """``url`` with any user info replaced by ``***`` (for logs and records)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return parts._replace(netloc="***@" + parts.netloc.rpartition("@")[2]).geturl()


def _shown(url: str) -> str:
    """``url`` for an error message: never one that may carry a password."""
    return "the URL" if "@" in url else repr(url[:200])


def _split(url: str) -> SplitResult:
    try:
        parts = urlsplit(url)
        _ = parts.port  # raises ValueError unless a number in 0..65535
    except ValueError:
        parts = None
    if parts is not None and "@" in parts.netloc:
        # never stored: requests would send it as Basic auth, GET would show it
        raise CallbackUrlError(INVALID, "callback URLs must not carry user info "
                                        "(verify the signature of the check instead)")
    if (parts is None or not _URL_RE.fullmatch(url) or not parts.hostname
            or ("[" in parts.netloc and ip_literal(parts.hostname) is None)):
        raise CallbackUrlError(INVALID, f"{_shown(url)} is not an absolute http(s) URL "
                                        "(RFC 3986, without user info)")
    return parts


def ip_literal(host: str) -> IPAddress | None:
    """The address a URL's host stands for when it is an IP literal, else None (a name)."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    if _NUMERIC_IPV4_RE.fullmatch(host):
        try:  # the resolver reads these forms with inet_aton, so do the same
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    return None


def reached(address: IPAddress) -> IPAddress:
    """The address a connection to ``address`` reaches: the IPv4 address an IPv6 one
    embeds, else itself."""
    if isinstance(address, ipaddress.IPv6Address):
        return embedded_ipv4(address) or address
    return address


def embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address stands for, when it embeds one: IPv4-mapped
    (``::ffff:a.b.c.d``), IPv4-compatible (``::a.b.c.d``, but ``::`` and ``::1`` are
    IPv6's own), NAT64's well-known prefix (``64:ff9b::a.b.c.d``), 6to4 (``2002:AABB:CCDD::``)
    and Teredo (``2001:0::/32``, the client's address inverted in the last 32 bits)."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    value = int(address)
    if value >> 32 in (0, _NAT64_PREFIX) and value > 1:
        return ipaddress.IPv4Address(value & 0xFFFFFFFF)
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    return None
