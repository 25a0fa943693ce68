"""``Slots.record_samples`` counts a batch of samples at once, a slot possibly several times:
each sample reports the count it brings its item to, in batch order, exactly as counting them
one by one would."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ostinato.core.chunks import ChunkStore
from ostinato.core.slots import Slots


@settings(max_examples=200, deadline=None)
@given(
    before=st.lists(st.integers(0, 5), min_size=1, max_size=12),
    picks=st.lists(st.integers(0, 11), min_size=1, max_size=40),
)
def test_a_batch_counts_as_samples_one_by_one(before, picks):
    slots = Slots(ChunkStore())
    n = len(before)
    slots.times_sampled[:n] = before
    batch = np.array([p % n for p in picks], dtype=np.int64)
    reported, first_time = slots.record_samples(batch)
    expected = list(before)
    want = []
    for s in batch.tolist():
        expected[s] += 1
        want.append(expected[s])
    assert reported.tolist() == want
    assert first_time == sum(1 for s in set(batch.tolist()) if before[s] == 0)
    assert slots.times_sampled[:n].tolist() == expected
