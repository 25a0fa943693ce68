"""Priority updates by key after samples: a Prioritized table remembers the slots of the items
it sampled (``Slots.remember_sampled``) so that the update that usually follows finds them
without a lookup in its big key index. Deleted items, reused slots, resets and evictions
must never make an update touch the wrong item."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import ostinato as reverb
from ostinato.core import slots as slots_mod
from ostinato.core.chunks import Chunk
from ostinato.core.table import Table

OPS = st.lists(
    st.tuples(
        st.sampled_from(["insert", "insert", "sample", "update", "delete", "reset"]),
        st.integers(1, 40),
        st.integers(0, 2**31),
    ),
    max_size=60,
)


@settings(max_examples=60, deadline=None)
@given(ops=OPS, max_size=st.integers(5, 60))
def test_updates_by_key_reach_exactly_their_items(ops, max_size):
    old = slots_mod.RECENT_MAX
    slots_mod.RECENT_MAX = 16  # generations turn over within a short run
    try:
        _run(ops, max_size)
    finally:
        slots_mod.RECENT_MAX = old


def _run(ops, max_size):
    t = Table(
        "t",
        reverb.selectors.Prioritized(1.0),
        reverb.selectors.Fifo(),
        max_size=max_size,
        rate_limiter=reverb.rate_limiters.MinSize(1),
    )
    chunk = Chunk(1, np.zeros((1, 1), np.float32), episode_id=0)
    model: dict[int, float] = {}  # key -> priority, what the table must hold
    order: list[int] = []  # keys, oldest first (Fifo eviction)
    next_key = 1
    sampled: list[int] = []
    for op, n, seed in ops:
        rng = np.random.default_rng(seed)
        if op == "insert":
            for _ in range(n):
                p = float(rng.integers(1, 10))
                t.insert(next_key, p, (chunk, 0, 1), (True,), assign=False)
                model[next_key] = p
                order.append(next_key)
                next_key += 1
                while len(order) > max_size:
                    del model[order.pop(0)]
        elif op == "sample" and model:
            batch = t.sample(n, timeout=1.0)
            sampled += batch.keys.tolist()
        elif op == "update" and sampled:
            keys = [sampled[i] for i in rng.integers(0, len(sampled), n)]
            keys += [10**9 + int(k) for k in rng.integers(0, 5, 3)]  # unknown keys
            prios = [float(x) for x in rng.integers(1, 100, len(keys))]
            t.mutate_priorities(dict(zip(keys, prios)))
            for k, p in dict(zip(keys, prios)).items():
                if k in model:
                    model[k] = p
        elif op == "delete" and model:
            keys = [order[i] for i in rng.integers(0, len(order), n)]
            t.delete(keys)
            for k in set(keys):
                del model[k]
                order.remove(k)
        elif op == "reset":
            t.reset()
            model.clear()
            order.clear()
        assert sorted(t.keys().tolist()) == sorted(model)
        for k, p in model.items():
            assert t.get(k)["priority"] == p
