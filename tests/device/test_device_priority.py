"""PriorityReplayBuffer on every installed backend (CPU): distribution, weights, updates."""

import math

import numpy as np
import pytest
from _device_helpers import ALPHA, ID_DTYPE, NEEDS_TRITON, as_numpy, chi2_pvalue
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ostinato.device import PriorityReplayBuffer

# The torch backend runs its trees with numpy kernels on the CPU and torch kernels on
# accelerators; both are tested here on the CPU.
CONFIGS = [
    pytest.param("torch", {"kernels": "numpy"}, id="torch-numpy"),
    pytest.param("torch", {"kernels": "torch"}, id="torch-torch"),
    pytest.param("torch", {"kernels": "triton"}, id="torch-triton", marks=NEEDS_TRITON),
    pytest.param("jax", {}, id="jax"),
    pytest.param("jax", {"search": "flat"}, id="jax-flat"),
]


def make(backend, extra, capacity=8, sample_size=4, alpha=0.6, **kwargs):
    pytest.importorskip(backend)
    ID_DTYPE.use(backend)
    return PriorityReplayBuffer(
        alpha,
        capacity,
        sample_size,
        [(2,), ()],
        ID_DTYPE.types,
        names=["obs", "id"],
        backend=backend,
        **extra,
        **kwargs,
    )


def rows(first, n):
    ids = np.arange(first, first + n, dtype=ID_DTYPE.current)
    return np.stack([ids, -ids], axis=1).astype(np.float32), ids


def draw_counts(buf, n_ids, draws, beta=0.4):
    counts = np.zeros(n_ids)
    if getattr(getattr(buf, "sampler", None), "kernels", None) == "triton":
        # Triton's interpreter costs ~20 ms a launch: the same draws in one call of the
        # sampler (the same kernels; strata over all of them) instead of ``draws`` calls.
        _, _, slots = buf.sampler.sample(buf.storage.ring, buf.sample_size * draws, beta)
        return np.bincount(as_numpy(buf.storage.gather(slots)[-1]), minlength=n_ids)
    for _ in range(draws):
        _, _, _, ids = buf.sample(beta)
        counts += np.bincount(as_numpy(ids), minlength=n_ids)
    return counts


@pytest.mark.parametrize(("backend", "extra"), CONFIGS)
def test_sampling_is_proportional_to_priority_pow_alpha(backend, extra):
    alpha = 0.7
    buf = make(backend, extra, capacity=16, sample_size=16, alpha=alpha, seed=11)
    priorities = np.array([0.1, 0.5, 1, 2, 4, 8, 0.05, 3, 1.5, 6, 0.3, 2.5], np.float32)
    buf.insert(*rows(0, 12), priority=priorities)
    counts = draw_counts(buf, 12, 600)
    assert chi2_pvalue(counts, priorities**alpha) > ALPHA
    # The same test rejects the plausible mistakes: ignoring alpha, or sampling uniformly.
    assert chi2_pvalue(counts, priorities) < ALPHA
    assert chi2_pvalue(counts, np.ones(12)) < ALPHA


@pytest.mark.parametrize(("backend", "extra"), CONFIGS)
def test_zero_priority_rows_are_never_drawn(backend, extra):
    buf = make(backend, extra, capacity=8, sample_size=8, alpha=1.0, seed=3)
    buf.insert(*rows(0, 8), priority=np.array([0, 1, 0, 0, 2, 0, 0, 1], np.float32))
    counts = draw_counts(buf, 8, 300)
    assert counts[[0, 2, 3, 5, 6]].sum() == 0
    assert chi2_pvalue(counts[[1, 4, 7]], [1, 2, 1]) > ALPHA


@pytest.mark.parametrize(("backend", "extra"), CONFIGS)
def test_all_zero_priorities_sample_uniformly_with_unit_weights(backend, extra):
    buf = make(backend, extra, capacity=8, sample_size=8, alpha=0.5, seed=4)
    buf.insert(*rows(0, 5), priority=0.0)
    counts = np.zeros(5)
    for _ in range(200):
        _, weights, _, ids = buf.sample(0.5)
        assert np.allclose(as_numpy(weights), 1.0)
        counts += np.bincount(as_numpy(ids), minlength=5)
    assert chi2_pvalue(counts, np.ones(5)) > ALPHA


@pytest.mark.parametrize(("backend", "extra"), CONFIGS)
def test_weights_follow_the_formula(backend, extra):
    alpha, beta = 0.6, 0.7
    buf = make(backend, extra, capacity=8, sample_size=8, alpha=alpha, seed=5)
    priorities = np.array([1.0, 3.0, 0.5, 2.0, 8.0, 0.25], np.float32)
    buf.insert(*rows(0, 6), priority=priorities)
    p = priorities.astype(np.float64) ** alpha
    prob = p / p.sum()
    expected = (len(p) * prob) ** -beta
    expected /= expected.max()  # == (p_i / p_min) ** -beta
    for _ in range(5):
        indices, weights, obs, ids = buf.sample(beta)
        indices, weights, ids = as_numpy(indices), as_numpy(weights), as_numpy(ids)
        assert weights.dtype == np.float32
        assert indices.dtype == (np.int32 if backend == "jax" else np.int64)
        assert np.array_equal(indices, ids)  # before any wrap, row id == insertion index
        np.testing.assert_allclose(weights, expected[ids], rtol=1e-5)
        assert np.all(np.diff(ids) >= 0)  # stratified: ordered by cumulative position
        assert as_numpy(obs)[:, 0].tolist() == ids.tolist()


