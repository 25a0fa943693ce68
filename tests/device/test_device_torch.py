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


def _sync_checked(fn):
    """Runs ``fn`` with every host synchronisation raising (inputs built before)."""
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        return fn()
    finally:
        torch.cuda.set_sync_debug_mode("default")


@pytest.mark.cuda
@pytest.mark.parametrize("kernels", ["triton", "torch"])
def test_cuda_buffers_sample_on_device_without_sync(kernels):
    buf = PriorityReplayBuffer(
        0.6,
        1000,
        64,
        [(4,), ()],
        ["float32", "int64"],
        device="cuda",
        seed=0,
        validate=False,
        kernels=kernels,
    )
    buf.insert(torch.randn(500, 4), torch.arange(500))
    # Every input is built before the checked block: building a CUDA tensor from host
    # values is itself a copy that waits.
    obs1, id1 = torch.randn(4, device="cuda"), torch.tensor(7, device="cuda")
    obs8, id8 = torch.randn(8, 4, device="cuda"), torch.arange(8, device="cuda")
    prios = torch.rand(64, device="cuda")
    p8, p0 = torch.rand(8, device="cuda"), torch.tensor(2.0, device="cuda")

    def step():
        indices, weights, obs, ids = buf.sample(0.4)
        buf.update_priorities(indices, prios)
        buf.insert(obs1, id1)  # 0-d tensor column
        buf.insert(obs1, 9)  # Python scalar column
        buf.insert(obs1, id1, priority=3.0)  # Python scalar priority
        buf.insert(obs8, id8, priority=p8)  # a priority per row
        buf.insert(obs8, id8, priority=p0)  # 0-d tensor priority
        return buf.sample(0.4)

    indices, weights, obs, ids = _sync_checked(step)
    assert obs.device.type == "cuda" and weights.device.type == "cuda"
    first = indices < 500  # the rows whose id column holds their row id
    assert torch.equal(indices[first], ids[first])
    assert buf.get_item(-18)[1].item() == 9


@pytest.mark.cuda
def test_cuda_uniform_buffer_without_sync():
    buf = UniformReplayBuffer(32, 100, [(4,), ()], ["float32", "int64"], device="cuda", seed=0)
    buf.insert([torch.randn(50, 4), torch.arange(50)])
    obs, one = torch.randn(4, device="cuda"), torch.tensor(3, device="cuda")

    def step():
        buf.insert([obs, one])
        buf.insert([obs, 5])
        return buf.sample()

    out = _sync_checked(step)
    assert out[0].shape == (32, 4)


@pytest.mark.cuda
def test_cuda_graph_replays_a_whole_prioritized_step():
    """sample + update captured once, replayed while inserts go on outside the graph: ids
    still match the stored rows, new rows are drawn, updates land."""
    buf = PriorityReplayBuffer(
        0.6, 4096, 64, [(4,), ()], ["float32", "int64"], device="cuda", seed=0, validate=False
    )
    assert buf.sampler.kernels == "triton"
    buf.insert(torch.randn(1000, 4, device="cuda"), torch.arange(1000, device="cuda"))
    prios = torch.full((64,), 0.5, device="cuda")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm-up (compiles the kernels) off the capture
        for _ in range(3):
            out = buf.sample()
            buf.update_priorities(out[0], prios)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    graph.register_generator_state(buf.sampler.generator)
    with torch.cuda.graph(graph):
        out = buf.sample()
        buf.update_priorities(out[0], prios)
    seen, draws = set(), []
    for step in range(40):
        first = 1000 + 10 * step
        buf.insert(
            torch.randn(10, 4, device="cuda"), torch.arange(first, first + 10, device="cuda")
        )
        graph.replay()
        indices, weights, obs, ids = out
        assert torch.equal(indices, ids)
        seen |= set(ids.tolist())
        draws.append(ids.clone())
    assert max(seen) >= 1200  # rows inserted after the capture are drawn
    assert not all(torch.equal(draws[0], d) for d in draws[1:])  # fresh random numbers
    # Rows the graph updated carry priority 0.5; new rows the running maximum (1).
    leaves = buf.sampler.leaves[: buf.capacity]
    assert torch.isclose(
        leaves[ids[0] % buf.capacity], torch.tensor(0.5**0.6, device="cuda", dtype=leaves.dtype)
    )


@pytest.mark.cuda
def test_cuda_triton_and_torch_kernels_agree_in_distribution():
    from _device_helpers import ALPHA, chi2_pvalue

    p = np.array([0.5, 1.0, 2.0, 4.0, 0.0, 3.0], np.float32)
    for kernels in ("triton", "torch"):
        buf = PriorityReplayBuffer(
            0.8, 8, 256, [()], ["int64"], device="cuda", seed=1, kernels=kernels
        )
        buf.insert(torch.arange(6), priority=torch.from_numpy(p))
        counts = np.zeros(6)
        for _ in range(100):
            counts += np.bincount(buf.sample()[2].cpu().numpy(), minlength=6)
        assert counts[4] == 0
        assert chi2_pvalue(counts, p**0.8) > ALPHA


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
