"""The callback address policy at call time, on both stores, with real callback servers
on 127.0.0.1: a host name is judged after resolution, for the address connected to (a
denied one is never connected to: BLOCKED), redirects are not followed, and the policy
of the checker applies to URLs stored before it changed."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import REGISTRY
from sqlalchemy import text

from tests.callbacks import Reply, answer, wait_until
from tests.integration.checker_harness import Harness

LOOPBACK = "127.0.0.0/8,::1/128"
DEFAULT_DENIED = ("0.0.0.0/8,169.254.0.0/16,100.100.100.200/32,224.0.0.0/4,240.0.0.0/4,"
                  "::/128,fe80::/10,fd00:ec2::254/128,ff00::/8")


def settled(h: Harness, group: str, txid: str) -> str | None:
    state = h.state(group, txid)
    return None if state == "PREPARED" else state


def metric(result: str) -> float:
    return REGISTRY.get_sample_value("txmsg_checks_total", {"result": result}) or 0.0


class Network:
    """Names resolved as a test says (the rest as usual), and every address connected to."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.names: dict[str, list[str]] = {}
        self.connected: list[str] = []
        real_getaddrinfo, real_connect = socket.getaddrinfo, socket.socket.connect

        def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
            if host not in self.names:
                return real_getaddrinfo(host, port, *args, **kwargs)
            return [(socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM,
                     socket.IPPROTO_TCP, "",
                     (a, port, 0, 0) if ":" in a else (a, port)) for a in self.names[host]]

        def connect(sock: socket.socket, address: Any) -> Any:
            if isinstance(address, tuple):
                self.connected.append(str(address[0]))
            return real_connect(sock, address)

        monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
        monkeypatch.setattr(socket.socket, "connect", connect)

    def touched(self, network: str) -> list[str]:
        net = ipaddress.ip_network(network)
        out = []
        for a in self.connected:
            ip = ipaddress.ip_address(a)
            if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
                ip = ip.ipv4_mapped
            if ip.version == net.version and ip in net:
                out.append(a)
        return out


@pytest.fixture
def network(monkeypatch: pytest.MonkeyPatch) -> Iterator[Network]:
    yield Network(monkeypatch)


def port_of(url: str) -> int:
    return int(url.split(":")[2].split("/")[0])


def test_a_name_that_resolves_into_a_denied_network_is_never_connected_to(
        harness_factory) -> None:
    # no hosts file needed: localhost resolves to loopback, denied in this test
    h = harness_factory(callback_denied_networks=f"{DEFAULT_DENIED},{LOOPBACK}")
    cb = h.callback(answer("COMMIT"))
    url = f"http://localhost:{port_of(cb.url)}/check"
    h.register("shop", [url])  # a name: judged when connecting, not at registration
    before = metric("BLOCKED")
    h.send("shop", "order-1")
    h.start_checker()

    assert wait_until(lambda: settled(h, "shop", "order-1")) == "DISCARDED"
    assert cb.checks == []
    checks = h.check_log("shop", "order-1")
    assert [(c.check_times, c.result, c.url) for c in checks] == \
        [(1, "BLOCKED", url), (2, "BLOCKED", url), (3, "BLOCKED", url)]
    assert "callback address policy refuses" in checks[0].detail
    assert "127.0.0.1" in checks[0].detail
    assert metric("BLOCKED") == before + 3


def test_denied_addresses_of_a_name_are_skipped_for_an_allowed_one(
        harness, network: Network) -> None:
    h = harness
    cb = h.callback(answer("COMMIT"))
    port = port_of(cb.url)
    network.names["metadata.test"] = ["169.254.169.254"]
    network.names["mapped.test"] = ["::ffff:169.254.169.254"]
    network.names["mixed.test"] = ["169.254.169.254", "::ffff:a9fe:a9fe", "127.0.0.1"]
    h.register("shop", [f"http://metadata.test:{port}/check", f"http://mapped.test:{port}/check",
                        f"http://mixed.test:{port}/check"])
    h.send("shop", "order-1")
    h.start_checker()

    assert wait_until(lambda: settled(h, "shop", "order-1")) == "COMMITTED"
    [check] = h.check_log("shop", "order-1")
    assert (check.result, check.url) == ("COMMIT", f"http://mixed.test:{port}/check")
    assert check.detail.count("not connected") == 2  # the first two URLs: BLOCKED
    assert network.touched("169.254.0.0/16") == []  # never connected to, mapped or not
    assert "127.0.0.1" in network.connected
    assert len(cb.checks) == 1


