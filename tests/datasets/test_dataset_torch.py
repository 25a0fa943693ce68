"""The PyTorch IterableDataset adapter, with a real (CPU) PyTorch."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from _dataset_helpers import TABLES_CODE, table_size, write_queue, write_trajectories

torch = pytest.importorskip("torch")

import ostinato as reverb  # noqa: E402
import ostinato.datasets as datasets  # noqa: E402


def test_batches_are_tensors_shaped_like_the_signature(serve):
    client = serve(TABLES_CODE)
    write_trajectories(client, "uniform", 30)
    ds = datasets.TorchDataset(client, "uniform", batch_size=8, max_samples=16)
    assert isinstance(ds, torch.utils.data.IterableDataset)
    batches = list(ds)
    assert len(batches) == 2
    b = batches[0]
    assert b.data["obs"].shape == (8, 3, 4) and b.data["obs"].dtype == torch.float32
    assert b.data["act"].shape == (8, 3) and b.data["act"].dtype == torch.int32
    assert b.info.key.dtype == torch.uint64 and b.info.probability.dtype == torch.float64
    assert b.info.times_sampled.dtype == torch.int32
    torch.testing.assert_close(b.data["obs"][:, :, 0], b.data["act"].float())


def test_dataloader_in_main_process_and_device_cpu(serve):
    client = serve(TABLES_CODE)
    write_queue(client, "queue", range(20))
    ds = datasets.TorchDataset(client, "queue", batch_size=6, max_samples=20, device="cpu")
    loader = torch.utils.data.DataLoader(ds, batch_size=None)
    got = torch.cat([b.data["x"] for b in loader])
    assert got.tolist() == list(range(20))  # queue order kept, last batch partial


def test_dataloader_with_worker_processes(make_server):
    server = make_server(
        reverb.Table.queue("q", 100, signature={"x": reverb.TensorSpec([], np.int64)})
    )
    address = f"localhost:{server.port}"
    write_queue(reverb.Client(address), "q", range(30))
    ds = datasets.TorchDataset(address, "q", batch_size=4, max_samples=25)
    loader = torch.utils.data.DataLoader(
        ds, batch_size=None, num_workers=2, multiprocessing_context="spawn", timeout=60
    )
    got = sorted(torch.cat([b.data["x"] for b in loader]).tolist())
    # max_samples is split between the workers: 25 items in all, none beyond.
    assert len(got) == 25 and len(set(got)) == 25
    assert table_size(reverb.Client(address), "q") == 5


_FORK_SCRIPT = """
import numpy as np, torch, ostinato as reverb, ostinato.datasets as datasets
server = reverb.Server([reverb.Table.queue("q", 100)])
client = server.localhost_client()
with client.trajectory_writer(num_keep_alive_refs=1) as w:
    for v in range(30):
        w.append({"x": np.int64(v)})
        w.create_item("q", 1.0, {"x": w.history["x"][-1]})
ds = datasets.TorchDataset(f"localhost:{server.port}", "q", batch_size=4, max_samples=25)
loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2,
                                     multiprocessing_context="fork", timeout=60)
got = sorted(torch.cat([b.data[0] for b in loader]).tolist())
assert got == list(range(25)) or len(set(got)) == 25, got
assert client.server_info()["q"].current_size == 5
server.stop()
print("OK")
"""


def test_dataloader_with_forked_workers():
    # Forked workers (Linux's default) get a copy of the parent's in-process server, which
    # they must not use: they reach the real one over gRPC. Run in a fresh interpreter, as
    # forking a process that has loaded JAX or TensorFlow threads may deadlock.
    out = subprocess.run(
        [sys.executable, "-c", _FORK_SCRIPT], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0 and "OK" in out.stdout, out.stdout + out.stderr[-3000:]


def test_pin_memory_and_cuda_need_cuda(make_server):
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    server = make_server(reverb.Table.queue("q", 10))
    with pytest.raises(ValueError, match="pin_memory=True needs CUDA"):
        datasets.TorchDataset(f"localhost:{server.port}", "q", 4, pin_memory=True)
    with pytest.raises(ValueError, match=r"device \('cuda'\) needs CUDA"):
        datasets.TorchDataset(f"localhost:{server.port}", "q", 4, device="cuda")


def test_bad_arguments_are_quoted(make_server):
    server = make_server(reverb.Table.queue("q", 10))
    with pytest.raises(ValueError, match=r"batch_size \(0\)"):
        datasets.TorchDataset(f"localhost:{server.port}", "q", 0)
    with pytest.raises(ValueError, match=r"max_samples \(0\)"):
        datasets.TorchDataset(f"localhost:{server.port}", "q", 4, max_samples=0)


def test_timeout_ends_the_stream(serve):
    client = serve(TABLES_CODE)
    write_queue(client, "queue", range(5))
    ds = datasets.TorchDataset(client, "queue", batch_size=4, rate_limiter_timeout_ms=200)
    assert [len(b.data["x"]) for b in ds] == [4, 1]
