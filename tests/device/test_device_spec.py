"""Column specs, argument checks and the host ring cursor (no framework needed)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ostinato.device.ring import RingCursor
from ostinato.device.spec import dtype_name, make_specs, split_batch


@pytest.mark.parametrize(
    ("given_dtype", "name"),
    [
        ("float32", "float32"),
        ("Float32", "float32"),  # MindSpore spelling
        ("UInt8", "uint8"),
        (np.int64, "int64"),
        (np.dtype("bool"), "bool"),
        ("bfloat16", "bfloat16"),
        (float, "float64"),
    ],
)
def test_dtype_names(given_dtype, name):
    assert dtype_name(given_dtype) == name


def test_unsupported_dtype_is_named():
    with pytest.raises(TypeError, match=r"types\[1\]: dtype \('complex64'\) is not supported"):
        make_specs([(), ()], ["float32", "complex64"])


@pytest.mark.parametrize(
    ("shapes", "types", "error", "match"),
    [
        ([(2,), (-1,)], ["float32", "int32"], ValueError, r"shapes\[1\] \(\(-1,\)\) must be"),
        ([(2,)], ["float32", "int32"], ValueError, "same length, got 1 and 2"),
        ([], [], ValueError, "at least one column"),
        ("abc", ["float32"], TypeError, "shapes .* must be a list or tuple"),
    ],
)
def test_bad_specs_quote_the_value(shapes, types, error, match):
    with pytest.raises(error, match=match):
        make_specs(shapes, types)


def test_split_batch_names_the_column():
    spec = make_specs([(3,), (4, 2)], ["float32", "int64"], names=["obs", "act"])[1]
    assert split_batch(spec, (4, 2)) is None
    assert split_batch(spec, (7, 4, 2)) == 7
    with pytest.raises(ValueError, match=r"column 1 \('act'\): shape \(4, 3\)"):
        split_batch(spec, (4, 3))


def test_int_shape_means_vector():
    assert make_specs([5], ["int8"])[0].shape == (5,)


class ListModel:
    """What a FIFO ring of ``capacity`` rows must hold: the last ``capacity`` rows."""

    def __init__(self, capacity):
        self.capacity, self.rows, self.next = capacity, [], 0

    def insert(self, n):
        self.rows.extend(range(self.next, self.next + n))
        self.next += n
        self.rows = self.rows[-self.capacity :]


@settings(max_examples=300, deadline=None)
@given(
    capacity=st.integers(1, 9),
    ops=st.lists(st.one_of(st.integers(0, 25), st.just("reset")), max_size=30),
)
def test_ring_cursor_matches_list_model(capacity, ops):
    ring, model = RingCursor(capacity), ListModel(capacity)
    slots = [None] * capacity  # what each physical slot holds, written via the segments
    for op in ops:
        if op == "reset":
            ring.reset()
            model.rows = []
            continue
        first = model.next
        for seg in ring.advance(op):
            for j in range(seg.length):
                slots[seg.slot + j] = first + seg.src + j
        model.insert(op)
        assert ring.size == len(model.rows)
        for i in range(-ring.size - 2, ring.size + 2):
            if -ring.size <= i < ring.size:
                assert slots[ring.slot_of(i)] == model.rows[i]
                assert ring.id_of(i) == model.rows[i]
            else:
                with pytest.raises(IndexError, match="out of range"):
                    ring.slot_of(i)


def test_ring_state_round_trip():
    ring = RingCursor(4)
    ring.advance(6)
    other = RingCursor(4)
    other.load_state_dict(ring.state_dict())
    assert (other.total, other.size) == (6, 4)
    with pytest.raises(ValueError, match="capacity"):
        RingCursor(5).load_state_dict(ring.state_dict())
