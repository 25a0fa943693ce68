"""The chunk store's running byte count equals the sum over its chunks, whatever order chunks
are acquired, released and resized in (also concurrently: a writer trims a chunk while the
server's thread stores the items referring to it)."""

from __future__ import annotations

import threading

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ostinato.core.chunks import Chunk, ChunkStore


def _exact(store: ChunkStore) -> int:
    return sum(c.nbytes for c in store.chunks())


ops = st.lists(
    st.tuples(
        st.sampled_from(["acquire", "release", "resize", "move"]),
        st.integers(0, 5),
        st.integers(0, 10_000),
    ),
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(ops)
def test_running_count_matches_the_sum(seq):
    a, b = ChunkStore(), ChunkStore()
    chunks = [Chunk(k, np.zeros(k + 1, np.uint8)) for k in range(6)]
    held: dict[int, list] = {0: [], 1: []}  # per store: chunks acquired (with repeats)
    stores = (a, b)
    for op, i, n in seq:
        c = chunks[i]
        if op == "acquire":  # into the store that holds it already, if one does
            s = 1 if c in held[1] else 0
            stores[s].acquire([c])
            held[s].append(c)
        elif op == "release":
            for s in (0, 1):
                if c in held[s]:
                    held[s].remove(c)
                    stores[s].release([c])
                    break
        elif op == "resize":
            c.nbytes = n
        elif op == "move" and held[0]:  # a table joining a server moves its references
            moving = list(held[0])
            a.release(moving)
            b.acquire(moving)
            held[1].extend(moving)
            held[0].clear()
        for s in stores:
            assert s.num_bytes == _exact(s)
            assert s.stats() == (len(s), s.num_bytes)


def test_concurrent_resizes_and_acquires_never_drift():
    store = ChunkStore()
    rounds = 2000
    chunks = [Chunk(k, np.zeros(64, np.uint8)) for k in range(rounds)]
    go = threading.Barrier(2)

    def resizer():
        go.wait()
        for c in chunks:
            c.nbytes = 7  # as a writer trimming its chunk
            c.nbytes = 5

    def holder():
        go.wait()
        for c in chunks:
            store.acquire([c])
            if c.key % 3 == 0:
                store.release([c])

    ts = [threading.Thread(target=resizer), threading.Thread(target=holder)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert store.num_bytes == _exact(store) == 5 * len(store)
    store.release(store.chunks())
    assert store.num_bytes == 0