@pytest.mark.parametrize(("backend", "extra"), CONFIGS)
def test_default_beta_comes_from_the_constructor(backend, extra):
    buf = make(backend, extra, beta=0.0, seed=1)
    buf.insert(*rows(0, 4), priority=np.array([1, 2, 3, 4], np.float32))
    assert np.allclose(as_numpy(buf.sample()[1]), 1.0)


@pytest.mark.parametrize(("backend", "extra"), CONFIGS)
def test_update_changes_the_distribution(backend, extra):
    buf = make(backend, extra, capacity=4, sample_size=4, alpha=1.0, seed=2)
    buf.insert(*rows(0, 4))
    indices = np.array([0, 1, 2, 3])
    buf.update_priorities(indices, np.array([1, 1, 1, 9], np.float32))
    counts = draw_counts(buf, 4, 300)
    assert chi2_pvalue(counts, [1, 1, 1, 9]) > ALPHA


@pytest.mark.parametrize(("backend", "extra"), CONFIGS)
def test_stale_indices_are_ignored(backend, extra):
    buf = make(backend, extra, capacity=2, sample_size=2, alpha=1.0, seed=6)
    buf.insert(*rows(0, 2))  # ids 0, 1
    stale, _, _, _ = buf.sample()
    buf.insert(*rows(2, 1))  # id 2 overwrites id 0's slot
    buf.update_priorities(np.array([0, 0]), np.array([1000.0, 1000.0], np.float32))
    counts = draw_counts(buf, 3, 400)
    assert counts[0] == 0
    assert chi2_pvalue(counts[1:], [1, 1]) > ALPHA  # slot 0 did not get 1000
    # ...and the stale priority did not raise the running maximum either:
    buf.insert(*rows(3, 1))  # overwrites id 1 with max priority, still 1
    counts = draw_counts(buf, 4, 400)
    assert chi2_pvalue(counts[2:], [1, 1]) > ALPHA
    # ids from before a reset are stale too
    buf.reset()
    buf.insert(*rows(10, 2))
    buf.update_priorities(as_numpy(stale), np.array([50.0, 50.0], np.float32))
    counts = draw_counts(buf, 12, 400)
    assert chi2_pvalue(counts[10:], [1, 1]) > ALPHA


@pytest.mark.parametrize(("backend", "extra"), CONFIGS)
def test_duplicate_indices_last_priority_wins(backend, extra):
    buf = make(backend, extra, capacity=4, sample_size=4, alpha=1.0, seed=8)
    buf.insert(*rows(0, 4))
    buf.update_priorities(np.array([1, 2, 1, 1]), np.array([50.0, 2.0, 0.5, 3.0], np.float32))
    counts = draw_counts(buf, 4, 300)
    assert chi2_pvalue(counts, [1, 3, 2, 1]) > ALPHA


@pytest.mark.parametrize(("backend", "extra"), CONFIGS)
def test_new_rows_get_the_running_max(backend, extra):
    buf = make(backend, extra, capacity=4, sample_size=4, alpha=0.5, seed=9)
    buf.insert(*rows(0, 2))
    buf.update_priorities(np.array([0, 1]), np.array([16.0, 1.0], np.float32))
    buf.insert(*rows(2, 1))  # gets 16 ** 0.5
    buf.insert(*rows(3, 1), priority=64.0)  # explicit, and raises the max to 64
    buf.insert(*rows(4, 1))  # 64 ** 0.5, overwrites id 0
    counts = draw_counts(buf, 5, 400)
    assert chi2_pvalue(counts[1:], [1, 4, 8, 8]) > ALPHA


@pytest.mark.parametrize(("backend", "extra"), CONFIGS)
@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf")])
def test_bad_priorities_are_rejected(backend, extra, bad):
    buf = make(backend, extra)
    buf.insert(*rows(0, 4))
    with pytest.raises(ValueError, match=rf"priorities must be finite and >= 0; got {bad} at "):
        buf.update_priorities(np.array([0, 1]), np.array([1.0, bad], np.float32))
    with pytest.raises(ValueError, match="priority must be finite"):
        buf.insert(*rows(4, 1), priority=bad)
    assert buf.size() == 4  # the rejected insert wrote nothing
    with pytest.raises(ValueError, match=r"indices \(2\) and priorities \(1\) differ"):
        buf.update_priorities(np.array([0, 1]), np.array([1.0], np.float32))


@pytest.mark.parametrize(("backend", "extra"), CONFIGS)
def test_validate_false_skips_bad_updates_without_raising(backend, extra):
    buf = make(backend, extra, capacity=2, sample_size=2, alpha=1.0, validate=False, seed=3)
    buf.insert(*rows(0, 2))
    buf.update_priorities(np.array([0, 1]), np.array([float("nan"), 3.0], np.float32))
    counts = draw_counts(buf, 2, 300)
    assert chi2_pvalue(counts, [1, 3]) > ALPHA


