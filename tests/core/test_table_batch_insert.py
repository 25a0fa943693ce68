"""A batch of items inserted at once leaves a table exactly as inserting them one by one does.

``Table.try_insert_many`` takes a whole batch in one step when the rate limiter admits all of
it, the keys are new and the table stays within ``max_size`` or is full with a Fifo remover
(what a writer's held items or a ``VectorTrajectoryWriter``'s ``create_items`` hand it). Every
other case goes item by item; both must give the same slots, sampling, eviction order,
statistics and chunk references.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ostinato as reverb
from ostinato import errors
from ostinato.core.chunks import Chunk
from ostinato.core.locations import register_block
from ostinato.core.table import Table

SELECTORS = {
    "uniform": reverb.selectors.Uniform,
    "prioritized": lambda: reverb.selectors.Prioritized(0.8),
    "fifo": reverb.selectors.Fifo,
    "lifo": reverb.selectors.Lifo,
    "minheap": reverb.selectors.MinHeap,
    "maxheap": reverb.selectors.MaxHeap,
}


def _table(sampler: str, remover: str, max_size: int, mts: int) -> Table:
    t = Table(
        "t",
        SELECTORS[sampler](),
        SELECTORS[remover](),
        max_size=max_size,
        rate_limiter=reverb.rate_limiters.MinSize(1),
        max_times_sampled=mts,
    )
    t._rng = np.random.default_rng(7)
    return t


_BLOCK = np.zeros((64, 2), np.float32)
_BLOCK_CODE = register_block(_BLOCK)
_ROWS = np.zeros((8192, 2), np.float32)  # a row per item's chunk (keys up to 8191)
_ROWS_CODE = register_block(_ROWS)


def _items(n: int, seed: int) -> list[tuple]:
    rng = np.random.default_rng(seed)
    # Chunks 0-3 are carved from a registered block (their items' rows get located); chunk 4
    # is not, so items that use it are not located. Chunks 5 and 6 are consecutive rows of the
    # block, as a writer carves a column's chunks one after the other.
    chunks = [
        Chunk(
            1000 + i,
            _BLOCK[8 * i : 8 * i + 4] if i < 4 else np.zeros((4, 2), np.float32),
            episode_id=i % 3,
            origin=(_BLOCK_CODE, 8 * i) if i < 4 else None,
        )
        for i in range(5)
    ] + [
        Chunk(1005 + i, _BLOCK[40 + 4 * i : 44 + 4 * i], 1, origin=(_BLOCK_CODE, 40 + 4 * i))
        for i in range(2)
    ]
    # Nested first columns (several slices), as an item straddling a chunk boundary has: rows
    # that follow each other in the block (located) or not (not located).
    straddling = [
        ((chunks[5], 2, 2), (chunks[6], 0, 1)),
        ((chunks[0], 3, 1), (chunks[1], 0, 2)),
    ]
    out = []
    for k in range(n):
        a, b = rng.integers(0, 5, 2)
        kind = int(rng.integers(0, 8))
        if kind < len(straddling):  # a quarter of the items
            traj: tuple = (straddling[kind], ((chunks[b], 0, 1),))
            squeeze = (False, True)
        else:
            traj = (chunks[a], int(rng.integers(0, 4)), 1, chunks[b], 0, 1)
            squeeze = (True, True)
        out.append((int(k + 1), float(rng.integers(0, 4)), traj, squeeze))
    return out


def _layout(traj: tuple) -> tuple:
    if isinstance(traj[0], Chunk):
        return tuple(x.key if isinstance(x, Chunk) else x for x in traj)
    return tuple(tuple((c.key, o, n) for c, o, n in col) for col in traj)


def _state(t: Table) -> tuple:
    s = t._slots
    slots = sorted(s.key_to_slot.items())
    stride = s.locations._stride
    rows = [tuple(s.locations.array[v * stride : (v + 1) * stride]) for _, v in slots]
    located = [row if row and row[0] else (0,) for row in rows]  # an unlocated row: unread
    # A slot without an item holds nothing (no trajectory keeping chunks alive, no location).
    live = {v for _, v in slots}
    for v in range(len(s.traj)):
        if v not in live:
            assert s.traj[v] is None and s.squeeze[v] is None, v
            assert not stride or s.locations.array[v * stride] == 0, v
    return (
        slots,
        located,
        [(float(s.a_prio[v]), int(s.a_seq[v]), _layout(s.traj[v])) for _, v in slots],
        dict(s.episode_refs),
        sorted((c.key, c.refs) for c in s.store.chunks()),
        t.info.current_size,
        t.info.rate_limiter_info.insert_stats.completed,
    )


def _sample(t: Table) -> tuple:
    try:
        s = t.sample(2, timeout=0)
    except errors.RateLimiterTimeout:  # max_times_sampled emptied it
        return None, None
    return s.keys.tolist(), s.probabilities.tolist()


@settings(max_examples=40, deadline=None)
@given(
    sampler=st.sampled_from(sorted(SELECTORS)),
    remover=st.sampled_from(sorted(SELECTORS)),
    batches=st.lists(st.integers(1, 40), min_size=1, max_size=6),
    max_size=st.integers(5, 150),
    mts=st.sampled_from([0, 2]),
    seed=st.integers(0, 1000),
)
def test_batch_equals_one_by_one(sampler, remover, batches, max_size, mts, seed):
    one, many = _table(sampler, remover, max_size, mts), _table(sampler, remover, max_size, mts)
    for it in _items(sum(batches), seed):  # each table gets its own chunk objects
        assert one.try_insert_many([it]) == 1
    items = _items(sum(batches), seed)
    i = 0
    for b in batches:
        assert many.try_insert_many(items[i : i + b]) == b
        i += b
    assert _state(one) == _state(many)
    # Sampling (and max_times_sampled deletions) and later evictions go the same way.
    for t in (one, many):
        t._rng = np.random.default_rng(seed)
    for _ in range(3):
        a, b = _sample(one), _sample(many)
        assert a[0] == b[0]
        assert a[1] == pytest.approx(b[1])
    for t in (one, many):
        t.try_insert_many([(10_000 + k, p, tr, sq) for k, p, tr, sq in _items(max_size, seed + 1)])
    assert _state(one) == _state(many)


def test_batch_with_a_known_key_goes_item_by_item():
    """A batch holding a key the table has (or a key twice) is inserted one by one: a fresh
    key is drawn for the collision, as for single inserts."""
    t = _table("uniform", "fifo", 100, 0)
    items = _items(4, 0)
    t.try_insert_many(items[:2])
    assert t.try_insert_many(items) == 4
    assert len(t) == 6
    t2 = _table("uniform", "fifo", 100, 0)
    assert t2.try_insert_many([items[0], items[0]]) == 2
    assert len(t2) == 2


def test_batch_the_rate_limiter_stops_partway():
    """A limiter that admits only part of a batch takes that prefix (item by item)."""
    t = Table(
        "t",
        reverb.selectors.Uniform(),
        reverb.selectors.Fifo(),
        max_size=100,
        rate_limiter=reverb.rate_limiters.SampleToInsertRatio(1.0, 1, 2.0),
    )
    items = _items(10, 1)
    done = t.try_insert_many(items)
    assert 0 < done < 10
    assert len(t) == done


def test_new_keys_are_64_bit_and_distinct():
    from ostinato.core.keys import new_keys

    keys = new_keys(10_000)
    assert len(keys) == len(set(keys)) == 10_000
    assert all(type(k) is int and 0 <= k < 2**64 - 1 for k in keys)
    assert new_keys(1)[0] > max(keys)  # a counter: never drawn twice in one process
    assert new_keys(0) == []


@pytest.mark.parametrize("size,batch", [(20, 8), (80, 50)])  # 50: vectorised replacing
@pytest.mark.parametrize("sampler", ["uniform", "prioritized", "fifo"])
def test_a_full_fifo_table_takes_a_batch_at_once(sampler, size, batch):
    """A full table with a Fifo remover (a replay buffer's steady state) takes a batch in one
    step, evicting its oldest items, and ends as one-by-one inserts would."""
    one, many = _table(sampler, "fifo", size, 0), _table(sampler, "fifo", size, 0)

    # Chunks of their own per item: no episode is shared between old and new items. Each is
    # a row of a registered block, as a writer's are: the items are located.
    def items(first: int, n: int) -> list[tuple]:
        return [
            (
                k,
                1.0 + k % 3,
                (Chunk(k, _ROWS[k : k + 1], episode_id=k, origin=(_ROWS_CODE, k)), 0, 1),
                (True,),
            )
            for k in range(first, first + n)
        ]

    for t in (one, many):
        assert t.try_insert_many(items(1, size)) == size
    for it in items(1000, batch):
        assert one.try_insert_many([it]) == 1
    with many._lock:
        assert many._insert_batch_locked(items(1000, batch), False)
    assert _state(one) == _state(many)
    assert sorted(many._slots.key_to_slot) == list(range(batch + 1, size + 1)) + list(
        range(1000, 1000 + batch)
    )
    assert many._slots.num_deleted_episodes == batch
    for t in (one, many):  # they evict (finding each victim's place) and sample alike
        for it in items(5000, size // 2):
            assert t.try_insert_many([it]) == 1
        t._rng = np.random.default_rng(3)
    assert _state(one) == _state(many)
    assert _sample(one) == _sample(many)


def test_reset_releases_every_chunk_reference():
    """A reset counts the items' references per chunk (column by column) and releases them
    all: nothing is left in the store, and a table refilled afterwards counts afresh."""
    from ostinato.core.items import chunk_refs

    items = _items(60, 3)
    chunks = {c for it in items for c in chunk_refs(it[2])}
    t = _table("uniform", "fifo", 100, 0)
    t.try_insert_many(items[:30])
    for it in items[30:]:
        t.try_insert_many([it])
    assert sum(c.refs for c in chunks) == sum(len(chunk_refs(it[2])) for it in items)
    t.reset()
    assert len(t) == 0 and len(t._slots.store) == 0
    assert all(c.refs == 0 for c in chunks)
    t.try_insert_many(items[:7])
    assert sum(c.refs for c in chunks) == sum(len(chunk_refs(it[2])) for it in items[:7])


_OTHER = np.zeros((32, 2), np.float32)
_OTHER_CODE = register_block(_OTHER)


def _writer_items(first_key: int, steps: range) -> list[tuple]:
    """Items as a writer makes them, step by step: a squeezed column of the step (chunks A
    then B, consecutive rows of one block), a column of the last 3 steps (nested where it
    straddles A and B) and one of the step in a chunk of another block (C)."""
    a = Chunk(9001, _BLOCK[0:8], 5, origin=(_BLOCK_CODE, 0))
    b = Chunk(9002, _BLOCK[8:16], 5, origin=(_BLOCK_CODE, 8))
    c = Chunk(9003, _OTHER[0:32], 5, origin=(_OTHER_CODE, 0))

    def at(s: int) -> tuple:
        return (a, s, 1) if s < 8 else (b, s - 8, 1)

    out = []
    for i, s in enumerate(steps):
        w0 = s - 2
        if s < 8 or w0 >= 8:
            window = (a, w0, 3) if s < 8 else (b, w0 - 8, 3)
            traj: tuple = (*at(s), *window, c, s, 1)
            sq = (True, False, True)
        else:
            window2 = ((a, w0, 8 - w0), (b, 0, s - 7))
            traj = ((at(s),), window2, ((c, s, 1),))
            sq = (True, False, True)
        out.append((first_key + i, 1.0, traj, sq))
    return out


@pytest.mark.parametrize("gaps", [False, True])
def test_a_writer_s_batch_is_located_column_by_column_as_one_by_one(gaps):
    """Items whose columns are one or two runs of chunks with offsets counting up (what a
    writer's batch is, straddling items included) are located column by column; the rows
    recorded are those that locating each item by itself records, in consecutive slots or
    in slots freed here and there."""
    tables = []
    for batch in (False, True):
        t = _table("uniform", "fifo", 100, 0)
        t.try_insert_many(_writer_items(100, range(2, 8)))  # the table learns their shape
        if gaps:  # free slots out of order: the batch's slots are not consecutive
            t.delete([102, 105, 103])
        items = _writer_items(500, range(2, 16))
        if batch:
            assert t.try_insert_many(items) == len(items)
        else:
            for it in items:
                assert t.try_insert_many([it]) == 1
        tables.append(t)
    assert _state(tables[0]) == _state(tables[1])
    rows = _state(tables[1])[1]
    assert all(r[0] == 1 for r in rows[-14:])  # every one of them located
