"""Addresses and the in-process server registry (ostinato.transport.registry)."""

import pytest

import ostinato as reverb
from ostinato.transport import registry


@pytest.mark.parametrize(
    "address, loopback",
    [
        ("localhost:1234", True),
        ("127.0.0.1:80", True),
        ("127.3.4.5:1", True),
        ("[::1]:99", True),
        ("unix:/tmp/sock", True),
        ("dns:///localhost:5", True),
        ("ipv4:127.0.0.1:5", True),
        ("example.com:80", False),
        ("10.0.0.1:80", False),
        ("[2001:db8::1]:80", False),
        ("localhost.example.com:1", False),
    ],
)
def test_is_loopback(address, loopback):
    assert registry.is_loopback(address) is loopback


@pytest.mark.parametrize(
    "address, host, port",
    [
        ("localhost:80", "localhost", 80),
        ("[::1]:9", "[::1]", 9),
        ("h.example:65535", "h.example", 65535),
    ],
)
def test_parse_address(address, host, port):
    assert registry.parse_address(address) == (host, port)


@pytest.mark.parametrize(
    "address, match",
    [
        ("localhost", "host:port"),
        ("h:x", "non-numeric"),
        ("h:0", "outside"),
        ("h:70000", "outside"),
        (5, "host:port"),
    ],
)
def test_parse_address_names_the_bad_address(address, match):
    with pytest.raises(ValueError, match=match):
        registry.parse_address(address)


def test_split_addresses():
    assert registry.split_addresses("a:1") == ["a:1"]
    assert registry.split_addresses(" a:1, b:2 ,") == ["a:1", "b:2"]
    assert registry.split_addresses(["a:1", "b:2"]) == ["a:1", "b:2"]
    for bad in ("", " , ", [], None):
        with pytest.raises(ValueError, match="server_address"):
            registry.split_addresses(bad)


def test_local_server_is_found_by_this_hosts_names_until_it_stops():
    server = reverb.Server([reverb.Table.queue("q", 3)])
    try:
        for host in ("localhost", "127.0.0.1", "0.0.0.0", "[::1]"):
            assert registry.local_server(f"{host}:{server.port}") is server
        assert registry.local_server(f"example.invalid:{server.port}") is None
        assert registry.has_server(server.port)
    finally:
        server.stop()
    assert registry.local_server(f"localhost:{server.port}") is None
    assert not registry.has_server(server.port)
