"""torch backend specifics: devices, composable pieces, kernels, CUDA (marked)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from ostinato.device import PriorityReplayBuffer, UniformReplayBuffer  # noqa: E402
from ostinato.device.spec import make_specs  # noqa: E402
from ostinato.device.torch import (  # noqa: E402
    PrioritizedSampler,
    TensorStorage,
    UniformSampler,
    resolve_device,
)


def test_missing_cuda_raises_instead_of_falling_back():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(ValueError, match=r"device \('cuda'\) is not available"):
        UniformReplayBuffer(1, 4, [()], ["float32"], device="cuda")
    with pytest.raises(ValueError, match=r"device \('cuda:0'\) is not available"):
        PriorityReplayBuffer(0.5, 4, 1, [()], ["float32"], device="cuda:0")
    with pytest.raises(ValueError, match=r"device \('nonsense'\) is not a valid torch device"):
        resolve_device("nonsense")


def test_storage_and_samplers_compose():
    specs = make_specs([(3,), ()], ["float32", "int64"])
    storage = TensorStorage(10, specs)
    sampler = UniformSampler(seed=1)
    storage.extend([torch.ones(12, 3), torch.arange(12)])
    ids = storage.gather(sampler.slots(storage.ring, 5))[1]
    assert set(ids.tolist()) <= set(range(2, 12))
    prio = PrioritizedSampler(10, alpha=1.0, seed=2)
    prio.on_write(storage.extend([torch.ones(3), torch.tensor(12)]))
    indices, weights, slots = prio.sample(storage.ring, 4, beta=0.5)
    assert torch.equal(storage.gather(slots)[1], indices)
    prio.update(storage.ring, indices, torch.ones(4))


def test_state_dicts_round_trip_pieces():
    specs = make_specs([()], ["float32"])
    a, b = TensorStorage(4, specs), TensorStorage(4, specs)
    a.extend([torch.arange(6, dtype=torch.float32)])
    b.load_state_dict(a.state_dict())
    assert b.read(0)[0].item() == 2.0
    with pytest.raises(ValueError, match="state shape"):
        TensorStorage(5, specs).load_state_dict(a.state_dict())
    s1, s2 = UniformSampler(seed=1), UniformSampler(seed=2)
    s2.load_state_dict(s1.state_dict())
    assert torch.equal(s1.slots(a.ring, 6), s2.slots(b.ring, 6))


def test_numpy_and_torch_kernels_agree():
    outs = []
    for kernels in ("numpy", "torch"):
        buf = PriorityReplayBuffer(0.7, 300, 32, [()], ["int64"], seed=0, kernels=kernels)
        buf.insert(torch.arange(300), priority=torch.linspace(0.01, 5, 300))
        tree = buf.sampler.tree
        mass = tree.ops.asarray(np.linspace(0.5, float(tree.total()), 50))
        outs.append(np.asarray(tree.find(mass)))
    np.testing.assert_array_equal(outs[0], outs[1])


def test_inputs_may_live_elsewhere_and_be_numpy():
    buf = UniformReplayBuffer(2, 4, [(2,)], ["float32"])
    buf.insert([np.ones((3, 2), np.float32)])
    assert buf.get_item(-1)[0].tolist() == [1.0, 1.0]
    assert buf.get_item(0)[0].data_ptr() != buf.storage.columns[0].data_ptr()  # a copy


@pytest.mark.cuda
def test_cuda_buffers_sample_on_device_without_sync():
    buf = PriorityReplayBuffer(0.6, 1000, 64, [(4,), ()], ["float32", "int64"], device="cuda",
                               seed=0, validate=False)
    buf.insert(torch.randn(500, 4), torch.arange(500))
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")  # any host synchronisation raises
    try:
        indices, weights, obs, ids = buf.sample(0.4)
        buf.update_priorities(indices, torch.rand(64, device="cuda"))
        buf.insert(torch.randn(4, device="cuda"), torch.tensor(7, device="cuda"))
        indices, weights, obs, ids = buf.sample(0.4)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert obs.device.type == "cuda" and weights.device.type == "cuda"
    assert torch.equal(indices, ids)


@pytest.mark.cuda
def test_cuda_uniform_matches_model():
    buf = UniformReplayBuffer(5, 5, [()], ["int64"], device="cuda", seed=0)
    buf.insert([torch.arange(7, device="cuda")])
    assert [buf.get_item(i)[0].item() for i in range(5)] == [2, 3, 4, 5, 6]
    assert set(buf.sample()[0].tolist()) <= {2, 3, 4, 5, 6}
    ids = buf.sample(order_preserving=True)[0].tolist()
    assert ids == sorted(ids)
    assert sorted(buf.sample(unique=True)[0].tolist()) == [2, 3, 4, 5, 6]


@pytest.mark.cuda
def test_cuda_priority_distribution():
    from _device_helpers import ALPHA, chi2_pvalue

    buf = PriorityReplayBuffer(1.0, 8, 8, [()], ["int64"], device="cuda", seed=1)
    p = torch.tensor([1.0, 2.0, 3.0, 4.0])
    buf.insert(torch.arange(4), priority=p)
    counts = np.zeros(4)
    for _ in range(300):
        counts += np.bincount(buf.sample()[2].cpu().numpy(), minlength=4)
    assert chi2_pvalue(counts, p.numpy()) > ALPHA


def test_bfloat16_columns_use_the_torch_copy_path():
    buf = UniformReplayBuffer(4, 6, [(2,), ()], ["bfloat16", "int64"], seed=0)
    buf.insert([torch.ones(8, 2, dtype=torch.bfloat16), torch.arange(8)])
    obs, ids = buf.sample()
    assert obs.dtype == torch.bfloat16 and set(ids.tolist()) <= set(range(2, 8))
    assert buf.get_item(-1)[0].tolist() == [1.0, 1.0]
