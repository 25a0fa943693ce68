"""Counting a batch's chunk references (``core.chunk_counts``) gives what counting every
reference one by one gives, whatever mix of chunks and of flat and nested items a batch has."""

from __future__ import annotations

from collections import Counter

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ostinato.core.chunk_counts import count_chunks
from ostinato.core.chunks import Chunk
from ostinato.core.items import chunk_refs, is_flat

_CHUNKS = [Chunk(7000 + i, np.zeros((4, 1), np.float32), episode_id=i) for i in range(4)]

# An item of 2 columns: flat (one slice each) or nested (the first column two slices).
_item = st.one_of(
    st.tuples(st.integers(0, 3), st.integers(0, 3)).map(
        lambda ab: (_CHUNKS[ab[0]], 0, 1, _CHUNKS[ab[1]], 1, 1)
    ),
    st.tuples(st.integers(0, 3), st.integers(0, 3), st.integers(0, 3)).map(
        lambda abc: (
            ((_CHUNKS[abc[0]], 3, 1), (_CHUNKS[abc[1]], 0, 1)),
            ((_CHUNKS[abc[2]], 0, 2),),
        )
    ),
    # flat, of one column (another length)
    st.integers(0, 3).map(lambda a: (_CHUNKS[a], 2, 1)),
)


@settings(max_examples=300, deadline=None)
@given(trajs=st.lists(_item, min_size=0, max_size=40), runs=st.booleans(), transpose=st.booleans())
def test_counts_and_nested_items_match_one_by_one(trajs, runs, transpose):
    if runs:  # a writer's batch: items in runs of the same chunks
        trajs = sorted(trajs, key=lambda t: (not is_flat(t), repr(t)))
    counts: dict[Chunk, int] = {_CHUNKS[0]: 5}  # counts already there are added to
    length, nested, fields = count_chunks(counts, trajs, transpose)
    want = Counter({_CHUNKS[0]: 5})
    for t in trajs:
        want.update(chunk_refs(t))
    assert counts == dict(want)
    assert nested == [i for i, t in enumerate(trajs) if not is_flat(t)]
    flat_lengths = {len(t) for t in trajs if is_flat(t)}
    assert length == (flat_lengths.pop() if len(flat_lengths) == 1 else -1)
    flat = [t for t in trajs if is_flat(t)]
    assert fields == (list(zip(*flat)) if length > 0 and transpose else None)


def test_a_writer_s_batch_two_chunks_per_column_and_a_few_straddling():
    a, b, c, d = _CHUNKS
    trajs = [(a, i, 1, c, i, 1) for i in range(3)]
    trajs += [(((a, 3, 1), (b, 0, 1)), ((c, 3, 1),))]  # straddles the a/b boundary
    trajs += [(b, i, 1, c, i, 1) for i in range(3)]
    counts: dict[Chunk, int] = {}
    assert count_chunks(counts, trajs)[:2] == (6, [3])
    assert counts == {a: 4, b: 4, c: 7}
