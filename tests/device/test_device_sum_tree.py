"""The device sum/min trees against a numpy reference (torch: both kernels; jax)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

SHAPES = [(1, 64), (2, 2), (5, 4), (300, 4), (9000, 8), (20000, 64), (70000, 2)]


class TorchTree:
    def __init__(self, capacity, fanout, kernels):
        torch = pytest.importorskip("torch")
        from ostinato.device.torch.sum_tree import SumMinTree

        self.tree = SumMinTree(capacity, torch.device("cpu"), fanout=fanout, kernels=kernels)
        self.ops = self.tree.ops

    def set(self, index, value, keep=None):
        ops = self.ops
        keep = None if keep is None else ops.asarray(keep)
        self.tree.set(ops.asarray(index), ops.asarray(value), keep)

    def set_range(self, start, value):
        self.tree.set_range(start, self.ops.asarray(value))

    def find(self, mass):
        return np.asarray(self.tree.find(self.ops.asarray(mass)))

    def total(self):
        return float(self.tree.total())

    def min(self):
        return float(self.tree.min())


class JaxTree:
    def __init__(self, capacity, fanout):
        pytest.importorskip("jax")
        import jax.numpy as jnp

        from ostinato.device.jax import sum_tree

        self.st, self.jnp = sum_tree, jnp
        self.tree = sum_tree.init(capacity, "float32", fanout)

    def set(self, index, value, keep=None):
        jnp = self.jnp
        keep = None if keep is None else jnp.asarray(keep)
        self.tree = self.st.set_leaves(
            self.tree, jnp.asarray(index, jnp.int32), jnp.asarray(value, jnp.float32), keep
        )

    def set_range(self, start, value):
        self.set(np.arange(start, start + len(value)), value)

    def find(self, mass):
        return np.asarray(self.st.find(self.tree, self.jnp.asarray(mass, self.jnp.float32)))

    def total(self):
        return float(self.st.total(self.tree))

    def min(self):
        return float(self.st.minimum(self.tree))


TREES = [
    pytest.param(lambda c, f: TorchTree(c, f, "numpy"), 1e-12, id="torch-numpy"),
    pytest.param(lambda c, f: TorchTree(c, f, "torch"), 1e-12, id="torch-torch"),
    pytest.param(JaxTree, 1e-5, id="jax-f32"),
]


def check(tree, values, rng, rtol):
    assert tree.total() == pytest.approx(values.sum(), rel=rtol, abs=1e-30)
    positive = values[values > 0]
    assert tree.min() == pytest.approx(positive.min() if positive.size else np.inf, rel=rtol)
    if values.sum() <= 0:
        return
    cs = np.cumsum(values)
    mass = rng.random(300) * cs[-1]
    mass[:2] = [cs[-1], cs[-1] * 1e-9]
    got = tree.find(mass)
    assert np.all(values[got] > 0), "a zero leaf was found"
    if rtol < 1e-9:  # float64: exactly the reference descent
        np.testing.assert_array_equal(got, np.searchsorted(cs, mass))
    else:  # float32: within rounding of the boundaries
        lo = np.searchsorted(cs, mass * (1 - 1e-4))
        hi = np.searchsorted(cs, mass * (1 + 1e-4))
        assert np.all((got >= lo) & (got <= np.minimum(hi, len(values) - 1)))


@pytest.mark.parametrize(("make", "rtol"), TREES)
@pytest.mark.parametrize(("capacity", "fanout"), SHAPES)
def test_tree_matches_reference(make, rtol, capacity, fanout):
    if rtol > 1e-9 and fanout == 2 and capacity > 1000:
        pytest.skip("deep tree: slow to run eagerly in jax; covered by the torch trees")
    rng = np.random.default_rng(capacity)
    tree = make(capacity, fanout)
    values = np.zeros(capacity)
    half = capacity // 2
    first = rng.random(half) * (rng.random(half) > 0.3)
    tree.set_range(0, first)
    values[:half] = first
    check(tree, values, rng, rtol)
    for _ in range(3):
        n = min(64, capacity)
        index = rng.integers(0, capacity, n)
        value = rng.random(n) * (rng.random(n) > 0.2)
        keep = rng.random(n) > 0.1
        tree.set(index, value, keep)
        for i, v, k in zip(index, value, keep):
            if k:
                values[i] = v
        check(tree, values, rng, rtol)


@pytest.mark.parametrize(("make", "rtol"), TREES)
@settings(max_examples=20, deadline=None)
@given(
    data=st.data(),
    capacity=st.sampled_from([1, 3, 17, 100]),
    fanout=st.sampled_from([3, 8]),
)
def test_tree_random_updates(make, rtol, data, capacity, fanout):
    tree = make(capacity, fanout)
    values = np.zeros(capacity)
    for _ in range(data.draw(st.integers(1, 4))):
        # A few batch sizes, not every one: jax compiles the update once per shape.
        n = data.draw(st.sampled_from([1, 5, 12]))
        index = np.array(data.draw(st.lists(st.integers(0, capacity - 1), min_size=n, max_size=n)))
        value = np.array(
            data.draw(st.lists(st.sampled_from([0.0, 0.5, 1.0, 3.0, 1e-3]), min_size=n, max_size=n))
        )
        tree.set(index, value, np.ones(n, bool))
        for i, v in zip(index, value):
            values[i] = v  # the last duplicate wins
        check(tree, values, np.random.default_rng(0), rtol)


def test_tree_shape_is_shallow():
    pytest.importorskip("torch")
    import torch

    from ostinato.device.torch.sum_tree import SumMinTree

    assert SumMinTree(500_000, torch.device("cpu")).sizes == [500_032, 7813]
    assert SumMinTree(8192, torch.device("cpu")).depth == 0
    with pytest.raises(ValueError, match=r"fanout \(1\) must be at least 2"):
        SumMinTree(10, torch.device("cpu"), fanout=1)
    with pytest.raises(ValueError, match=r"kernels \('cuda'\) must be 'numpy' or 'torch'"):
        SumMinTree(10, torch.device("cpu"), kernels="cuda")
