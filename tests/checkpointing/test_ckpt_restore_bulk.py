"""Restore builds tables in bulk: the bulk builders equal one-by-one inserts, decoding equals the
items that were saved, and restores report progress (only once they have run a while)."""

from __future__ import annotations

import functools
import itertools

import numpy as np
import pytest
from ckpt_helpers import SELECTORS, ckpt, counters, fill, state
from hypothesis import given, settings
from hypothesis import strategies as st

import ostinato as reverb
from ostinato import errors
from ostinato.checkpointing import encode, restore, store
from ostinato.core import items as items_lib
from ostinato.core.chunks import Chunk
from ostinato.core.sum_tree import SumTree

FAST = settings(max_examples=60, deadline=None)

weights = st.one_of(
    st.just(0.0), st.floats(0.0, 1e300, allow_nan=False), st.integers(0, 4).map(float)
)


# -- sum tree --------------------------------------------------------------------------------------
@FAST
@given(
    cap=st.integers(1, 64),
    before=st.lists(st.tuples(st.integers(0, 200), weights), max_size=30),
    batch=st.lists(st.tuples(st.integers(0, 300), weights), max_size=200),
)
def test_bulk_sum_tree_build_equals_setting_leaves_one_by_one(cap, before, batch):
    one, bulk = SumTree(cap), SumTree(cap)
    for s, w in before:
        one.set(s, w)
        bulk.set(s, w)
    for s, w in batch:
        one.set(s, w)
    bulk.set_leaves_and_rebuild(
        np.array([s for s, _ in batch], dtype=np.int64),
        np.array([w for _, w in batch], dtype=np.float64),
    )
    assert bulk.capacity == one.capacity
    assert bulk._tree.tobytes() == one._tree.tobytes()  # bit for bit, every node
    assert bulk.total == one.total


# -- selectors -------------------------------------------------------------------------------------
def _drain(sel, rng_seed: int) -> list[int]:
    """Observable behaviour: what the selector picks, deleting each pick, until empty."""
    rng = np.random.default_rng(rng_seed)
    out = []
    for _ in range(sel.num_items()):
        slot, p = sel.sample(rng)
        out.append((slot, round(p, 12)))
        sel.delete(slot)
    return out


@FAST
@given(
    kind=st.sampled_from(sorted(SELECTORS)),
    old=st.lists(st.integers(0, 3).map(float), max_size=20),
    drop=st.sets(st.integers(0, 19)),
    new=st.lists(st.integers(0, 3).map(float), max_size=80),
    perm_seed=st.integers(0, 2**32 - 1),
)
def test_selector_bulk_insert_equals_inserting_one_by_one(kind, old, drop, new, perm_seed):
    one, bulk = SELECTORS[kind](), SELECTORS[kind]()
    for sel in (one, bulk):  # some history first: inserts, then deletions
        for s, p in enumerate(old):
            sel.insert(s, p)
        for s in sorted(d for d in drop if d < len(old)):
            sel.delete(s)
    free = [s for s in range(len(old) + len(new)) if s >= len(old) or s in drop]
    slots = np.random.default_rng(perm_seed).permutation(np.array(free, dtype=np.int64))[: len(new)]
    prios = np.array(new[: len(slots)], dtype=np.float64)
    for s, p in zip(slots.tolist(), prios.tolist()):
        one.insert(s, p)
    bulk.bulk_insert(slots, prios)
    assert bulk.num_items() == one.num_items()
    if kind == "prioritized":
        assert bulk._tree._tree.tobytes() == one._tree._tree.tobytes()
    if kind in ("fifo", "lifo"):
        assert bulk.ordered_slots() == one.ordered_slots()
    if kind == "uniform":
        assert bulk.live_slots().tolist() == one.live_slots().tolist()
    # Then the same picks, ties included (heaps: earlier inserted wins), after more inserts.
    for sel in (one, bulk):
        sel.insert(len(old) + len(new) + 1, 1.0)
    assert _drain(bulk, perm_seed) == _drain(one, perm_seed)


# -- decoding --------------------------------------------------------------------------------------
def _reference_decode(arrs, chunks):
    """The one-item-at-a-time decoder that the vectorised one replaced."""
    nslices = arrs["nslices"].tolist()
    sc, so, sl = (arrs[k].tolist() for k in ("slice_chunk", "slice_offset", "slice_length"))
    sq = arrs["squeeze"].tolist()
    trajs, squeezes, ci, si = [], [], 0, 0
    for n in arrs["ncols"].tolist():
        squeezes.append(items_lib.intern_squeeze(tuple(sq[ci : ci + n])))
        cols = []
        for k in nslices[ci : ci + n]:
            cols.append(
                tuple(
                    (chunks[c], o, ln)
                    for c, o, ln in zip(sc[si : si + k], so[si : si + k], sl[si : si + k])
                )
            )
            si += k
        trajs.append(items_lib.pack(cols))
        ci += n
    return trajs, squeezes


