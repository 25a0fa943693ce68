"""UniformReplayBuffer on every installed backend (CPU): ring model, sampling, validation."""

import numpy as np
import pytest
from _device_helpers import ALPHA, ID_DTYPE, as_numpy, chi2_pvalue
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ostinato.device import UniformReplayBuffer

BACKENDS = ["torch", "jax"]


def need(backend):
    pytest.importorskip(backend)


def make(backend, capacity, sample_size=4, **kwargs):
    ID_DTYPE.use(backend)
    return UniformReplayBuffer(
        sample_size,
        capacity,
        [(2,), ()],
        ID_DTYPE.types,
        names=["obs", "id"],
        backend=backend,
        **kwargs,
    )


def rows(first, n):
    """Rows ``first .. first + n - 1``: obs = [id, -id], id = id."""
    ids = np.arange(first, first + n, dtype=ID_DTYPE.current)
    return [np.stack([ids, -ids], axis=1).astype(np.float32), ids]


@pytest.mark.parametrize("backend", BACKENDS)
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    capacity=st.sampled_from([1, 3, 5]),
    ops=st.lists(
        st.one_of(
            st.tuples(st.just("batch"), st.sampled_from([0, 1, 2, 4, 7, 11])),
            st.just("single"),
            st.just("reset"),
        ),
        max_size=12,
    ),
)
def test_ring_matches_list_model(backend, capacity, ops):
    need(backend)
    buf = make(backend, capacity, sample_size=1)
    model, next_id = [], 0
    for op in ops:
        if op == "reset":
            assert buf.reset() is True
            model = []
        elif op == "single":
            obs, ids = rows(next_id, 1)
            buf.insert([obs[0], ids[0]])
            model, next_id = (model + [next_id])[-capacity:], next_id + 1
        else:
            n = op[1]
            buf.insert(rows(next_id, n))
            model, next_id = (model + list(range(next_id, next_id + n)))[-capacity:], next_id + n
        assert buf.size() == len(model)
        assert buf.full() == (len(model) == capacity)
        for i in range(-len(model) - 1, len(model) + 1):
            if -len(model) <= i < len(model):
                obs, ident = buf.get_item(i)
                assert int(as_numpy(ident)) == model[i]
                assert as_numpy(obs).tolist() == [model[i], -model[i]]
            else:
                with pytest.raises(IndexError):
                    buf.get_item(i)
        if model:
            _, ident = buf.sample(order_preserving=True)
            assert int(as_numpy(ident)[0]) in model


@pytest.mark.parametrize("backend", BACKENDS)
def test_batch_insert_that_wraps_keeps_exactly_the_newest_rows(backend):
    need(backend)
    buf = make(backend, 5)
    buf.insert(rows(0, 3))
    buf.insert(rows(3, 4))  # wraps: MindSpore's head would be 4 % 5 = 4 instead of 2
    assert [int(as_numpy(buf.get_item(i)[1])) for i in range(5)] == [2, 3, 4, 5, 6]
    buf.insert(rows(7, 12))  # more than the capacity in one go
    assert [int(as_numpy(buf.get_item(i)[1])) for i in range(5)] == [14, 15, 16, 17, 18]


@pytest.mark.parametrize("backend", BACKENDS)
def test_reset_really_empties(backend):
    need(backend)
    buf = make(backend, 3, sample_size=2)
    buf.insert(rows(0, 5))
    buf.reset()
    assert buf.size() == 0 and not buf.full()
    with pytest.raises(IndexError, match="empty"):
        buf.sample()
    buf.insert(rows(10, 2))  # MindSpore keeps head after reset and loses track of rows
    assert [int(as_numpy(buf.get_item(i)[1])) for i in range(2)] == [10, 11]
    assert set(as_numpy(buf.sample()[1]).tolist()) <= {10, 11}


