"""The same-host shared-memory ring (ostinato.wire.shm): allocator properties, the server's
validation of rings and references, and writers end to end (used, refused, cleaned up)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import grpc
import numpy as np
import pytest
from _wire_util import SERVICE, grpc_client, writing
from hypothesis import given, settings
from hypothesis import strategies as st

import ostinato as reverb
from ostinato.wire import codec, shm
from ostinato.wire.grpc_transport import ClientOptions

pytestmark = pytest.mark.skipif(not shm.available(), reason="needs a writable /dev/shm (Linux)")

MB = 1 << 20


def _rings() -> set[str]:
    return {n for n in os.listdir(shm.SHM_DIR) if n.startswith("ostinato-")}


# -- the ring allocator ------------------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 5), st.integers(1, 400_000)), min_size=1, max_size=40))
def test_ring_regions_never_overlap_and_keep_their_bytes(ops):
    """Requests of random sizes, acknowledged in order: live regions never overlap, their bytes
    stay intact, and space is only refused when live data really leaves no contiguous room."""
    ring = shm.Ring(MB + shm.HEADER_BYTES)
    try:
        live: list[tuple[int, int, int, bytes]] = []  # (offset, length, cost, data)
        fill = 0
        for n_acks, size in ops:
            for _ in range(min(n_acks - 1, len(live))):  # acknowledge the oldest requests
                off, ln, cost, data = live.pop(0)
                ring.release(cost)
            fill = (fill + 1) % 251
            data = bytes([fill]) * size
            put = ring.put(data)
            if put is None:
                assert live or size > ring.size - shm.HEADER_BYTES
                continue
            off, cost = put
            assert shm.HEADER_BYTES <= off and off + size <= ring.size
            assert cost >= size
            for o2, l2, _, _ in live:
                assert off + size <= o2 or o2 + l2 <= off, "overlapping live regions"
            live.append((off, size, cost, data))
            assert ring.used == sum(c for _, _, c, _ in live)
            for o2, l2, _, d2 in live:
                assert bytes(ring._view[o2 : o2 + l2]) == d2
    finally:
        ring.close()


def test_ring_refuses_what_cannot_fit_and_reuses_acknowledged_space():
    ring = shm.Ring(MB + shm.HEADER_BYTES)
    try:
        assert ring.put(b"") is None
        assert ring.put(b"x" * (MB + 1)) is None
        a = ring.put(b"a" * (600 * 1024))
        assert a is not None
        assert ring.put(b"b" * (600 * 1024)) is None  # only 424 KiB left
        ring.release(a[1])
        assert ring.used == 0
        b = ring.put(b"b" * (600 * 1024))
        assert b is not None and b[0] == shm.HEADER_BYTES  # empty ring starts over
    finally:
        ring.close()
    assert not os.path.exists(ring.path)


def test_ring_file_is_private_and_carries_its_nonce():
    ring = shm.Ring(2 * MB)
    try:
        st_ = os.stat(ring.path)
        assert st_.st_mode & 0o777 == 0o600
        assert st_.st_size == 2 * MB
        with open(ring.path, "rb") as f:
            head = f.read(len(shm.MAGIC) + shm.NONCE_BYTES)
        assert head == shm.MAGIC + ring.nonce
    finally:
        ring.close()


# -- the server's side: validation -------------------------------------------------------------
def test_mapping_reads_the_ring_and_unlinks_its_name():
    ring = shm.Ring(2 * MB)
    try:
        off, _ = ring.put(b"hello world")
        m = shm.Mapping(ring.descriptor())
        assert not os.path.exists(ring.path)  # the server took the name away
        assert m.read(off, 11) == b"hello world"
        for bad in [(0, 4), (off, 2 * MB), (2 * MB + 1, 0), (-1, 3), ("1", 2), (off, -1)]:
            with pytest.raises(shm.ShmError, match="outside the ring"):
                m.read(*bad)
        m.close()
    finally:
        ring.close()


@pytest.mark.parametrize(
    "change, match",
    [
        (lambda d: d.update(x=b"\0" * shm.NONCE_BYTES), "does not hold the ring"),
        (lambda d: d.update(x=b"short"), "nonce"),
        (lambda d: d.update(z=d["z"] + 4096), "regular file of"),
        (lambda d: d.update(z=10), "out of range"),
        (lambda d: d.update(p="/etc/passwd"), "not an Ostinato ring"),
        (
            lambda d: d.update(p=shm.SHM_DIR + "/../etc/ostinato-" + "0" * 32),
            "not an Ostinato ring",
        ),
        (lambda d: d.update(p=shm.SHM_DIR + "/ostinato-" + "0" * 32), "cannot open"),
        (lambda d: d.pop("x"), "needs p"),
    ],
)
def test_mapping_refuses_bad_descriptors(change, match):
    ring = shm.Ring(2 * MB)
    try:
        desc = dict(ring.descriptor())
        change(desc)
        with pytest.raises(shm.ShmError, match=match):
            shm.Mapping(desc)
        assert os.path.exists(ring.path)  # a refused ring is left alone
    finally:
        ring.close()


def test_mapping_refuses_symlinks(tmp_path):
    ring = shm.Ring(2 * MB)
    link = os.path.join(shm.SHM_DIR, "ostinato-" + "ab" * 16)
    os.symlink(ring.path, link)
    try:
        desc = dict(ring.descriptor(), p=link)
        with pytest.raises(shm.ShmError, match="cannot open"):
            shm.Mapping(desc)
    finally:
        os.unlink(link)
        ring.close()


def test_client_options_are_validated():
    with pytest.raises(ValueError, match="shared_memory_bytes"):
        ClientOptions(shared_memory_bytes=1000)
    with pytest.raises(ValueError, match="shared_memory_bytes"):
        ClientOptions(shared_memory_bytes=True)
    with pytest.raises(ValueError, match="shared_memory"):
        ClientOptions(shared_memory="yes")
    with pytest.raises(ValueError, match="shared_memory"):
        reverb.Client("localhost:1", shared_memory="auto")


# -- writers end to end ----------------------------------------------------------------------
def _big_steps(n, seed=0):
    rng = np.random.default_rng(seed)
    return [
        {"obs": rng.integers(0, 256, (64, 64, 4), dtype=np.uint8), "t": np.int64(i)}
        for i in range(n)
    ]


def _write(client, steps, table="q"):
    with writing(client, 2) as w:
        for s in steps:
            w.append(s)
            w.create_item(table, 1.0, {"obs": w.history["obs"][-1], "t": w.history["t"][-1]})


def _drain(server, table, n):
    client = server.localhost_client()
    got = {}
    for s in client.sample(table, num_samples=n, emit_timesteps=False):
        t = int(s.data[1])
        assert t not in got, f"step {t} sampled twice from a queue"
        got[t] = np.asarray(s.data[0])
    return got


def test_large_rows_go_through_the_ring_byte_exact():
    server = reverb.Server([reverb.Table.queue("q", 1000)])
    before = _rings()
    try:
        client = grpc_client(f"localhost:{server.port}")
        steps = _big_steps(300)
        _write(client, steps)
        svc = server.service
        assert svc.ring_streams >= 1
        assert svc.ring_bytes >= 300 * 64 * 64 * 4  # every obs row went through a ring
        got = _drain(server, "q", 300)
        assert sorted(got) == list(range(300))
        for i, s in enumerate(steps):
            np.testing.assert_array_equal(got[i], s["obs"])
        assert _rings() <= before  # nothing left in /dev/shm
        client.close()
    finally:
        server.stop()


def test_a_server_that_refuses_rings_gets_the_rows_inline():
    server = reverb.Server([reverb.Table.queue("q", 1000)], shared_memory=False)
    before = _rings()
    try:
        client = grpc_client(f"localhost:{server.port}")
        steps = _big_steps(120, seed=1)
        _write(client, steps)
        assert server.service.ring_streams == 0
        got = _drain(server, "q", 120)  # every item exactly once (the queue would repeat none)
        assert sorted(got) == list(range(120))
        for i, s in enumerate(steps):
            np.testing.assert_array_equal(got[i], s["obs"])
        transport = client.transport
        assert transport.use_shm is False
        assert "does not accept" in transport.shm_refused
        _write(client, _big_steps(5, seed=2))  # later writers go inline from the start
        assert len(server.tables_by_name["q"]) == 5
        assert _rings() <= before
        client.close()
    finally:
        server.stop()


def test_shared_memory_false_and_remote_addresses_never_make_a_ring():
    server = reverb.Server([reverb.Table.queue("q", 1000)])
    try:
        client = grpc_client(f"localhost:{server.port}", shared_memory=False)
        _write(client, _big_steps(20))
        assert server.service.ring_streams == 0
        assert len(server.tables_by_name["q"]) == 20
        assert grpc_client("example.invalid:1").transport.use_shm is False
        assert grpc_client("example.invalid:1", shared_memory=True).transport.use_shm is True
        client.close()
    finally:
        server.stop()


def test_mixed_small_and_large_columns_and_trajectories():
    """Small columns stay inline, large ones use the ring, in the same requests; items that span
    several steps (and rows sent by earlier requests) read back exactly."""
    server = reverb.Server([reverb.Table.queue("q", 1000)])
    try:
        client = grpc_client(f"localhost:{server.port}")
        steps = _big_steps(60, seed=3)
        with writing(client, 5) as w:
            for i, s in enumerate(steps):
                w.append(s)
                if i >= 4:
                    w.create_item(
                        "q", 1.0, {"obs": w.history["obs"][-5:], "t": w.history["t"][-5:]}
                    )
        assert server.service.ring_bytes > 0
        c2 = server.localhost_client()
        for s in c2.sample("q", num_samples=56, emit_timesteps=False):
            obs, t = np.asarray(s.data[0]), np.asarray(s.data[1])
            assert list(t) == list(range(t[0], t[0] + 5))
            for j, tt in enumerate(t):
                np.testing.assert_array_equal(obs[j], steps[tt]["obs"])
        client.close()
    finally:
        server.stop()


# -- hostile requests ------------------------------------------------------------------------
def _insert_raw(port, requests):
    with grpc.insecure_channel(f"localhost:{port}") as ch:
        call = ch.stream_stream(SERVICE + "Insert")
        return list(call(iter(requests), timeout=10))


def _request(seg_extra, **body):
    seg = {"k": 7, "e": 0, "s": 0, "n": 1, "d": "|u1", "h": [4], "c": codec.RAW, **seg_extra}
    msg = {"seg": [seg], "t": ["q"], "i": [[0, 1, 1.0, [[7, 0, 1]], [True]]], "keep": [], **body}
    return codec.pack_framed(msg)


def test_hostile_ring_requests_get_clear_errors_and_the_server_keeps_serving():
    server = reverb.Server([reverb.Table.queue("q", 10)])
    ring = shm.Ring(2 * MB)
    try:
        off, _ = ring.put(b"abcd")
        # A reference without a ring.
        with pytest.raises(grpc.RpcError) as e:
            _insert_raw(server.port, [_request({"m": [off, 4]})])
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "has not described" in e.value.details()
        # A ring whose nonce the client does not know: refused, named as such.
        bad = dict(ring.descriptor(), x=b"\1" * shm.NONCE_BYTES)
        with pytest.raises(grpc.RpcError) as e:
            _insert_raw(server.port, [_request({"m": [off, 4]}, shm=bad)])
        assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "shared-memory ring refused" in e.value.details()
        # A reference outside the ring.
        with pytest.raises(grpc.RpcError) as e:
            _insert_raw(server.port, [_request({"m": [2 * MB - 2, 4]}, shm=ring.descriptor())])
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "outside the ring" in e.value.details()
        assert len(server.tables_by_name["q"]) == 0
        # The server still serves, rings included (a fresh ring: the last one was unlinked).
        ring2 = shm.Ring(2 * MB)
        off2, _ = ring2.put(b"wxyz")
        acks = _insert_raw(server.port, [_request({"m": [off2, 4]}, shm=ring2.descriptor())])
        assert codec.unpack(acks[0]) == {"n": 1}
        ring2.close()
        s = next(server.localhost_client().sample("q", emit_timesteps=False))
        assert bytes(np.asarray(s.data[0])) == b"wxyz"
    finally:
        ring.close()
        server.stop()


def test_a_client_killed_mid_stream_leaves_no_ring_behind(tmp_path):
    server = reverb.Server([reverb.Table.queue("q", 1000)])
    before = _rings()
    code = textwrap.dedent(f"""
        import numpy as np, ostinato as reverb, sys
        c = reverb.Client("localhost:{server.port}", in_process=False)
        w = c.trajectory_writer(1)
        x = np.zeros((128, 128, 4), np.uint8)
        i = 0
        while True:
            w.append({{"x": x}})
            w.create_item("q", 1.0, {{"x": w.history["x"][-1]}})
            i += 1
            if i == 200:
                w.flush()
                print("writing", flush=True)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "writing"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        assert server.service.ring_streams >= 1
        assert _rings() <= before  # the server unlinked the name when it mapped the ring
        n = len(server.tables_by_name["q"])
        assert n >= 200
        server.localhost_client().insert(np.zeros(3), {"q": 1.0})  # still serving
        assert len(server.tables_by_name["q"]) == n + 1
    finally:
        proc.kill()
        server.stop()
