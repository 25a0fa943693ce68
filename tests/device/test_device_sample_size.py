"""sample_size larger than capacity (issue 12, item 8): sampling is with replacement.

A buffer of capacity 10 asked for 1,000 rows returns 1,000 rows drawn uniformly (or in
proportion to ``priority ** alpha``), also while it holds fewer rows than that; only
``sample(unique=True)`` (without replacement) still needs ``sample_size <= size()``.
Every backend is covered on the CPU: torch (numpy and torch tree kernels), the jax buffer
objects and the jax functional form, eager and jitted.
"""

import numpy as np
import pytest
from _device_helpers import ALPHA, ID_DTYPE, NEEDS_TRITON, as_numpy, chi2_pvalue

from ostinato.device import PriorityReplayBuffer, UniformReplayBuffer, create_buffer

BACKENDS = ["torch", "jax"]

PRIORITY_CONFIGS = [
    pytest.param("torch", {"kernels": "numpy"}, id="torch-numpy"),
    pytest.param("torch", {"kernels": "torch"}, id="torch-torch"),
    pytest.param("torch", {"kernels": "triton"}, id="torch-triton", marks=NEEDS_TRITON),
    pytest.param("jax", {}, id="jax"),
    pytest.param("jax", {"search": "flat"}, id="jax-flat"),
]

CAPACITY = 10
SAMPLE_SIZE = 1000


def rows(first, n):
    """Rows ``first .. first + n - 1``: obs = [id, -id], id = id."""
    ids = np.arange(first, first + n, dtype=ID_DTYPE.current)
    return [np.stack([ids, -ids], axis=1).astype(np.float32), ids]


def make_uniform(backend, sample_size=SAMPLE_SIZE, capacity=CAPACITY, **kwargs):
    pytest.importorskip(backend)
    ID_DTYPE.use(backend)
    return UniformReplayBuffer(
        sample_size, capacity, [(2,), ()], ID_DTYPE.types, backend=backend, **kwargs
    )


def make_priority(backend, extra, alpha, sample_size=SAMPLE_SIZE, capacity=CAPACITY, **kwargs):
    pytest.importorskip(backend)
    ID_DTYPE.use(backend)
    return PriorityReplayBuffer(
        alpha,
        capacity,
        sample_size,
        [(2,), ()],
        ID_DTYPE.types,
        backend=backend,
        **extra,
        **kwargs,
    )


def check_rows(obs, ids, stored):
    """Every sampled row is one of the stored rows, whole (obs and id from the same row)."""
    obs, ids = as_numpy(obs), as_numpy(ids)
    assert obs.shape == (SAMPLE_SIZE, 2) and ids.shape == (SAMPLE_SIZE,)
    assert set(ids.tolist()) <= set(stored)
    assert np.array_equal(obs[:, 0], ids) and np.array_equal(obs[:, 1], -ids)
    return ids


# ---------------------------------------------------------------------- uniform buffer
@pytest.mark.parametrize("backend", BACKENDS)
def test_uniform_sample_size_above_capacity_is_uniform(backend):
    buf = make_uniform(backend, seed=12)
    buf.insert(rows(0, CAPACITY))
    assert buf.full()
    counts = np.zeros(CAPACITY)
    for _ in range(4):
        obs, ids = buf.sample()
        ids = check_rows(obs, ids, range(CAPACITY))
        counts += np.bincount(ids, minlength=CAPACITY)
    assert counts.sum() == 4 * SAMPLE_SIZE
    assert chi2_pvalue(counts, np.ones(CAPACITY)) > ALPHA
    # The same test rejects a sampler that skips the newest row (MindSpore's GPU kernel)
    # or favours one row by a factor of 2.
    assert chi2_pvalue(counts, np.r_[np.ones(CAPACITY - 1), 1e-9]) < ALPHA
    assert chi2_pvalue(counts, np.r_[2.0, np.ones(CAPACITY - 1)]) < ALPHA
    ids = as_numpy(buf.sample(order_preserving=True)[1])
    assert ids.shape == (SAMPLE_SIZE,) and np.all(np.diff(ids) >= 0)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("before", [0, 12], ids=["fresh", "after-wrap-and-reset"])
def test_uniform_sample_size_above_size(backend, before):
    """3 rows held in a capacity-10 buffer, 1,000 drawn. After 12 inserts and a reset the 3
    rows sit in slots 2..4, so the logical-to-slot mapping is exercised too."""
    buf = make_uniform(backend, seed=5)
    if before:
        buf.insert(rows(100, before))
        buf.reset()
    buf.insert(rows(0, 3))
    assert buf.size() == 3
    counts = np.zeros(3)
    for _ in range(3):
        obs, ids = buf.sample()
        counts += np.bincount(check_rows(obs, ids, range(3)), minlength=3)
    assert chi2_pvalue(counts, np.ones(3)) > ALPHA
    assert chi2_pvalue(counts, [2, 1, 1]) < ALPHA