@st.composite
def snapshots(draw):
    chunks = [Chunk(i, np.zeros((8, 2), np.float32), episode_id=i % 3) for i in range(6)]
    n = draw(st.integers(0, 40))
    trajs, squeezes = [], []
    for _ in range(n):
        ncols = draw(st.integers(1, 4))
        cols = []
        for _ in range(ncols):
            nsl = draw(st.sampled_from([1, 1, 1, 2, 3]))
            cols.append(
                tuple(
                    (
                        chunks[draw(st.integers(0, 5))],
                        draw(st.integers(0, 4)),
                        draw(st.integers(1, 4)),
                    )
                    for _ in range(nsl)
                )
            )
        trajs.append(items_lib.pack(cols))
        squeezes.append(
            items_lib.intern_squeeze(draw(st.lists(st.booleans(), min_size=ncols, max_size=ncols)))
        )
    return {
        "keys": np.arange(n, dtype=np.uint64),
        "priorities": np.ones(n),
        "times_sampled": np.zeros(n, np.int32),
        "heap_order": None,
        "trajectories": trajs,
        "squeeze": squeezes,
    }


@FAST
@given(snap=snapshots(), batch=st.sampled_from([1, 3, 7, encode.DECODE_BATCH]))
def test_decode_items_gives_back_the_saved_items(snap, batch):
    col = encode.ChunkCollector()
    arrs = col.encode_items(snap)
    ticks = []
    saved, encode.DECODE_BATCH = encode.DECODE_BATCH, batch
    try:
        trajs, squeezes = encode.decode_items(arrs, col.chunks, "x", ticks.append)
    finally:
        encode.DECODE_BATCH = saved
    ref_trajs, ref_squeezes = _reference_decode(arrs, col.chunks)
    assert trajs == ref_trajs == snap["trajectories"]
    assert squeezes == ref_squeezes == snap["squeeze"]
    assert all(a is b for a, b in zip(squeezes, ref_squeezes))  # interned, shared tuples
    n = len(snap["trajectories"])
    assert ticks == list(range(batch, n, batch)) + ([n] if n else [])


def test_decode_items_refuses_items_without_columns():
    arrs = {
        "ncols": np.zeros(1, np.uint32),
        "nslices": np.zeros(0, np.uint32),
        "slice_chunk": np.zeros(0, np.uint32),
        "slice_offset": np.zeros(0, np.uint32),
        "slice_length": np.zeros(0, np.uint32),
        "squeeze": np.zeros(0, np.uint8),
    }
    with pytest.raises(store.CheckpointCorruptError, match="inconsistent"):
        encode.decode_items(arrs, [], "x")


# -- Table.restore_items ---------------------------------------------------------------------------
def _table(sampler="uniform", max_size=1000):
    return reverb.Table(
        "t",
        SELECTORS[sampler](),
        reverb.selectors.Fifo(),
        max_size,
        reverb.rate_limiters.MinSize(1),
    )


@pytest.mark.parametrize("sampler", ["uniform", "prioritized", "minheap"])
def test_restore_into_a_table_that_held_items_before(tmp_path, make_server, sampler):
    s1 = make_server(_table(sampler), checkpointer=ckpt(tmp_path / "a"))
    fill(s1.localhost_client(), "t", 120)
    path = s1.checkpoint()
    t2 = _table(sampler)
    fill_server = make_server(t2)
    fill(fill_server.localhost_client(), "t", 300)  # grows the slot arrays, then empties them
    t2.delete(t2.keys())
    store.load(path, {"t": t2})
    t1 = s1.tables_by_name["t"]
    assert state(t2) == state(t1)
    assert counters(t2)[:2] == counters(t1)[:2]  # size, episodes
    assert t2.sample(5).keys.tolist()  # samples
    t2.insert(12345, 1.0, t1.get(int(t1.keys()[0]))["trajectory"], (False, False))
    assert len(t2) == len(t1) + 1


def test_restore_items_counts_chunk_references_itself_when_not_told(make_server):
    s = make_server(_table())
    fill(s.localhost_client(), "t", 50)
    t1 = s.tables_by_name["t"]
    snap = t1.snapshot()
    cnt = {
        k: snap[k]
        for k in ("inserts", "samples", "deletes", "num_deleted_episodes", "num_unique_samples")
    }
    slices = [c for tr in snap["trajectories"] for c in items_lib.chunk_refs(tr)]
    chunks = list({id(c): c for c in slices}.values())
    per_chunk = [sum(1 for x in slices if x is c) for c in chunks]
    args = (
        snap["keys"],
        snap["priorities"],
        snap["times_sampled"],
        snap["trajectories"],
        snap["squeeze"],
        cnt,
    )
    for told in (None, (chunks[::-1], np.array(per_chunk[::-1]))):
        before = [c.refs for c in chunks]
        t2 = _table()
        t2.restore_items(*args, chunk_refs=told)
        assert [c.refs - b for c, b in zip(chunks, before)] == per_chunk
        assert state(t2) == state(t1)
        assert t2.info.num_episodes == t1.info.num_episodes


