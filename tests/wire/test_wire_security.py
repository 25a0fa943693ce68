"""TLS, tokens, listening warnings, message size limits and port collisions, against real
servers on localhost. Certificates are made in the test (``trustme``)."""

from __future__ import annotations

import logging
import time

import grpc
import numpy as np
import pytest
from _wire_util import writing

import ostinato as reverb
from ostinato.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    ResourceExhaustedError,
    UnavailableError,
)
from ostinato.server import ServerTLS
from server_process import ServerProcess


def queue_tables():
    return [reverb.Table.queue("q", 100)]


def grpc_client(address, **kw):
    kw.setdefault("unavailable_timeout", 5)
    return reverb.Client(address, in_process=False, **kw)


def round_trip(client, value=7):
    client.insert(np.int64(value), {"q": 1.0}, timeout=5)
    with writing(client, 1) as w:
        w.append({"x": np.int64(value + 1)})
        w.create_item("q", 1.0, {"x": w.history["x"][-1:]})
        w.flush(timeout_ms=5000)
    got = [int(s[0].data[0]) for s in client.sample("q", 2, timeout=5)]
    assert got == [value, value + 1]


def assert_fails_fast(fn, exc, match, limit):
    t0 = time.monotonic()
    with pytest.raises(exc, match=match) as ei:
        fn()
    assert time.monotonic() - t0 < limit
    return ei.value


# -- TLS -------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def trustme():
    return pytest.importorskip("trustme")  # test-only dependency; only the TLS tests need it


@pytest.fixture(scope="module")
def ca(trustme):
    return trustme.CA()


def server_tls(ca, *names):
    cert = ca.issue_cert(*(names or ("localhost", "127.0.0.1")))
    return ServerTLS(
        b"".join(b.bytes() for b in cert.cert_chain_pems), cert.private_key_pem.bytes()
    )


@pytest.fixture(scope="module")
def tls_server(ca):
    server = reverb.Server(queue_tables(), tls=server_tls(ca))
    yield server
    server.stop()


def test_tls_client_with_root_certificates_works(ca, tls_server):
    client = grpc_client(f"localhost:{tls_server.port}", root_certificates=ca.cert_pem.bytes())
    round_trip(client)
    client.close()


def test_tls_server_name_override(ca):
    with reverb.Server(queue_tables(), tls=server_tls(ca, "replay.ostinato.test")) as server:
        good = grpc_client(
            f"127.0.0.1:{server.port}",
            root_certificates=ca.cert_pem.bytes(),
            tls_server_name="replay.ostinato.test",
        )
        round_trip(good)
        # Without the override the name does not match the certificate.
        bad = grpc_client(
            f"127.0.0.1:{server.port}",
            root_certificates=ca.cert_pem.bytes(),
            unavailable_timeout=0.5,
        )
        assert_fails_fast(bad.server_info, UnavailableError, f"127.0.0.1:{server.port}", 5)


@pytest.mark.parametrize("what", ["mismatched", "garbage"])
def test_unusable_tls_pair_is_reported_as_such_not_as_a_busy_port(ca, what):
    good, other = server_tls(ca), server_tls(ca)
    tls = (
        ServerTLS(good.certificate_chain, other.private_key)
        if what == "mismatched"
        else ServerTLS(b"not a certificate", b"not a key")
    )
    with pytest.raises(ValueError, match="private key and certificate chain cannot be used"):
        reverb.Server(queue_tables(), tls=tls)


@pytest.mark.parametrize("who", ["plaintext", "untrusted-ca"])
def test_tls_server_rejects_clients_without_trust(trustme, tls_server, who):
    address = f"localhost:{tls_server.port}"
    kw = {} if who == "plaintext" else {"root_certificates": trustme.CA().cert_pem.bytes()}
    client = grpc_client(address, unavailable_timeout=0.5, **kw)
    for call in (
        client.server_info,
        lambda: client.insert(np.int64(1), {"q": 1.0}),
        lambda: client.reset("q"),
    ):
        err = assert_fails_fast(call, UnavailableError, address, 5)
        assert err.address == address
        if who == "untrusted-ca":  # gRPC's reason is passed on
            assert "handshake failed" in str(err).lower() and "CERTIFICATE_VERIFY_FAILED" in str(
                err
            )
    assert len(tls_server.tables_by_name["q"]) == 0