@pytest.mark.parametrize("backend", BACKENDS)
def test_unique_still_needs_enough_rows(backend):
    buf = make_uniform(backend, seed=1)
    buf.insert(rows(0, CAPACITY))
    with pytest.raises(
        ValueError,
        match=r"cannot draw 1000 distinct rows from a buffer holding 10: "
        r"sample\(unique=True\) .*sample_size \(1000\) .*size\(\) \(10\)",
    ):
        buf.sample(unique=True)
    assert buf.sample()[1].shape[0] == SAMPLE_SIZE  # with replacement it works
    small = make_uniform(backend, sample_size=3, seed=1)
    small.insert(rows(0, 3))
    ids = as_numpy(small.sample(unique=True)[1])
    assert sorted(ids.tolist()) == [0, 1, 2]


@pytest.mark.parametrize("backend", BACKENDS)
def test_invalid_sample_sizes_still_raise(backend):
    for bad in (0, -5, 2.5, True):
        with pytest.raises(ValueError, match=r"sample_size \(.*\) must be a positive integer"):
            make_uniform(backend, sample_size=bad)
        with pytest.raises(ValueError, match=r"sample_size \(.*\) must be a positive integer"):
            make_priority(backend, {}, 0.5, sample_size=bad)


# ---------------------------------------------------------------------- prioritized buffer
@pytest.mark.parametrize(("backend", "extra"), PRIORITY_CONFIGS)
def test_priority_sample_size_above_capacity(backend, extra):
    alpha, beta = 0.7, 0.5
    buf = make_priority(backend, extra, alpha, seed=21)
    priorities = np.array([0.2, 1.0, 3.0, 0.5, 6.0, 2.0, 0.05, 4.0, 1.5, 9.0], np.float32)
    buf.insert(*rows(0, CAPACITY), priority=priorities)
    leaf = priorities.astype(np.float64) ** alpha
    expected_weights = (leaf.min() / leaf) ** beta
    counts = np.zeros(CAPACITY)
    for _ in range(3):
        indices, weights, obs, ids = buf.sample(beta)
        ids = check_rows(obs, ids, range(CAPACITY))
        indices, weights = as_numpy(indices), as_numpy(weights)
        assert indices.shape == (SAMPLE_SIZE,) and weights.shape == (SAMPLE_SIZE,)
        assert weights.dtype == np.float32
        assert np.array_equal(indices, ids)  # before any wrap, row id == insertion index
        np.testing.assert_allclose(weights, expected_weights[ids], rtol=1e-5)
        counts += np.bincount(ids, minlength=CAPACITY)
    assert chi2_pvalue(counts, leaf) > ALPHA
    # Stratified draws follow the proportions closely: well within 2% of each row's share.
    np.testing.assert_allclose(counts / counts.sum(), leaf / leaf.sum(), atol=0.02)
    # The same test rejects ignoring alpha, or sampling uniformly.
    assert chi2_pvalue(counts, priorities) < ALPHA
    assert chi2_pvalue(counts, np.ones(CAPACITY)) < ALPHA


@pytest.mark.parametrize(("backend", "extra"), PRIORITY_CONFIGS)
def test_priority_update_with_duplicate_sampled_indices(backend, extra):
    """The 1,000 sampled indices repeat each row many times; the last priority given to a
    row wins, and the new distribution follows the winners."""
    alpha = 1.0
    buf = make_priority(backend, extra, alpha, seed=8)
    buf.insert(*rows(0, CAPACITY), priority=np.arange(1, CAPACITY + 1, dtype=np.float32))
    indices = as_numpy(buf.sample()[0])
    assert indices.shape == (SAMPLE_SIZE,) and len(set(indices.tolist())) < SAMPLE_SIZE
    new = np.arange(1, SAMPLE_SIZE + 1, dtype=np.float32)  # position j gets j + 1
    buf.update_priorities(indices, new)
    winners = np.zeros(CAPACITY)
    for j, i in enumerate(indices.tolist()):
        winners[i] = new[j]  # the last occurrence of each index wins
    assert np.all(winners > 0)  # every row was drawn at least once
    counts = np.zeros(CAPACITY)
    for _ in range(3):
        _, weights, obs, ids = buf.sample()
        counts += np.bincount(check_rows(obs, ids, range(CAPACITY)), minlength=CAPACITY)
        assert as_numpy(weights).shape == (SAMPLE_SIZE,)
    assert chi2_pvalue(counts, winners**alpha) > ALPHA
    firsts = np.zeros(CAPACITY)
    for j, i in reversed(list(enumerate(indices.tolist()))):
        firsts[i] = new[j]
    assert chi2_pvalue(counts, firsts**alpha) < ALPHA  # not "first wins"