def test_the_address_checked_is_the_address_used_on_every_connection(
        harness_factory, network: Network) -> None:
    """A name that changes its answer (DNS rebinding) is judged again at each connection."""
    h = harness_factory(check_max_times=2)

    def rebind(check: dict[str, Any]) -> Reply:
        # the name answers otherwise once check #1 is here (whose connection is closed)
        network.names["rebind.test"] = ["169.254.169.254"]
        return Reply(body=b'{"resolution": "UNKNOWN"}', headers={"Connection": "close"})

    cb = h.callback(rebind)
    port = port_of(cb.url)
    network.names["rebind.test"] = ["127.0.0.1"]
    h.register("shop", [f"http://rebind.test:{port}/check"])
    h.send("shop", "order-1")
    h.start_checker()

    assert wait_until(lambda: settled(h, "shop", "order-1")) == "DISCARDED"
    assert [c.result for c in h.check_log("shop", "order-1")] == ["UNKNOWN", "BLOCKED"]
    assert cb.numbers("order-1") == [1]
    assert network.touched("169.254.0.0/16") == []


def test_redirects_are_not_followed(harness) -> None:
    h = harness
    target = h.callback(answer("COMMIT"))
    redirects = {}
    for code in (301, 302, 303, 307, 308):
        redirects[code] = h.callback(Reply(status=code, headers={"Location": target.url}))
        h.register(f"shop-{code}", [redirects[code].url])
        h.send(f"shop-{code}", "order-1")
    h.start_checker()
    for code, redirect in redirects.items():
        assert wait_until(lambda c=code: settled(h, f"shop-{c}", "order-1")) == "DISCARDED"
        assert {(c.result, c.detail) for c in h.check_log(f"shop-{code}", "order-1")} == \
            {("HTTP_ERROR", f"{redirect.url}: HTTP {code}")}
    assert target.checks == []


@pytest.mark.parametrize("host", ["127.1", "2130706433", "0x7f.0.0.1", "0177.0.0.1",
                                  "[::ffff:127.0.0.1]"])
def test_odd_forms_of_an_address_reach_it_and_are_judged_as_it(
        harness_factory, host: str) -> None:
    h = harness_factory()  # the default policy: loopback allowed
    cb = h.callback(answer("COMMIT"))
    url = f"http://{host}:{port_of(cb.url)}/check"
    h.register("shop", [url])
    h.send("shop", "order-1")
    # the forms reach 127.0.0.1 (IPv4-mapped IPv6 too, over the dual-stack socket)...
    checker = h.start_checker()
    assert wait_until(lambda: settled(h, "shop", "order-1")) == "COMMITTED"
    assert cb.numbers("order-1") == [1]
    checker.shutdown()
    h.services.remove(checker)
    h.send("shop", "order-2")

    # ...so where loopback is denied they are refused, at registration and at call time
    denying = harness_factory(callback_denied_networks=f"{DEFAULT_DENIED},{LOOPBACK}")
    r = denying.client.put("/v1/producer-groups/shop", json={"check_urls": [url]})
    assert r.status_code == 400 and r.json["code"] == "callback_url_not_allowed"
    assert "127.0.0.1" in r.json["detail"]
    r = denying.client.post("/v1/producer-groups/shop/transactions",
                            json={"topic": "t", "body": "b", "check_url": url})
    assert r.status_code == 400 and r.json["code"] == "callback_url_not_allowed"
    denying.start_checker()  # a checker whose policy changed since order-2 was stored
    assert wait_until(lambda: settled(h, "shop", "order-2")) == "DISCARDED"
    assert {c.result for c in h.check_log("shop", "order-2")} == {"BLOCKED"}
    assert cb.numbers("order-2") == []


# IPv6 spellings of 169.254.169.254: IPv4-compatible, NAT64, 6to4, Teredo (client inverted)
METADATA_IN_IPV6 = ["::169.254.169.254", "64:ff9b::a9fe:a9fe", "2002:a9fe:a9fe::",
                    "2001:0:4136:e378:8000:63bf:5601:5601"]


