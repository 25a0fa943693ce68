"""A client and a server that disagree about TLS: the client says so within seconds, instead of
retrying for ``unavailable_timeout`` (30 s by default) and reporting "Socket closed"."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import ostinato as reverb
from ostinato.errors import UnavailableError
from ostinato.server import ServerTLS
from ostinato.wire.status import TLSMismatchError, speaks_tls

LIMIT = 6.0  # seconds; the default unavailable_timeout is 30


@pytest.fixture(scope="module")
def ca():
    return pytest.importorskip("trustme").CA()


def _tls(ca) -> ServerTLS:
    cert = ca.issue_cert("localhost", "127.0.0.1")
    return ServerTLS(
        b"".join(b.bytes() for b in cert.cert_chain_pems), cert.private_key_pem.bytes()
    )


def _fails_within(fn, limit: float) -> BaseException:
    """Runs ``fn`` on a thread; it must raise within ``limit`` s (the test never waits 30 s)."""
    out: list = []

    def run() -> None:
        t0 = time.monotonic()
        try:
            fn()
            out.append((None, time.monotonic() - t0))
        except BaseException as e:  # noqa: BLE001
            out.append((e, time.monotonic() - t0))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(limit)
    assert out, f"still waiting after {limit} s"
    err, took = out[0]
    assert err is not None and took < limit
    return err


def test_plaintext_client_of_a_tls_server_is_told_the_server_expects_tls(ca):
    with reverb.Server([reverb.Table.queue("q", 10)], tls=_tls(ca)) as server:
        address = f"localhost:{server.port}"
        client = reverb.Client(address, in_process=False)  # default unavailable_timeout: 30 s
        for call in (client.server_info, lambda: client.insert(np.int64(1), {"q": 1.0})):
            err = _fails_within(call, LIMIT)
            assert isinstance(err, UnavailableError) and isinstance(err, TLSMismatchError), err
            assert "expects TLS" in str(err) and "root_certificates" in str(err)
            assert err.address == address
        client.close()
        good = reverb.Client(address, in_process=False, root_certificates=ca.cert_pem.bytes())
        good.insert(np.int64(1), {"q": 1.0})  # the server serves correct clients meanwhile
        assert good.server_info()["q"].current_size == 1
        good.close()


def test_tls_client_of_a_plaintext_server_is_told_it_does_not_speak_tls(ca):
    with reverb.Server([reverb.Table.queue("q", 10)]) as server:
        address = f"localhost:{server.port}"
        client = reverb.Client(address, in_process=False, root_certificates=ca.cert_pem.bytes())
        for call in (client.server_info, lambda: client.insert(np.int64(1), {"q": 1.0})):
            err = _fails_within(call, LIMIT)
            assert isinstance(err, TLSMismatchError), err
            assert "does not speak TLS" in str(err)
        client.close()


def test_a_stopped_server_is_not_mistaken_for_a_tls_one(ca):
    with reverb.Server([reverb.Table.queue("q", 10)], tls=_tls(ca)) as server:
        assert speaks_tls(f"localhost:{server.port}")
    with reverb.Server([reverb.Table.queue("q", 10)]) as plain:
        assert not speaks_tls(f"localhost:{plain.port}")
        port = plain.port
    assert not speaks_tls(f"localhost:{port}")  # nobody listens
    client = reverb.Client(f"localhost:{port}", in_process=False, unavailable_timeout=0.5)
    err = _fails_within(client.server_info, LIMIT)
    assert isinstance(err, UnavailableError) and not isinstance(err, TLSMismatchError)
    client.close()