def test_tls_client_against_plaintext_server_fails_clearly(ca):
    with reverb.Server(queue_tables()) as server:
        address = f"localhost:{server.port}"
        client = grpc_client(
            address, root_certificates=ca.cert_pem.bytes(), unavailable_timeout=0.5
        )
        err = assert_fails_fast(client.server_info, UnavailableError, address, 5)
        assert "handshake failed" in str(err).lower()


# -- tokens ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def token_server():
    server = reverb.Server(queue_tables(), token="s3cret")
    yield server
    server.stop()


def test_right_token_works(token_server):
    client = grpc_client(f"localhost:{token_server.port}", token="s3cret")
    round_trip(client, 20)
    client.close()


@pytest.mark.parametrize("token", [None, "wrong", "s3cret2"])
def test_wrong_or_missing_token_is_rejected_at_once(token_server, token):
    address = f"localhost:{token_server.port}"
    # A long unavailable_timeout: a credentials error must not be retried.
    client = grpc_client(address, token=token, unavailable_timeout=30)
    calls = {
        "server_info": client.server_info,
        "insert": lambda: client.insert(np.int64(1), {"q": 1.0}, timeout=5),
        "sample": lambda: next(client.sample("q", timeout=1)),
        "reset": lambda: client.reset("q"),
        "mutate": lambda: client.mutate_priorities("q", {1: 2.0}),
    }
    for name, call in calls.items():
        err = assert_fails_fast(call, FailedPreconditionError, "rejected the credentials", 3)
        assert address in str(err), name
    assert len(token_server.tables_by_name["q"]) == 0


def test_token_checked_on_insert_stream_itself(token_server):
    """The writer path (the Insert stream) checks the token too, not only ServerInfo."""
    client = grpc_client(f"localhost:{token_server.port}", token="wrong")
    w = client.trajectory_writer(1, validate_items=False)
    try:
        w.append({"x": np.int64(1)})
        w.create_item("q", 1.0, {"x": w.history["x"][-1:]})
        with pytest.raises(reverb.errors.ReverbError, match="credentials"):
            w.flush(timeout_ms=5000)
    finally:
        try:
            w.close()
        except reverb.errors.ReverbError:
            pass
    assert len(token_server.tables_by_name["q"]) == 0


def test_raw_call_without_token_is_unauthenticated(token_server):
    with grpc.insecure_channel(f"localhost:{token_server.port}") as channel:
        with pytest.raises(grpc.RpcError) as ei:
            channel.unary_unary("/ostinato.Replay/ServerInfo")(b"\x80", timeout=5)
        assert ei.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(grpc.RpcError) as ei:
            list(channel.stream_stream("/ostinato.Replay/Insert")(iter([b"\x80"]), timeout=5))
        assert ei.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_tls_and_token_together(ca):
    with reverb.Server(queue_tables(), tls=server_tls(ca), token="t0k") as server:
        address = f"localhost:{server.port}"
        round_trip(grpc_client(address, root_certificates=ca.cert_pem.bytes(), token="t0k"), 30)
        bad = grpc_client(address, root_certificates=ca.cert_pem.bytes(), token="nope")
        assert_fails_fast(bad.server_info, FailedPreconditionError, "credentials", 3)


def test_token_must_be_a_nonempty_string():
    with pytest.raises(ValueError, match="token"):
        reverb.Server(queue_tables(), token="")