@pytest.mark.parametrize("address", [*METADATA_IN_IPV6, "::127.0.0.1", "64:ff9b::7f00:1"])
def test_ipv6_spellings_of_a_denied_ipv4_address_are_refused_at_registration_and_send(
        harness_factory, address: str) -> None:
    h = harness_factory(callback_denied_networks=f"{DEFAULT_DENIED},{LOOPBACK}")
    url = f"http://[{address}]:8080/check"
    r = h.client.put("/v1/producer-groups/shop", json={"check_urls": [url]})
    assert r.status_code == 400 and r.json["code"] == "callback_url_not_allowed", r.json
    r = h.client.post("/v1/producer-groups/shop/transactions",
                      json={"topic": "t", "body": "b", "check_url": url})
    assert r.status_code == 400 and r.json["code"] == "callback_url_not_allowed", r.json


def test_names_resolving_to_ipv6_spellings_of_denied_addresses_are_blocked(
        harness_factory, network: Network) -> None:
    h = harness_factory(callback_denied_networks=f"{DEFAULT_DENIED},{LOOPBACK}")
    cb = h.callback(answer("COMMIT"))
    port = port_of(cb.url)
    network.names["metadata6.test"] = METADATA_IN_IPV6
    network.names["loopback6.test"] = ["::127.0.0.1", "64:ff9b::7f00:1", "2002:7f00:1::"]
    url = f"http://metadata6.test:{port}/check"
    h.register("shop", [url, f"http://loopback6.test:{port}/check"])
    h.send("shop", "order-1")
    h.start_checker()

    assert wait_until(lambda: settled(h, "shop", "order-1")) == "DISCARDED"
    checks = h.check_log("shop", "order-1")
    assert {c.result for c in checks} == {"BLOCKED"}
    assert "169.254.169.254" in checks[0].detail and "127.0.0.1" in checks[0].detail
    assert network.connected == []
    assert cb.checks == []


def test_allowed_networks_admit_only_themselves(harness_factory) -> None:
    h = harness_factory(callback_allowed_networks="10.0.0.0/8")
    for url in ("http://127.0.0.1:9/c", "http://[::1]:9/c", "http://192.168.1.1/c"):
        r = h.client.put("/v1/producer-groups/shop", json={"check_urls": [url]})
        assert r.status_code == 400 and r.json["code"] == "callback_url_not_allowed", url
    h.register("shop", ["http://10.1.2.3:9/c", "http://10.1/c", "http://[::ffff:10.0.0.9]/c",
                        "http://callbacks.internal.test/c"])
    # allowed, yet still never a denied network
    r = h.client.put("/v1/producer-groups/shop", json={"check_urls": ["http://0.0.0.0/c"]})
    assert r.json["code"] == "callback_url_not_allowed"

    cb = h.callback(answer("COMMIT"))  # on 127.0.0.1, outside the allowed networks
    h.register("shop", [f"http://localhost:{port_of(cb.url)}/check"])
    h.send("shop", "order-1")
    h.start_checker()
    assert wait_until(lambda: settled(h, "shop", "order-1")) == "DISCARDED"
    assert {c.result for c in h.check_log("shop", "order-1")} == {"BLOCKED"}
    assert cb.checks == []


def test_no_url_with_user_info_is_stored_or_called(harness) -> None:
    h = harness
    cb = h.callback(answer("COMMIT"))
    h.register("shop", [cb.url])
    with_user = cb.url.replace("http://", "http://alice:s3cret@")
    r = h.client.put("/v1/producer-groups/shop", json={"check_urls": [with_user]})
    assert r.status_code == 400 and r.json["code"] == "invalid_callback_url"
    assert "s3cret" not in r.get_data(as_text=True)
    assert h.client.get("/v1/producer-groups/shop").json["check_urls"] == [cb.url]
    r = h.client.post("/v1/producer-groups/shop/transactions",
                      json={"topic": "t", "body": "b", "check_url": with_user})
    assert r.status_code == 400 and r.json["code"] == "invalid_callback_url"

    # one stored before this rule (the migration removes them) is neither called nor shown
    h.send("shop", "order-1")
    with h.engine.begin() as conn:
        conn.execute(text("UPDATE txn SET check_url = :u"), {"u": with_user})
    h.register("shop", ["http://127.0.0.1:9/never"])
    h.start_checker()
    assert wait_until(lambda: settled(h, "shop", "order-1")) == "DISCARDED"
    checks = h.check_log("shop", "order-1")
    shown = cb.url.replace("http://", "http://***@")
    assert checks[0].detail.startswith(f"{shown}: invalid_callback_url")
    assert not any("s3cret" in (c.detail or "") + (c.url or "") for c in checks)
    assert cb.checks == []