@pytest.mark.parametrize(("backend", "extra"), PRIORITY_CONFIGS)
def test_priority_sample_size_above_size(backend, extra):
    alpha = 0.5
    buf = make_priority(backend, extra, alpha, seed=3)
    priorities = np.array([1.0, 4.0, 16.0], np.float32)
    buf.insert(*rows(0, 3), priority=priorities)
    counts = np.zeros(3)
    for _ in range(3):
        indices, weights, obs, ids = buf.sample(0.4)
        counts += np.bincount(check_rows(obs, ids, range(3)), minlength=3)
        assert as_numpy(weights).shape == (SAMPLE_SIZE,)
        buf.update_priorities(indices, priorities[as_numpy(ids)])  # unchanged, duplicates
    assert chi2_pvalue(counts, priorities**alpha) > ALPHA
    assert chi2_pvalue(counts, priorities) < ALPHA


# ---------------------------------------------------------------------- factory
@pytest.mark.parametrize("backend", BACKENDS)
def test_create_buffer_accepts_sample_size_above_capacity(backend):
    pytest.importorskip(backend)
    ID_DTYPE.use(backend)
    for kind, extra in (("UniformReplayBuffer", {}), ("PriorityReplayBuffer", {"alpha": 0.6})):
        buf = create_buffer(
            {
                "type": kind,
                "params": {
                    "capacity": CAPACITY,
                    "sample_size": SAMPLE_SIZE,
                    "seed": 0,
                    "backend": backend,
                    **extra,
                },
                "data_shape": [(2,), ()],
                "data_type": ID_DTYPE.types,
            }
        )
        if kind == "UniformReplayBuffer":
            buf.insert(rows(0, 4))
        else:
            buf.insert(*rows(0, 4))
        assert as_numpy(buf.sample()[-1]).shape == (SAMPLE_SIZE,)


# ---------------------------------------------------------------------- jax functional form
def _jax():
    return pytest.importorskip("jax")


def _cols(first, n):
    ids = np.arange(first, first + n, dtype=np.int32)
    return (np.stack([ids, -ids], 1).astype(np.float32), ids)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("held", [CAPACITY, 3])
def test_jax_functional_uniform_sample_size_above_capacity(jit, held):
    jax = _jax()
    from ostinato.device.jax import make_uniform_buffer

    buf = make_uniform_buffer(CAPACITY, SAMPLE_SIZE, [(2,), ()], ["float32", "int32"])
    buf = buf.jit() if jit else buf
    state = buf.add(buf.init(), _cols(0, held))
    counts = np.zeros(held)
    for i in range(3):
        obs, ids = buf.sample(state, jax.random.key(i))
        counts += np.bincount(check_rows(obs, ids, range(held)), minlength=held)
    assert chi2_pvalue(counts, np.ones(held)) > ALPHA
    assert chi2_pvalue(counts, np.r_[2.0, np.ones(held - 1)]) < ALPHA


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_jax_functional_unique_above_capacity_raises(jit):
    jax = _jax()
    from ostinato.device.jax import make_uniform_buffer

    buf = make_uniform_buffer(CAPACITY, SAMPLE_SIZE, [(2,), ()], ["float32", "int32"])
    state = buf.init()
    state = buf.add(state, _cols(0, CAPACITY))
    sample = jax.jit(buf.sample, static_argnames=("unique",)) if jit else buf.sample
    # Under jit the size is not known, so the static capacity is what is checked.
    what = r"capacity \(10\)" if jit else r"size\(\) \(10\)"
    with pytest.raises(ValueError, match=rf"sample_size \(1000\) must not exceed {what}"):
        sample(state, jax.random.key(0), unique=True)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_jax_functional_priority_sample_size_above_capacity(jit):
    jax = _jax()
    from ostinato.device.jax import make_priority_buffer

    alpha = 0.6
    buf = make_priority_buffer(alpha, CAPACITY, SAMPLE_SIZE, [(2,), ()], ["float32", "int32"])
    buf = buf.jit() if jit else buf
    priorities = np.arange(1, CAPACITY + 1, dtype=np.float32)
    state = buf.add(buf.init(), _cols(0, CAPACITY), priorities)
    counts = np.zeros(CAPACITY)
    for i in range(3):
        indices, weights, obs, ids = buf.sample(state, jax.random.key(i), 0.4)
        counts += np.bincount(check_rows(obs, ids, range(CAPACITY)), minlength=CAPACITY)
        assert np.asarray(weights).shape == (SAMPLE_SIZE,)
        assert np.array_equal(np.asarray(indices), np.asarray(ids))
    assert chi2_pvalue(counts, priorities**alpha) > ALPHA
    assert chi2_pvalue(counts, priorities) < ALPHA
    # Update with the 1,000 (repeating) indices: the last priority of each row wins.
    new = np.arange(1, SAMPLE_SIZE + 1, dtype=np.float32)
    state = buf.update_priorities(state, indices, new)
    assert float(state.max_priority) == float(SAMPLE_SIZE)
    winners = np.zeros(CAPACITY)
    for j, i in enumerate(np.asarray(indices).tolist()):
        winners[i] = new[j]
    leaves = np.asarray(state.tree.leaves)[:CAPACITY]
    np.testing.assert_allclose(leaves, winners**alpha, rtol=1e-5)
