"""Hostile same-host clients against the shared-memory ring (ostinato.wire.shm): a client that
truncates its ring under the server, or names a FIFO as its ring, gets an error of its own and
the server keeps serving everyone else with its tables intact.

Each server runs in a child process, so that the old failures (SIGBUS, a thread blocked in
``open``) show up as a dead or stuck server instead of taking pytest down.
"""

from __future__ import annotations

import os
import queue
import secrets
import threading
import time

import grpc
import numpy as np
import pytest
from _wire_util import QUEUE_CODE, SERVICE, grpc_client

from ostinato.wire import codec, shm
from server_process import ServerProcess

pytestmark = pytest.mark.skipif(not shm.available(), reason="needs a writable /dev/shm (Linux)")

MB = 1 << 20
ROW = 128 * 1024  # above prefaulted_copy.MIN_BYTES: the bulk copy path


def _request(key: int, ref: list[int], n_bytes: int, **body):
    seg = {"k": key, "e": 0, "s": 0, "n": 1, "d": "|u1", "h": [n_bytes], "c": codec.RAW, "m": ref}
    msg = {
        "seg": [seg],
        "t": ["q"],
        "i": [[0, key, 1.0, [[key, 0, 1]], [True]]],
        "keep": [],
        **body,
    }
    return codec.pack_framed(msg)


class _Stream:
    """An Insert stream whose requests the test sends one at a time."""

    def __init__(self, port: int, timeout: float = 10):
        self._ch = grpc.insecure_channel(f"localhost:{port}")
        self._q: queue.Queue = queue.Queue()
        self._call = self._ch.stream_stream(SERVICE + "Insert")(self._requests(), timeout=timeout)

    def _requests(self):
        while True:
            r = self._q.get()
            if r is None:
                return
            yield r

    def send(self, raw: bytes) -> dict:
        self._q.put(raw)
        return codec.unpack(next(self._call))

    def close(self) -> None:
        self._q.put(None)
        self._ch.close()


def _still_serving(srv: ServerProcess, n_before: int) -> None:
    """The server process is alive, kept what it had, and serves another client."""
    assert srv.proc.poll() is None, f"server died (exit {srv.proc.returncode})"
    c = grpc_client(srv.address)
    try:
        c.insert(np.arange(3, dtype=np.int32), {"q": 1.0})
        assert c.server_info()["q"].current_size == n_before + 1
    finally:
        c.close()


def test_truncating_the_ring_under_the_server_fails_only_that_client():
    """D1: the server used to read the ring through a mapping; ``ftruncate`` by the client then
    killed the server with SIGBUS on its next copy, losing every table."""
    with ServerProcess(QUEUE_CODE.format(size=100)) as srv:
        ring = shm.Ring(4 * MB)
        fd = os.open(ring.path, os.O_RDWR)  # the client's own handle on its ring
        stream = _Stream(srv.port)
        try:
            data = secrets.token_bytes(ROW)
            off, _ = ring.put(data)
            assert stream.send(_request(1, [off, ROW], ROW, shm=ring.descriptor())) == {"n": 1}
            off2, _ = ring.put(data)
            os.ftruncate(fd, 4096)  # header kept, every row gone
            t0 = time.monotonic()
            with pytest.raises(grpc.RpcError) as e:
                stream.send(_request(2, [off2, ROW], ROW))
            assert time.monotonic() - t0 < 5
            assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, e.value
            assert "truncated" in e.value.details()
            _still_serving(srv, n_before=1)
            # The item stored before the truncation is intact.
            c = grpc_client(srv.address)
            s = next(c.sample("q", emit_timesteps=False))
            assert bytes(np.asarray(s.data[0])) == data
            c.close()
        finally:
            stream.close()
            os.close(fd)
            ring.close()


def test_a_ring_truncated_before_the_server_opens_it_is_refused():
    """The header check reads through the descriptor too: a ring cut short after the client
    described it is refused (the writer would resend inline), the server unharmed."""
    with ServerProcess(QUEUE_CODE.format(size=100)) as srv:
        ring = shm.Ring(4 * MB)
        try:
            off, _ = ring.put(b"x" * ROW)
            desc = ring.descriptor()
            os.truncate(ring.path, 0)
            stream = _Stream(srv.port)
            with pytest.raises(grpc.RpcError) as e:
                stream.send(_request(1, [off, ROW], ROW, shm=desc))
            stream.close()
            assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
            assert "regular file of" in e.value.details()
            _still_serving(srv, n_before=0)
        finally:
            ring.close()


def test_a_fifo_named_like_a_ring_does_not_pin_a_server_thread():
    """D2: ``os.open`` of a FIFO blocks until a writer opens it; the server opened before
    checking the file type, so each such request pinned a worker thread forever."""
    path = os.path.join(shm.SHM_DIR, f"ostinato-{secrets.token_hex(16)}")
    os.mkfifo(path, 0o600)
    code = QUEUE_CODE.format(size=100) + "\nSERVER_KWARGS = {'max_workers': 3}\n"
    try:
        with ServerProcess(code) as srv:
            desc = {"p": path, "x": b"\0" * shm.NONCE_BYTES, "z": 4 * MB}
            errors: list[grpc.RpcError] = []

            def hostile() -> None:
                stream = _Stream(srv.port, timeout=8)
                try:
                    stream.send(_request(1, [shm.HEADER_BYTES, ROW], ROW, shm=desc))
                except grpc.RpcError as e:
                    errors.append(e)
                finally:
                    stream.close()

            threads = [threading.Thread(target=hostile, daemon=True) for _ in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(10)
            assert len(errors) == 4
            for e in errors:  # refused at once, not stuck until the call's deadline
                assert e.code() == grpc.StatusCode.FAILED_PRECONDITION, e
                assert "regular file" in e.details()
            # More hostile requests than worker threads, and the server still answers.
            _still_serving(srv, n_before=0)
    finally:
        os.unlink(path)