def test_restore_items_refuses_bad_input_and_leaves_the_table_empty(make_server):
    s = make_server(_table("minheap"))
    fill(s.localhost_client(), "t", 10)
    snap = s.tables_by_name["t"].snapshot()
    cnt = {
        k: snap[k]
        for k in ("inserts", "samples", "deletes", "num_deleted_episodes", "num_unique_samples")
    }
    args = (snap["priorities"], snap["times_sampled"], snap["trajectories"], snap["squeeze"], cnt)
    t = _table("minheap")
    keys = snap["keys"].copy()
    keys[3] = keys[5]
    with pytest.raises(errors.FailedPreconditionError, match="duplicate key"):
        t.restore_items(keys, *args)
    with pytest.raises(errors.FailedPreconditionError, match="permutation"):
        t.restore_items(snap["keys"], *args, heap_order=np.array([0, 0, 1, 2, 3, 4, 5, 6]))
    with pytest.raises(errors.FailedPreconditionError, match="trajectories"):
        t.restore_items(snap["keys"][:-1], *args)
    assert len(t) == 0 and t.info.num_episodes == 0
    t.restore_items(snap["keys"], *args, heap_order=snap["heap_order"])
    assert state(t) == state(s.tables_by_name["t"])


# -- progress --------------------------------------------------------------------------------------
class FakeClock:
    def __init__(self, *times):
        self.times = list(times)

    def __call__(self):
        return self.times.pop(0) if len(self.times) > 1 else self.times[0]


def test_delayed_progress_waits_then_forwards_everything_to_the_end():
    got = []
    clock = FakeClock(0.0, 0.1, 0.5, 1.2, 1.3, 1.4)
    p = store.DelayedProgress(lambda *a: got.append(a), 1.0, clock)
    for done in (50, 60, 70, 80):
        p("load", done, 100)
    p("load", 100, 100)
    assert got == [("load", 70, 100), ("load", 80, 100), ("load", 100, 100)]


def test_delayed_progress_says_nothing_for_a_quick_restore():
    got = []
    p = store.DelayedProgress(lambda *a: got.append(a), 1.0, FakeClock(0.0, 0.2, 0.5, 2.0))
    p("load", 10, 100)
    p("load", 95, 100)
    p("load", 100, 100)  # done: a bar opened now would only flash
    assert got == [] and not p.started


def test_delayed_progress_starts_early_when_the_restore_will_be_long():
    got = []
    p = store.DelayedProgress(lambda *a: got.append(a), 1.0, FakeClock(0.0, 0.1, 0.3))
    p("load", 10, 1000)  # 0.1 s for 1 %: not yet (under a quarter of the delay)
    p("load", 20, 1000)  # 0.3 s for 2 %: about 15 s in all -> show it now
    assert got == [("load", 20, 1000)]


def _saved(tmp_path, make_server, n=200):
    s = make_server(_table(), checkpointer=ckpt(tmp_path))
    fill(s.localhost_client(), "t", n)
    s.checkpoint()
    return s


def test_restore_reports_progress_to_the_end(tmp_path, make_server):
    s1 = _saved(tmp_path, make_server)
    events = []
    c = ckpt(tmp_path, progress=lambda *a: events.append(a), progress_after_seconds=0)
    s2 = make_server(_table(), checkpointer=c)
    assert state(s2.tables_by_name["t"]) == state(s1.tables_by_name["t"])
    assert events and {e[0] for e in events} == {"load"}
    total = events[-1][2]
    assert events[-1] == ("load", total, total)
    assert all(e[2] == total and e[1] < total for e in events[:-1])  # only the last is "done"
    assert [e[1] for e in events] == sorted(e[1] for e in events)


def test_restore_progress_waits_for_the_delay(tmp_path, make_server, monkeypatch):
    _saved(tmp_path, make_server)
    quiet = []
    make_server(
        _table(),
        checkpointer=ckpt(
            tmp_path, progress=lambda *a: quiet.append(a), progress_after_seconds=3600
        ),
    )
    assert quiet == []
    # The default delay, with a clock on which the restore has been running for 10 s.
    ticks = itertools.count(0.0, 10.0)
    monkeypatch.setattr(
        restore,
        "DelayedProgress",
        functools.partial(store.DelayedProgress, clock=lambda: next(ticks)),
    )
    slow = []
    c = ckpt(tmp_path, progress=lambda *a: slow.append(a))
    assert c.progress_after_seconds == store.PROGRESS_AFTER_S == 1.0
    make_server(_table(), checkpointer=c)
    assert slow and slow[-1][1] == slow[-1][2]


def test_progress_after_seconds_is_validated(tmp_path):
    for bad in (-1, "1", True, float("nan")):
        with pytest.raises(ValueError, match="progress_after_seconds"):
            ckpt(tmp_path, progress_after_seconds=bad)


def test_cli_progress_bar_draws_a_restore(tmp_path, make_server):
    from ostinato import server_cli as cli

    _saved(tmp_path, make_server)
    bar = cli._progress_bar()
    assert bar is not None
    s = make_server(_table(), checkpointer=ckpt(tmp_path, progress=bar, progress_after_seconds=0))
    assert len(s.tables_by_name["t"]) == 198