@pytest.mark.parametrize("backend", BACKENDS)
def test_sampling_is_uniform_including_the_newest_row(backend):
    need(backend)
    buf = make(backend, 10, sample_size=10, seed=7)
    buf.insert(rows(0, 13))  # wrapped: ids 3..12
    counts = np.zeros(10)
    for _ in range(400):
        ids = as_numpy(buf.sample()[1])
        counts += np.bincount(ids - 3, minlength=10)
    assert chi2_pvalue(counts, np.ones(10)) > ALPHA
    # MindSpore's GPU kernel draws (int)(u * (count - 1)): the newest row almost never.
    assert chi2_pvalue(counts, np.r_[np.ones(9), 1e-9]) < ALPHA or counts[-1] > 0
    assert counts[-1] > 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_unique_and_order_preserving(backend):
    need(backend)
    buf = make(backend, 8, sample_size=8, seed=1)
    buf.insert(rows(0, 11))  # ids 3..10
    ids = as_numpy(buf.sample(unique=True)[1])
    assert sorted(ids.tolist()) == list(range(3, 11))
    ids = as_numpy(buf.sample(unique=True, order_preserving=True)[1])
    assert ids.tolist() == list(range(3, 11))
    ids = as_numpy(buf.sample(order_preserving=True)[1])
    assert ids.tolist() == sorted(ids.tolist())
    small = make(backend, 8, sample_size=4)
    small.insert(rows(0, 3))
    with pytest.raises(ValueError, match="cannot draw 4 distinct rows from a buffer holding 3"):
        small.sample(unique=True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_unique_draws_are_uniform_over_subsets(backend):
    need(backend)
    buf = make(backend, 6, sample_size=2, seed=3)
    buf.insert(rows(0, 6))
    counts = np.zeros((6, 6))
    for _ in range(1500):
        a, b = sorted(as_numpy(buf.sample(unique=True)[1]).tolist())
        assert a != b
        counts[a, b] += 1
    pairs = counts[np.triu_indices(6, 1)]
    assert chi2_pvalue(pairs, np.ones(15)) > ALPHA


@pytest.mark.parametrize("backend", BACKENDS)
def test_same_seed_same_samples(backend):
    need(backend)
    draws = []
    for _ in range(2):
        buf = make(backend, 50, sample_size=8, seed=42)
        buf.insert(rows(0, 50))
        draws.append([as_numpy(buf.sample()[1]).tolist() for _ in range(3)])
    assert draws[0] == draws[1]


@pytest.mark.parametrize("backend", BACKENDS)
def test_bad_inserts_name_the_column(backend):
    need(backend)
    buf = make(backend, 4)
    with pytest.raises(ValueError, match=r"column 0 \('obs'\): shape \(3,\)"):
        buf.insert([np.zeros(3, np.float32), ID_DTYPE.current(1)])
    with pytest.raises(TypeError, match=r"column 1 \('id'\): dtype int16 does not match int"):
        buf.insert([np.zeros(2, np.float32), np.int16(1)])
    with pytest.raises(TypeError, match=r"column 0 \('obs'\): dtype float64"):
        buf.insert([np.zeros((3, 2)), np.arange(3, dtype=ID_DTYPE.current)])
    with pytest.raises(ValueError, match=r"column 1 \('id'\) holds a batch of 2 but column 0"):
        buf.insert([np.zeros((3, 2), np.float32), np.arange(2, dtype=ID_DTYPE.current)])
    with pytest.raises(ValueError, match="expects a list of 2 columns, got 1"):
        buf.insert([np.zeros(2, np.float32)])
    assert buf.size() == 0  # nothing was written by the failed inserts
    buf.insert([[1.0, 2.0], 5])  # untyped Python values take the column dtype
    assert as_numpy(buf.get_item(0)[0]).tolist() == [1.0, 2.0]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(capacity=0), r"capacity \(0\) must be a positive integer"),
        (dict(capacity=2.5), r"capacity \(2.5\) must be a positive integer"),
        (dict(sample_size=0), r"sample_size \(0\) must be a positive integer"),
        (dict(seed=-1), r"seed \(-1\) must be None or a non-negative integer"),
    ],
)
def test_constructor_quotes_bad_values(backend, kwargs, match):
    need(backend)
    args = dict(sample_size=2, capacity=8) | kwargs
    with pytest.raises(ValueError, match=match):
        UniformReplayBuffer(
            args["sample_size"],
            args["capacity"],
            [(2,)],
            ["float32"],
            seed=kwargs.get("seed"),
            backend=backend,
        )


def test_unknown_backend():
    with pytest.raises(ValueError, match=r"backend \('tf'\) must be one of"):
        UniformReplayBuffer(1, 4, [()], ["float32"], backend="tf")


@pytest.mark.parametrize("backend", BACKENDS)
def test_state_dict_round_trip(backend):
    need(backend)
    buf = make(backend, 6, seed=5)
    buf.insert(rows(0, 9))
    state = buf.state_dict()
    other = make(backend, 6, seed=99)
    other.load_state_dict(state)
    assert other.size() == 6
    assert [int(as_numpy(other.get_item(i)[1])) for i in range(6)] == list(range(3, 9))
    assert as_numpy(other.sample()[1]).tolist() == as_numpy(buf.sample()[1]).tolist()
