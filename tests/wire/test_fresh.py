"""wire.prefaulted_copy: copies into new bytes objects (pre-faulted, GIL released) equal plain
slices."""

from __future__ import annotations

import mmap
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ostinato.core import items as items_lib
from ostinato.core import pages
from ostinato.wire import codec, prefaulted_copy

SRC = (
    np.random.default_rng(0)
    .integers(0, 256, size=3 * prefaulted_copy.MIN_BYTES + 12345, dtype=np.uint8)
    .tobytes()
)


@settings(max_examples=60, deadline=None)
@given(offset=st.integers(0, len(SRC)), n=st.integers(0, len(SRC)))
def test_copy_out_equals_slice(offset: int, n: int) -> None:
    n = min(n, len(SRC) - offset)
    out = prefaulted_copy.copy_out(SRC, prefaulted_copy.address_of(SRC), offset, n)
    assert type(out) is bytes
    assert out == SRC[offset : offset + n]


def test_large_unaligned_copies_from_a_mapping() -> None:
    mm = mmap.mmap(-1, 4 * prefaulted_copy.MIN_BYTES)
    mm[:] = os.urandom(len(mm))
    base = prefaulted_copy.address_of(mm)
    for off, n in [
        (1, prefaulted_copy.MIN_BYTES),
        (4095, 2 * prefaulted_copy.MIN_BYTES + 7),
        (0, len(mm)),
    ]:
        assert prefaulted_copy.copy_out(mm, base, off, n) == mm[off : off + n]
    mm.close()


def test_fallback_without_the_c_api(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prefaulted_copy, "_API", None)
    assert (
        prefaulted_copy.copy_out(SRC, 0, 10, 2 * prefaulted_copy.MIN_BYTES)
        == SRC[10 : 10 + 2 * prefaulted_copy.MIN_BYTES]
    )


def test_kernel_without_populate_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    if not pages.available():
        pytest.skip("no madvise here")
    monkeypatch.setattr(pages, "_madvise", lambda *a: -1)
    monkeypatch.setattr(pages, "_enabled", True)  # both restored after the test
    n = 2 * prefaulted_copy.MIN_BYTES
    assert prefaulted_copy.copy_out(SRC, prefaulted_copy.address_of(SRC), 3, n) == SRC[3 : 3 + n]
    assert not pages.available()  # not tried again


def test_framed_messages_with_large_and_small_payloads_round_trip() -> None:
    big = os.urandom(prefaulted_copy.MIN_BYTES + 3)
    small = b"xyz"
    body = {"seg": [{"k": 1, "b": big}, {"k": 2, "b": small}, {"k": 3, "b": b""}], "i": [1]}
    raw = codec.pack_framed(body)
    for data in (raw, bytearray(raw), memoryview(raw)):
        out = codec.unpack_framed(data)
        assert [s["b"] for s in out["seg"]] == [big, small, b""]
        assert all(type(s["b"]) is bytes for s in out["seg"])


def test_intern_squeeze_shares_tuples_and_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    a = items_lib.intern_squeeze([True, False])
    assert a == (True, False) and items_lib.intern_squeeze((1, 0)) is a
    assert items_lib.intern_squeeze([[1], []]) == (True, False)  # unhashable: truth values
    assert items_lib.intern_squeeze([2, 0]) == (True, False)
    monkeypatch.setattr(items_lib, "SQUEEZE_CACHE", {})
    monkeypatch.setattr(items_lib, "_SQUEEZE_CACHE_MAX", 2)
    for k in range(10):  # a peer sending ever new flag tuples cannot grow the cache
        flags = [bool(k >> i & 1) for i in range(4)]
        assert items_lib.intern_squeeze(flags) == tuple(flags)
    assert len(items_lib.SQUEEZE_CACHE) == 2
