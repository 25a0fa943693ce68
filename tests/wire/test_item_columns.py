"""How the server reads a single item's columns (``InsertSession._item_columns``): the one-slice
fast path and the general path must accept and refuse exactly the same items."""

from __future__ import annotations

import re

import numpy as np
import pytest

import ostinato as reverb
from _helpers import uniform_table
from ostinato.core import items as items_lib
from ostinato.errors import DecodeError
from ostinato.wire import codec
from ostinato.wire.inserts import InsertSession, StreamStats

A, B = 11, 22  # chunk keys: A holds 3 rows of float32[2], B 3 rows of int32


@pytest.fixture
def session():
    table = uniform_table()
    server = reverb.Server([table])
    s = InsertSession({"t": table}.__getitem__, 1 << 24, False, StreamStats())
    segs = [
        codec.make_segment(A, 1, 0, np.arange(6, dtype=np.float32).reshape(3, 2), False),
        codec.make_segment(B, 1, 0, np.arange(3, dtype=np.int32), False),
    ]
    first = codec.pack_framed({"seg": segs, "t": ["t"], "i": [], "keep": [A, B]})
    assert list(s.handle(first, lambda: True)) == []
    yield s, table
    s.close()
    server.stop()


def _insert(session, items):
    s, _ = session
    msg = codec.pack_framed({"seg": [], "t": ["t"], "i": items, "keep": [A, B]})
    return sum(n for n in s.handle(msg, lambda: True) if n)


@pytest.mark.parametrize(
    "cols, sq",
    [
        ([[A, 2, 1], [B, 0, 1]], [True, True]),  # the fast path
        ([[A, 0, 3], [B, 1, 2]], [False, False]),  # several rows, not squeezed
        ([[A, 0, 1, A, 2, 1], [B, 0, 1]], [False, True]),  # a column of two slices
    ],
)
def test_valid_items_are_stored_with_their_slices(session, cols, sq):
    assert _insert(session, [[0, 7, 1.0, cols, sq]]) == 1
    entry = session[1].get(7)
    got = [[(c.key, o, n) for c, o, n in col] for col in items_lib.columns(entry["trajectory"])]
    want = [[tuple(col[i : i + 3]) for i in range(0, len(col), 3)] for col in cols]
    assert got == want and entry["squeeze"] == tuple(sq)


@pytest.mark.parametrize(
    "cols, sq, message",
    [
        ([[A, 0, 2], [B, 0, 1]], [True, True], "squeezed column must hold exactly one row"),
        ([[A, 3, 1], [B, 0, 1]], [True, True], "rows [3, 3+1) of chunk 11"),
        ([[A, -1, 1], [B, 0, 1]], [True, True], "rows [-1, -1+1)"),
        ([[A, 0, 0], [B, 0, 1]], [False, True], "rows [0, 0+0)"),
        ([[99, 0, 1], [B, 0, 1]], [True, True], "chunk 99, which this stream did not send"),
        ([[A, 0.0, 1], [B, 0, 1]], [True, True], "rows [0.0, 0.0+1)"),
        # msgpack's true is a bool, and bool is an int subclass: refused all the same
        ([[A, 0, True], [B, 0, 1]], [False, True], "rows [0, 0+True)"),
        ([[A, True, 1], [B, 0, 1]], [False, True], "rows [True, True+1)"),
        ([[A, 0, 1], [True, 0, 1]], [True, True], "chunk True, which this stream did not send"),
        ([[A, 0, 1], [B, 0]], [True, True], "flat list of (chunk key, offset, length)"),
        ([[A, 0, 1]], [True, True], "one squeeze flag per column"),
        ([], [], "non-empty list of columns"),
    ],
)
def test_bad_items_are_refused_and_nothing_is_stored(session, cols, sq, message):
    with pytest.raises(DecodeError, match=re.escape(message)):
        _insert(session, [[0, 1, 1.0, [[A, 0, 1], [B, 0, 1]], [True, True]], [0, 7, 1.0, cols, sq]])
    assert len(session[1]) == 0  # the good item before it was not stored either
