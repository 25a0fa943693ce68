"""Property tests: every selector, and the sum tree, against simple reference models.

Selectors work on integer *slots*. The models here are plain dicts; hypothesis drives random
insert / update / delete / sample / clear sequences (with slots far beyond the selectors'
initial capacities, so growth is exercised too) and checks each answer against the model.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from ostinato.core import Fifo, HeapSelector, Lifo, MaxHeap, MinHeap, Prioritized, SumTree, Uniform

# -- strategies ------------------------------------------------------------------------------------

# Mostly small slots (dense, like a table's), sometimes far beyond any initial capacity.
SLOTS = st.one_of(st.integers(0, 40), st.integers(0, 40), st.integers(0, 2600))

# Ties matter for heaps, so small integers are frequent; infinities are legal for heaps.
ANY_PRIORITY = st.one_of(
    st.sampled_from([0.0, -0.0, 1.0, 2.0, 3.0, -1.0]),
    st.floats(allow_nan=False, allow_infinity=True),
)
# Prioritized: non-negative, and in a range where p ** e cannot overflow (see the xfail test
# below for what happens when it does).
PRIORITIZED_PRIORITY = st.one_of(
    st.sampled_from([0.0, 0.0, 1.0, 2.0, 0.5]),
    st.floats(min_value=1e-3, max_value=1e3),
)

# Fixed generation (derandomize) and no example database: runs are reproducible.
STATEFUL = settings(
    max_examples=60,
    stateful_step_count=40,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


# -- reference model -------------------------------------------------------------------------------


class _Model:
    """slot -> (priority, insertion sequence number, last insert-or-update number)."""

    def __init__(self) -> None:
        self.live: dict[int, list[float]] = {}
        self.seq = 0
        self.touch = 0

    def insert(self, slot: int, p: float) -> None:
        self.live[slot] = [p, self.seq, self.touch]
        self.seq += 1
        self.touch += 1

    def update(self, slot: int, p: float) -> None:
        e = self.live[slot]
        e[0] = p
        e[2] = self.touch
        self.touch += 1

    def delete(self, slot: int) -> None:
        del self.live[slot]

    def clear(self) -> None:
        self.live.clear()


def _weight(p: float, e: float) -> float:
    return 0.0 if p == 0 else p**e


def _check_answer(kind: str, exponent: float | None, model: _Model, slot: int, prob: float) -> None:
    live = model.live
    slot = int(slot)
    prob = float(prob)
    assert slot in live, f"{kind} returned slot {slot}, which is not live ({sorted(live)})"
    if kind == "fifo":
        assert slot == min(live, key=lambda s: live[s][1])
        assert prob == 1.0
    elif kind == "lifo":
        assert slot == max(live, key=lambda s: live[s][1])
        assert prob == 1.0
    elif kind == "min_heap":
        assert slot == min(live, key=lambda s: (live[s][0], live[s][2]))
        assert prob == 1.0
    elif kind == "max_heap":
        assert slot == min(live, key=lambda s: (-live[s][0], live[s][2]))
        assert prob == 1.0
    elif kind == "uniform":
        assert prob == pytest.approx(1.0 / len(live), rel=1e-12)
    elif kind == "prioritized":
        assert exponent is not None
        w = {s: _weight(v[0], exponent) for s, v in live.items()}
        total = math.fsum(w.values())
        if total > 0:
            assert w[slot] > 0, f"slot {slot} with weight 0 was sampled (weights {w})"
            assert prob == pytest.approx(w[slot] / total, rel=1e-9)
        else:
            assert prob == pytest.approx(1.0 / len(live), rel=1e-12)
    else:  # pragma: no cover
        raise AssertionError(kind)


# -- the state machine -----------------------------------------------------------------------------


def _machine(kind: str, factory, priorities, exponent: float | None = None):
    class SelectorMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.sel = factory()
            self.model = _Model()
            self.rng = np.random.default_rng(20240611)

        def _free(self, slot: int) -> int:
            while slot in self.model.live:
                slot += 1
            return slot

        @rule(slot=SLOTS, p=priorities)
        def insert(self, slot, p):
            slot = self._free(slot)
            self.sel.insert(slot, p)
            self.model.insert(slot, p)

        @precondition(lambda self: hasattr(self.sel, "insert_many"))
        @rule(slots=st.lists(SLOTS, min_size=1, max_size=6), ps=st.data())
        def insert_many(self, slots, ps):
            chosen: list[int] = []
            for s in slots:
                s = self._free(s)
                while s in chosen:
                    s = self._free(s + 1)
                chosen.append(s)
            prios = [ps.draw(priorities) for _ in chosen]
            self.sel.insert_many(chosen, prios)
            for s, p in zip(chosen, prios):
                self.model.insert(s, p)

        @rule(offset=st.integers(0, 30), n=st.integers(1, 30), ps=st.data())
        def insert_run(self, offset, n, ps):
            """Consecutive new slots, given as a ``range`` (what a table's batch of items in
            consecutive slots hands its selectors)."""
            start = max(self.model.live, default=-1) + 1 + offset
            prios = [ps.draw(priorities) for _ in range(n)]
            self.sel.insert_many(range(start, start + n), prios)
            for s, p in zip(range(start, start + n), prios):
                self.model.insert(s, p)

        @precondition(lambda self: self.model.live)
        @rule(data=st.data(), extra=st.integers(0, 4), as_range=st.booleans())
        def insert_replacing(self, data, extra, as_range):
            """A full table's batch: each of the last ``len(victims)`` inserts is followed by
            the delete of the next victim, whose slot the insert after it reuses."""
            live = sorted(self.model.live)
            victims = data.draw(
                st.lists(st.sampled_from(live), min_size=1, max_size=min(6, len(live)), unique=True)
            )
            top = max(self.model.live) + 1
            fresh = list(range(top, top + extra + 1))
            slots: list[int] | range = fresh + victims[:-1]
            if as_range and len(victims) == 1:
                slots = range(top, top + extra + 1)
            self._replace(slots, [data.draw(priorities) for _ in slots], victims)

        def _replace(self, slots, prios, victims):
            """``insert_replacing`` on the selector and, step by step, on the model."""
            self.sel.insert_replacing(slots, prios, victims)
            a = len(slots) - len(victims)
            for i, (s, p) in enumerate(zip(slots, prios)):
                self.model.insert(s, p)
                if i >= a:
                    self.model.delete(victims[i - a])

        @precondition(lambda self: self.model.live)
        @rule(k=st.integers(1, 12), extra=st.integers(0, 4), ps=st.data())
        def insert_replacing_oldest(self, k, extra, ps):
            """What a full table with a Fifo remover does: its ``k`` oldest items are the
            victims, oldest first (a linked list cuts them off at once), their slots reused."""
            live = self.model.live
            victims = sorted(live, key=lambda s: live[s][1])[:k]
            if hasattr(self.sel, "oldest"):
                assert self.sel.oldest(len(victims)) == victims
            top = max(live) + 1
            slots = list(range(top, top + extra + 1)) + victims[:-1]
            self._replace(slots, [ps.draw(priorities) for _ in slots], victims)

        @precondition(lambda self: self.model.live)
        @rule(data=st.data(), p=priorities)
        def update(self, data, p):
            slot = data.draw(st.sampled_from(sorted(self.model.live)))
            self.sel.update(slot, p)
            self.model.update(slot, p)

        @precondition(lambda self: self.model.live)
        @rule(data=st.data())
        def update_many(self, data):
            live = sorted(self.model.live)
            slots = data.draw(st.lists(st.sampled_from(live), min_size=1, max_size=6))
            prios = [data.draw(priorities) for _ in slots]
            self.sel.update_many(np.array(slots, dtype=np.int64), np.array(prios, dtype=np.float64))
            for s, p in zip(slots, prios):  # repeated slots: the last value wins
                self.model.update(s, p)

        @precondition(lambda self: self.model.live)
        @rule(data=st.data())
        def delete(self, data):
            slot = data.draw(st.sampled_from(sorted(self.model.live)))
            self.sel.delete(slot)
            self.model.delete(slot)

        @precondition(lambda self: self.model.live)
        @rule()
        def sample(self):
            slot, prob = self.sel.sample(self.rng)
            _check_answer(kind, exponent, self.model, slot, prob)

        @precondition(lambda self: self.model.live)
        @rule(k=st.integers(1, 9))
        def sample_many(self, k):
            slots, probs = self.sel.sample_many(k, self.rng)
            assert len(slots) == k and len(probs) == k
            for s, p in zip(slots.tolist(), probs.tolist()):
                _check_answer(kind, exponent, self.model, s, p)

        @rule()
        def clear(self):
            self.sel.clear()
            self.model.clear()

        @invariant()
        def length_matches(self):
            assert self.sel.num_items() == len(self.model.live)

    SelectorMachine.__name__ = f"{kind}_machine"
    return SelectorMachine


TestUniformModel = _machine("uniform", Uniform, ANY_PRIORITY).TestCase
TestFifoModel = _machine("fifo", Fifo, ANY_PRIORITY).TestCase
TestLifoModel = _machine("lifo", Lifo, ANY_PRIORITY).TestCase
TestMinHeapModel = _machine("min_heap", MinHeap, ANY_PRIORITY).TestCase
TestMaxHeapModel = _machine("max_heap", MaxHeap, ANY_PRIORITY).TestCase
TestPrioritized0Model = _machine(
    "prioritized", lambda: Prioritized(0.0), PRIORITIZED_PRIORITY, 0.0
).TestCase
TestPrioritized06Model = _machine(
    "prioritized", lambda: Prioritized(0.6), PRIORITIZED_PRIORITY, 0.6
).TestCase
TestPrioritized1Model = _machine(
    "prioritized", lambda: Prioritized(1.0), PRIORITIZED_PRIORITY, 1.0
).TestCase
TestPrioritized2Model = _machine(
    "prioritized", lambda: Prioritized(2.0), PRIORITIZED_PRIORITY, 2.0
).TestCase

for _case in (
    TestUniformModel,
    TestFifoModel,
    TestLifoModel,
    TestMinHeapModel,
    TestMaxHeapModel,
    TestPrioritized0Model,
    TestPrioritized06Model,
    TestPrioritized1Model,
    TestPrioritized2Model,
):
    _case.settings = STATEFUL
del _case


# -- example-based edge cases ----------------------------------------------------------------------


def test_heap_factories_and_tie_breaking():
    assert isinstance(MinHeap(), HeapSelector) and isinstance(MaxHeap(), HeapSelector)
    rng = np.random.default_rng(0)
    h = MinHeap()
    for slot in (5, 3, 9):
        h.insert(slot, 1.0)
    assert h.sample(rng) == (5, 1.0)  # oldest of the tied
    h.update(5, 1.0)  # touching it makes it the most recent
    assert h.sample(rng)[0] == 3
    h.update(9, 0.5)
    assert h.sample(rng)[0] == 9
    m = MaxHeap()
    for slot in (1, 2):
        m.insert(slot, 7.0)
    m.update(1, 7.0)
    assert m.sample(rng)[0] == 2


def test_prioritized_zero_priority_never_sampled_and_all_zero_is_uniform():
    rng = np.random.default_rng(1)
    sel = Prioritized(0.0)  # exponent 0: every non-zero priority weighs 1, zero still weighs 0
    sel.insert(0, 0.0)
    sel.insert(1, 5.0)
    sel.insert(2, 1e-6)
    slots, probs = sel.sample_many(2000, rng)
    assert set(slots.tolist()) == {1, 2}
    assert np.allclose(probs, 0.5)
    sel.update(1, 0.0)
    sel.update(2, 0.0)
    slots, probs = sel.sample_many(3000, rng)
    assert set(slots.tolist()) == {0, 1, 2}
    assert np.allclose(probs, 1 / 3)


def test_prioritized_rejects_bad_exponent():
    for bad in (-0.5, float("nan"), float("inf"), "x"):
        with pytest.raises(ValueError):
            Prioritized(bad)


def test_prioritized_zero_priority_not_sampled_with_largest_weights():
    """Weights above MAX_WEIGHT are refused, so the weight sum cannot overflow to inf (which
    used to make the sampler fall back to uniform and pick zero-priority items)."""
    from ostinato.core.selectors import MAX_WEIGHT

    rng = np.random.default_rng(2)
    sel = Prioritized(1.0)
    with pytest.raises(ValueError, match="too large"):
        sel.validate_priority(1.5e308)
    with pytest.raises(ValueError, match="too large"):
        Prioritized(2.0).validate_priority(1e200)
    sel.insert(0, MAX_WEIGHT)
    sel.insert(1, MAX_WEIGHT)
    sel.insert(2, 0.0)
    slots, _ = sel.sample_many(300, rng)
    assert 2 not in set(slots.tolist())


# -- the sum tree ----------------------------------------------------------------------------------


def _expected_find(weights: np.ndarray, target: float) -> int:
    """Smallest slot i with cumsum[i] > target (exact with integer-valued weights)."""
    cum = np.cumsum(weights)
    return int(np.searchsorted(cum, target, side="right"))


_TREE_OP = st.one_of(
    st.tuples(st.just("set"), st.integers(0, 300), st.integers(0, 9)),
    st.tuples(
        st.just("set_many"),
        st.lists(st.tuples(st.integers(0, 300), st.integers(0, 9)), min_size=1, max_size=8),
    ),
    st.tuples(st.just("find"), st.floats(0, 1, exclude_max=True), st.booleans()),
    st.tuples(
        st.just("find_many"), st.lists(st.floats(0, 1, exclude_max=True), min_size=1, max_size=40)
    ),
    st.tuples(st.just("clear")),
)


@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(
    capacity=st.integers(1, 20),
    ops=st.lists(_TREE_OP, max_size=40),
    jump=st.sampled_from([0, 1, 2, 3, SumTree.jump_levels]),
)
def test_sum_tree_matches_prefix_sum_model(capacity, ops, jump):
    tree = SumTree(capacity)
    tree.jump_levels = jump  # levels find_many crosses at once and set_many rebuilds whole
    assert tree.capacity >= capacity
    model = np.zeros(0)

    def ensure(n: int) -> None:
        nonlocal model
        if n > len(model):
            model = np.concatenate([model, np.zeros(n - len(model))])

    for op in ops:
        if op[0] == "set":
            _, slot, v = op
            tree.set(slot, float(v))
            ensure(slot + 1)
            model[slot] = v
            assert tree.capacity > slot
        elif op[0] == "set_many":
            pairs = op[1]
            slots = np.array([s for s, _ in pairs], dtype=np.int64)
            vals = np.array([v for _, v in pairs], dtype=np.float64)
            tree.set_many(slots, vals)
            ensure(int(slots.max()) + 1)
            for s, v in pairs:  # last write wins
                model[s] = v
            assert tree.capacity > slots.max()
        elif op[0] == "clear":
            tree.clear()
            model[:] = 0
        elif op[0] == "find":
            total = float(model.sum())
            if total == 0:
                continue
            _, u, integral = op
            # Integer and half-integer targets keep every subtraction in the descent exact.
            target = float(math.floor(u * total)) if integral else math.floor(u * total) + 0.5
            if target >= total:
                continue
            got = tree.find(target)
            assert got == _expected_find(model, target)
            assert model[got] > 0
        elif op[0] == "find_many":
            total = float(model.sum())
            if total == 0:
                continue
            targets = np.array(
                [math.floor(u * total) + (0.5 if i % 2 else 0.0) for i, u in enumerate(op[1])]
            )
            targets = targets[targets < total]
            if len(targets) == 0:
                continue
            got = tree.find_many(targets)
            assert got.tolist() == [_expected_find(model, t) for t in targets.tolist()]
            assert got.tolist() == [tree.find(t) for t in targets.tolist()]
        # After every operation: total and every leaf agree with the model.
        assert tree.total == model.sum()
        if len(model):
            idx = np.arange(len(model))
            assert tree.get_many(idx).tolist() == model.tolist()
            assert [tree.get(i) for i in range(len(model))] == model.tolist()


@settings(max_examples=100, deadline=None, derandomize=True, database=None)
@given(
    weights=st.lists(st.floats(0, 1e6), min_size=1, max_size=200),
    us=st.lists(st.floats(0, 1, exclude_max=True), min_size=1, max_size=40),
    jump=st.sampled_from([0, 3, SumTree.jump_levels]),
)
def test_sum_tree_real_weights_find_lands_in_interval(weights, us, jump):
    """With arbitrary float weights the answer is the right interval up to rounding."""
    w = np.array(weights)
    tree = SumTree(4)
    tree.jump_levels = jump
    tree.set_many(np.arange(len(w)), w)
    total = w.sum()
    assert tree.total == pytest.approx(total, rel=1e-12, abs=1e-300)
    if total == 0:
        return
    cum = np.cumsum(w)
    eps = 1e-9 * total
    targets = np.array(us) * tree.total
    for t, got in zip(targets.tolist(), tree.find_many(targets).tolist()):
        if got >= len(w):  # only possible through rounding at the very end
            assert t >= total - eps
            continue
        lo = cum[got] - w[got]
        assert lo - eps <= t <= cum[got] + eps


def test_sum_tree_grows_and_keeps_values():
    tree = SumTree(2)
    tree.set(0, 1.0)
    tree.set(1, 2.0)
    tree.set(1000, 4.0)  # far beyond capacity
    assert tree.capacity >= 1001
    assert tree.total == 7.0
    assert tree.find(0.5) == 0 and tree.find(1.0) == 1 and tree.find(2.999) == 1
    assert tree.find(3.0) == 1000 and tree.find(6.99) == 1000
    tree.set_many(np.array([5000, 1]), np.array([8.0, 0.0]))
    assert tree.capacity >= 5001
    assert tree.total == 13.0
    assert tree.find_many(np.array([0.0, 1.0, 4.9, 5.0, 12.9])).tolist() == [
        0,
        1000,
        1000,
        5000,
        5000,
    ]


def test_sum_tree_set_many_has_no_cancellation_error():
    tree = SumTree(1024)
    tree.set_many(np.array([0, 1, 2]), np.array([1.0, 1.0, 10.0]))
    tree.set_many(np.array([0]), np.array([1e17]))
    tree.set_many(np.array([0]), np.array([1.0]))
    assert tree.total == 12.0
    assert tree.find(0.5) == 0 and tree.find(1.5) == 1 and tree.find(2.5) == 2


@pytest.mark.parametrize("factory", [Fifo, Lifo])
def test_victims_in_slot_order_but_not_in_list_order_are_unlinked_one_by_one(factory):
    """Consecutive victim slots that start at the list's head but are linked in another order
    are not the oldest run: the list is not cut, each is unlinked."""
    sel = factory()
    order = [0, 8, 1, 2, 3, 4, 5, 6, 7, 9, 10, 11]
    for s in order:
        sel.insert(s, 1.0)
    victims = list(range(8))  # slots 0-7: the head is 0, but 8 (not a victim) comes second
    sel.insert_replacing([12, *victims[:-1]], [1.0] * 8, victims)
    want = [s for s in order if s not in victims] + [12, *victims[:-1]]
    assert sel.ordered_slots() == want
    assert sel.num_items() == len(want)
    assert sel.oldest(len(want)) == want


@pytest.mark.parametrize("factory", [Fifo, Lifo])
def test_the_oldest_run_is_cut_off_at_once(factory):
    sel = factory()
    sel.insert_many(range(20), [1.0] * 20)
    victims = sel.oldest(10)
    assert victims == list(range(10))
    sel.insert_replacing([20, *victims[:-1]], [1.0] * 10, victims)
    assert sel.ordered_slots() == [*range(10, 21), *range(9)]
    assert sel.oldest(3) == [10, 11, 12] and sel.num_items() == 20
    victims = sel.oldest(20)  # every item: the list is cut to nothing, then refilled
    sel.insert_replacing([30, *victims[:-1]], [1.0] * 20, victims)
    assert sel.ordered_slots() == [30, *victims[:-1]] and sel.num_items() == 20