# -- listening on other interfaces -----------------------------------------------------------------
def _server_warnings(caplog, **kw):
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="ostinato"):
        server = reverb.Server(queue_tables(), **kw)
        server.stop()
    return [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_warning_when_listening_on_all_interfaces_without_protection(caplog):
    recs = _server_warnings(caplog, host="0.0.0.0")
    assert len(recs) == 1
    assert "0.0.0.0" in recs[0].getMessage() and "without TLS or a token" in recs[0].getMessage()
    assert _server_warnings(caplog, host="0.0.0.0", token="x") == []


def test_no_warning_on_all_interfaces_with_tls(caplog, ca):
    assert _server_warnings(caplog, host="0.0.0.0", tls=server_tls(ca)) == []


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1"])
def test_no_warning_on_loopback(caplog, host):
    assert _server_warnings(caplog, host=host) == []


# -- message size limits ---------------------------------------------------------------------------
@pytest.fixture()
def small_server():
    server = reverb.Server(
        [
            reverb.Table.queue("q", 100),
            reverb.Table(
                "u",
                reverb.selectors.Uniform(),
                reverb.selectors.Fifo(),
                100,
                reverb.rate_limiters.MinSize(1),
            ),
        ],
        max_message_bytes=64 * 1024,
    )
    yield server
    server.stop()


def test_request_over_the_server_limit_gets_a_clear_error(small_server):
    client = grpc_client(f"localhost:{small_server.port}", compression="none")
    noise = np.random.default_rng(0).integers(0, 255, 200_000, dtype=np.uint8)
    err = assert_fails_fast(
        lambda: client.insert(noise, {"q": 1.0}, timeout=5),
        ResourceExhaustedError,
        r"larger than max \(\d+ vs\. 65536\)",
        5,
    )
    assert isinstance(err, IndexError)  # Reverb's mapping of RESOURCE_EXHAUSTED
    assert len(small_server.tables_by_name["q"]) == 0
    # Same through a writer, which then reports the failure on flush.
    w = client.trajectory_writer(1)
    try:
        w.append({"x": noise})
        w.create_item("q", 1.0, {"x": w.history["x"][-1:]})
        with pytest.raises(reverb.errors.ReverbError, match="65536"):
            w.flush(timeout_ms=5000)
    finally:
        try:
            w.close()
        except reverb.errors.ReverbError:
            pass
    # The server keeps serving, this client included.
    client.insert(np.zeros(1000, np.uint8), {"q": 1.0}, timeout=5)
    assert len(small_server.tables_by_name["q"]) == 1


def test_request_over_the_client_limit_is_refused_before_sending(small_server):
    client = grpc_client(
        f"localhost:{small_server.port}", compression="none", max_message_bytes=4096
    )
    assert_fails_fast(
        lambda: client.insert(np.zeros(10_000, np.uint8), {"q": 1.0}, timeout=5),
        InvalidArgumentError,
        r"\d+ bytes exceeds max_message_bytes \(4096\)",
        3,
    )
    assert len(small_server.tables_by_name["q"]) == 0


def test_response_over_the_limit_is_split_not_failed(small_server):
    """A sample reply never exceeds max_message_bytes: the server samples fewer items."""
    local = small_server.localhost_client()
    rng = np.random.default_rng(1)
    for _ in range(6):
        local.insert(rng.integers(0, 255, 20_000, dtype=np.uint8), {"u": 1.0})
    client = grpc_client(f"localhost:{small_server.port}")
    batch = client.sample_batch("u", 6, timeout=5)
    assert 1 <= len(batch.info.key) < 6
    assert batch.data[0].shape[1:] == (1, 20_000)


def test_response_over_the_limit_loses_no_queue_item(small_server):
    local = small_server.localhost_client()
    rng = np.random.default_rng(2)
    sent = [rng.integers(0, 255, 20_000, dtype=np.uint8) for _ in range(6)]
    for x in sent:
        local.insert(x, {"q": 1.0})
    client = grpc_client(f"localhost:{small_server.port}")
    got = []
    while len(got) < 6:
        got.extend(client.sample_batch("q", 6, timeout=5).data[0][:, 0])
    assert len(small_server.tables_by_name["q"]) == 0
    for a, b in zip(got, sent):
        np.testing.assert_array_equal(a, b)


def test_max_message_bytes_is_validated():
    with pytest.raises(ValueError, match="max_message_bytes"):
        reverb.Server(queue_tables(), max_message_bytes=100)


# -- ports -----------------------------------------------------------------------------------------
def test_port_in_use_by_another_process_is_an_error():
    with ServerProcess(
        "import ostinato as reverb\nTABLES = [reverb.Table.queue('q', 10)]"
    ) as other:
        tables = queue_tables()
        for host in ("localhost", "0.0.0.0"):
            with pytest.raises(ValueError, match=f"port \\({other.port}\\) is already in use"):
                reverb.Server(tables, port=other.port, host=host)
        # The refused server left its tables free for another one, and the other process serves on.
        with reverb.Server(tables) as server:
            assert server.port != other.port
        assert "q" in grpc_client(other.address).server_info(timeout=5)


def test_port_in_use_in_this_process_is_an_error():
    with reverb.Server(queue_tables()) as first:
        with pytest.raises(ValueError, match="already in use"):
            reverb.Server(queue_tables(), port=first.port, host="0.0.0.0")
        round_trip(grpc_client(f"localhost:{first.port}"), 40)
