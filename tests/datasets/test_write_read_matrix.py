"""Every writer path x every reader path gives the same data.

Writers: an embedded client, a gRPC client sending rows inline, and a gRPC client passing rows
through the same-host shared-memory ring. Readers: ``Client.sample``, ``Client.sample_batch``,
the numpy iterator, tf.data, PyTorch and JAX -- each both in the server's own process (the
usual Reverb layout: learner beside the server, actors remote) and over gRPC.

Items are windows of 3 steps over a stream of 16 KiB rows (so windows span chunks and rows are
large enough for the ring) plus a squeezed scalar column and a bytes column: step ``t`` has
``obs = t`` everywhere, ``step = t`` and ``tag = b"step-<t>"``.
"""

from __future__ import annotations

import contextlib
import itertools

import numpy as np
import pytest

import ostinato as reverb
import ostinato.datasets as datasets

OBS = 4096  # float32 values per row: 16 KiB, the shared-memory ring's threshold
N_STEPS = 24
SIGNATURE = {
    "obs": reverb.TensorSpec([3, OBS], np.float32),
    "step": reverb.TensorSpec([], np.int64),
    "tag": reverb.TensorSpec([], object),
}
WRITERS = ["embedded", "grpc", "shm"]
READERS = ["sample", "sample_batch", "numpy", "tf", "torch", "jax"]


def _table() -> reverb.Table:
    return reverb.Table(
        "t",
        sampler=reverb.selectors.Uniform(),
        remover=reverb.selectors.Fifo(),
        max_size=1000,
        rate_limiter=reverb.rate_limiters.MinSize(1),
        signature=SIGNATURE,
    )


def _writer_client(server: reverb.Server, how: str) -> reverb.Client:
    address = f"localhost:{server.port}"
    if how == "embedded":
        return reverb.Client(address)
    return reverb.Client(
        address, in_process=False, unavailable_timeout=10, shared_memory=(how == "shm")
    )


def _write(client: reverb.Client) -> None:
    with client.trajectory_writer(num_keep_alive_refs=3) as w:
        for t in range(N_STEPS):
            w.append(
                {
                    "obs": np.full(OBS, t, np.float32),
                    "step": np.int64(t),
                    "tag": np.array(f"step-{t}".encode(), dtype=object),
                }
            )
            if t >= 2:
                w.create_item(
                    "t",
                    1.0,
                    {
                        "obs": w.history["obs"][-3:],
                        "step": w.history["step"][-1],
                        "tag": w.history["tag"][-1],
                    },
                )
        w.flush(timeout_ms=20_000)


def _as_numpy(x):
    if hasattr(x, "numpy"):
        x = x.numpy()
    return np.asarray(x)


def _check_batch(obs, step, tag) -> None:
    obs, step, tag = _as_numpy(obs), _as_numpy(step), _as_numpy(tag)
    assert obs.dtype == np.float32 and obs.shape[1:] == (3, OBS)
    assert step.shape == (len(obs),) and len(tag) == len(obs) and len(obs) > 0
    for o, s, g in zip(obs, step, tag):
        s = int(s)
        assert 2 <= s < N_STEPS
        np.testing.assert_array_equal(
            o, np.arange(s - 2, s + 1, dtype=np.float32)[:, None] * np.ones(OBS, np.float32)
        )
        g = g.item() if isinstance(g, np.ndarray) else g
        assert isinstance(g, bytes) and g == f"step-{s}".encode()


def _read(client: reverb.Client, how: str) -> None:
    if how == "sample":
        got = list(
            client.sample("t", num_samples=8, emit_timesteps=False, unpack_as_table_signature=True)
        )
        _check_batch(
            np.stack([s.data["obs"] for s in got]),
            [s.data["step"] for s in got],
            [s.data["tag"] for s in got],
        )
    elif how == "sample_batch":
        b = client.sample_batch("t", 8, timeout=20)
        _check_batch(b.data["obs"], b.data["step"], b.data["tag"])
    elif how == "numpy":
        with contextlib.closing(datasets.numpy(client, "t", batch_size=8)) as it:
            b = next(iter(it))
        _check_batch(b.data["obs"], b.data["step"], b.data["tag"])
    elif how == "tf":
        pytest.importorskip("tensorflow")
        ds = datasets.TrajectoryDataset.from_table_signature(
            client, "t", max_in_flight_samples_per_worker=8
        ).batch(8)
        b = next(iter(ds.take(1)))
        assert b.data["tag"].dtype.name == "string"
        _check_batch(b.data["obs"], b.data["step"], b.data["tag"])
    elif how == "torch":
        pytest.importorskip("torch")
        ds = datasets.TorchDataset(client, "t", batch_size=8, max_samples=8)
        batches = list(ds)
        assert batches
        b = batches[0]
        _check_batch(b.data["obs"], b.data["step"], b.data["tag"])
    elif how == "jax":
        pytest.importorskip("jax")
        it = datasets.JaxIterator(client, "t", batch_size=8, max_samples=8)
        try:
            b = next(iter(it))
        finally:
            it.close()
        _check_batch(b.data["obs"], b.data["step"], b.data["tag"])
    else:  # pragma: no cover
        raise AssertionError(how)


@pytest.fixture(scope="module")
def written():
    """One server per writer path, filled once (module scope keeps the matrix fast)."""
    servers = {}
    for how in WRITERS:
        server = reverb.Server([_table()])
        client = _writer_client(server, how)
        _write(client)
        if how == "shm":
            assert server.service.ring_streams >= 1, "rows did not go through the ring"
        client.close()
        servers[how] = server
    yield servers
    for s in servers.values():
        s.stop()


@pytest.mark.parametrize(
    "writer, reader, where", list(itertools.product(WRITERS, READERS, ["local", "grpc"]))
)
def test_every_writer_path_with_every_reader_path(written, writer, reader, where):
    server = written[writer]
    address = f"localhost:{server.port}"
    client = (
        reverb.Client(address)
        if where == "local"
        else reverb.Client(address, in_process=False, unavailable_timeout=10)
    )
    try:
        _read(client, reader)
    finally:
        client.close()