@pytest.mark.parametrize(("backend", "extra"), CONFIGS)
def test_size_full_get_item_reset(backend, extra):
    buf = make(backend, extra, capacity=3, sample_size=2)
    assert buf.size() == 0 and not buf.full()
    with pytest.raises(IndexError, match="empty"):
        buf.sample()
    buf.insert(*rows(0, 5))
    assert buf.size() == 3 and buf.full()
    assert [int(as_numpy(buf.get_item(i)[1])) for i in (0, 1, 2, -1)] == [2, 3, 4, 4]
    with pytest.raises(IndexError):
        buf.get_item(3)
    assert buf.reset() is True
    assert buf.size() == 0
    buf.insert([np.zeros(2, np.float32), ID_DTYPE.current(7)])  # a single list is accepted too
    assert int(as_numpy(buf.get_item(0)[1])) == 7


@pytest.mark.parametrize(("backend", "extra"), CONFIGS)
def test_bad_inserts_name_the_column(backend, extra):
    buf = make(backend, extra)
    with pytest.raises(TypeError, match=r"column 1 \('id'\): dtype float32 does not match"):
        buf.insert(np.zeros(2, np.float32), np.float32(1))
    with pytest.raises(ValueError, match=r"column 0 \('obs'\): shape \(2, 3\)"):
        buf.insert(np.zeros((2, 3), np.float32), np.arange(2, dtype=ID_DTYPE.current))


@pytest.mark.parametrize(("backend", "extra"), CONFIGS)
@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(alpha=1.5), r"alpha \(1.5\) must be a number in \[0, 1\]"),
        (dict(alpha=-0.1), r"alpha \(-0.1\) must be a number in \[0, 1\]"),
        (dict(beta=-1.0), r"beta \(-1.0\) must be a finite number >= 0"),
        (dict(capacity=0), r"capacity \(0\) must be a positive integer"),
        (dict(seed0=-3), r"seed0 \(-3\) must be None or a non-negative integer"),
    ],
)
def test_constructor_quotes_bad_values(backend, extra, kwargs, match):
    with pytest.raises(ValueError, match=match):
        make(backend, extra, **kwargs)


@pytest.mark.parametrize(("backend", "extra"), CONFIGS)
def test_sample_beta_is_checked(backend, extra):
    buf = make(backend, extra)
    buf.insert(*rows(0, 2))
    with pytest.raises(ValueError, match=r"beta \(-0.5\)"):
        buf.sample(-0.5)


@pytest.mark.parametrize(("backend", "extra"), CONFIGS)
def test_mindspore_seed_arguments(backend, extra):
    a = make(backend, extra, capacity=64, sample_size=8, seed1=5)
    b = make(backend, extra, capacity=64, sample_size=8, seed0=1, seed1=5)
    for buf in (a, b):
        buf.insert(*rows(0, 64), priority=np.linspace(0.1, 3, 64, dtype=np.float32))
    assert as_numpy(a.sample()[0]).tolist() == as_numpy(b.sample()[0]).tolist()


@pytest.mark.parametrize(("backend", "extra"), CONFIGS)
def test_state_dict_round_trip(backend, extra):
    buf = make(backend, extra, capacity=6, sample_size=3, seed=5)
    buf.insert(*rows(0, 9), priority=np.arange(1, 10, dtype=np.float32))
    buf.update_priorities(np.array([4, 5]), np.array([20.0, 0.5], np.float32))
    other = make(backend, extra, capacity=6, sample_size=3, seed=77)
    other.load_state_dict(buf.state_dict())
    assert other.size() == 6
    for _ in range(3):
        mine, theirs = buf.sample(), other.sample()
        for x, y in zip(mine, theirs):
            np.testing.assert_allclose(as_numpy(x), as_numpy(y))
    buf.insert(*rows(9, 1))
    other.insert(*rows(9, 1))  # both use the restored running max (20)
    np.testing.assert_allclose(as_numpy(buf.sample()[1]), as_numpy(other.sample()[1]))


@pytest.mark.parametrize(("backend", "extra"), CONFIGS)
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    capacity=st.sampled_from([2, 5]),
    batches=st.lists(st.sampled_from([1, 2, 3, 7]), min_size=1, max_size=6),
    seed=st.integers(0, 2**16),
)
def test_only_live_rows_are_drawn(backend, extra, capacity, batches, seed):
    buf = make(backend, extra, capacity=capacity, sample_size=capacity, seed=seed)
    first = 0
    for n in batches:
        buf.insert(*rows(first, n))
        first += n
    live = set(range(max(0, first - capacity), first))
    indices, weights, obs, ids = (as_numpy(x) for x in buf.sample())
    assert set(ids.tolist()) <= live
    assert np.array_equal(indices, ids)  # row ids are insertion counts
    assert np.all((weights > 0) & (weights <= 1 + 1e-6)) and not np.isnan(weights).any()
    assert math.isclose(float(weights.max()), 1.0, rel_tol=1e-6)  # all have equal priority
