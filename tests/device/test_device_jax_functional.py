"""The pure functional jax form: jit, donation, purity, counters that never overflow."""

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

from ostinato.device.jax import (  # noqa: E402
    make_priority_buffer,
    make_uniform_buffer,
)
from ostinato.device.jax.functional import PriorityState  # noqa: E402


def cols(first, n):
    ids = np.arange(first, first + n, dtype=np.int32)
    return (np.stack([ids, -ids], 1).astype(np.float32), ids)


def test_uniform_functions_are_pure_without_jit():
    buf = make_uniform_buffer(4, 2, [(2,), ()], ["float32", "int32"])
    s0 = buf.init()
    s1 = buf.add(s0, cols(0, 3))
    assert int(buf.size(s0)) == 0 and int(buf.size(s1)) == 3  # s0 untouched
    assert int(buf.get(s1, -1)[1]) == 2
    with pytest.raises(IndexError, match=r"index \(3\) out of range"):
        buf.get(s1, 3)
    with pytest.raises(IndexError, match="empty"):
        buf.sample(s0, jax.random.key(0))


def test_jitted_buffer_donates_and_matches_eager():
    eager = make_priority_buffer(0.6, 8, 4, [(2,), ()], ["float32", "int32"])
    jitted = eager.jit()
    a, b = eager.init(), jitted.init()
    for first, n in [(0, 3), (3, 1), (4, 7)]:
        a = eager.add(a, cols(first, n))
        b = jitted.add(b, cols(first, n))
    key = jax.random.key(3)
    out_a, out_b = eager.sample(a, key, 0.5), jitted.sample(b, key, 0.5)
    for x, y in zip(out_a, out_b):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-6)
    old = b
    b = jitted.update_priorities(b, out_b[0], np.full(4, 5.0, np.float32))
    assert old.columns[0].is_deleted()  # donated: updated in place
    assert float(b.max_priority) == 5.0


def test_add_validates_at_trace_time_with_column_names():
    buf = make_uniform_buffer(4, 2, [(2,), ()], ["float32", "int32"], names=["obs", "a"]).jit()
    state = buf.init()
    with pytest.raises(TypeError, match=r"column 1 \('a'\): dtype float32 does not match int32"):
        buf.add(state, (np.zeros(2, np.float32), np.float32(1)))
    with pytest.raises(ValueError, match=r"column 0 \('obs'\): shape \(3,\)"):
        buf.add(state, (np.zeros(3, np.float32), np.int32(1)))


def test_64_bit_columns_need_x64():
    if jax.config.jax_enable_x64:
        pytest.skip("x64 mode is on")
    with pytest.raises(TypeError, match=r"column 0: dtype int64 needs jax's x64 mode"):
        make_uniform_buffer(4, 2, [()], ["int64"])


def test_row_ids_wrap_without_overflow():
    buf = make_priority_buffer(1.0, 4, 4, [()], ["int32"])
    period = buf.period
    assert period % 4 == 0 and period <= 2**31 - 1
    state = buf.init()
    state = state._replace(total=jnp.asarray(period - 2, jnp.int32))  # ids about to wrap
    state = buf.add(state, (np.arange(4, dtype=np.int32),))
    assert int(state.total) == 2 and int(state.size) == 4
    ids, _, values = buf.sample(state, jax.random.key(0), 0.0)
    ids = np.asarray(ids)
    assert set(ids.tolist()) <= {period - 2, period - 1, 0, 1}
    # Every id maps back to the row it was sampled with, and updates still find them.
    state = buf.update_priorities(state, ids, np.full(4, 7.0, np.float32))
    assert float(state.max_priority) == 7.0
    stale = buf.update_priorities(
        buf.add(state, (np.arange(4, dtype=np.int32),)), ids, np.full(4, 99.0, np.float32)
    )
    assert float(stale.max_priority) == 7.0  # all four ids were overwritten


def test_priority_state_is_a_pytree():
    buf = make_priority_buffer(0.5, 16, 2, [(3,)], ["float32"])
    state = buf.init()
    leaves = jax.tree_util.tree_leaves(state)
    assert isinstance(state, PriorityState) and len(leaves) >= 5
    doubled = jax.tree_util.tree_map(lambda x: x, state)
    assert jax.tree_util.tree_structure(doubled) == jax.tree_util.tree_structure(state)


def test_missing_device_raises():
    with pytest.raises(ValueError, match=r"device \('tpu'\) is not available"):
        make_uniform_buffer(4, 2, [()], ["float32"]).init("tpu")
    from ostinato.device import UniformReplayBuffer

    with pytest.raises(ValueError, match=r"device \('cpu:5'\) is not available"):
        UniformReplayBuffer(1, 4, [()], ["float32"], backend="jax", device="cpu:5")
