"""core.pages: new arrays whose pages are faulted in at once (``MADV_POPULATE_WRITE``)."""

from __future__ import annotations

import ctypes
import mmap
import sys

import numpy as np
import pytest

from ostinato.core import pages


@pytest.mark.parametrize(
    "shape, dtype",
    [((0, 84, 84, 4), np.uint8), ((4, 84, 84, 4), np.uint8), ((3, 7), ">f8"), ((40, 8192), "<i4")],
)
def test_empty_is_a_writable_array_of_the_shape_and_dtype(shape, dtype):
    a = pages.empty(shape, dtype)
    assert a.shape == shape and a.dtype == np.dtype(dtype) and a.flags.writeable
    a[...] = 7
    assert (a == 7).all()


def test_object_arrays_are_left_alone():
    a = pages.empty((100_000,), object)
    assert a.dtype == object and a[0] is None


def _resident_pages(mm: mmap.mmap) -> int:
    """How many pages of an anonymous mapping are in memory (``mincore``)."""
    libc = ctypes.CDLL(None, use_errno=True)
    n = len(mm) // pages.PAGE
    vec = (ctypes.c_ubyte * n)()
    addr = ctypes.addressof(ctypes.c_char.from_buffer(mm))
    assert libc.mincore(ctypes.c_void_p(addr), ctypes.c_size_t(len(mm)), vec) == 0
    return sum(v & 1 for v in vec)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="madvise populate is Linux's")
def test_populate_makes_fresh_pages_resident_before_any_write():
    if not pages.available():
        pytest.skip("this kernel does not populate (older than 5.14)")
    mm = mmap.mmap(-1, 64 * pages.PAGE)  # fresh anonymous memory: nothing resident yet
    try:
        assert _resident_pages(mm) == 0
        addr = ctypes.addressof(ctypes.c_char.from_buffer(mm))
        pages.populate(addr + 100, 10 * pages.PAGE)  # whole pages 1-9 of the range
        assert _resident_pages(mm) == 9
        pages.populate(addr, len(mm))
        assert _resident_pages(mm) == 64
    finally:
        mm.close()


def test_a_kernel_that_refuses_is_not_asked_again(monkeypatch):
    calls = []
    monkeypatch.setattr(pages, "_madvise", lambda *a: calls.append(a) or -1)
    monkeypatch.setattr(pages, "_enabled", True)
    monkeypatch.setattr(pages, "resident", lambda address: False)  # fresh memory each time
    pages.empty((pages.MIN_BYTES * 2,), np.uint8)
    pages.empty((pages.MIN_BYTES * 2,), np.uint8)
    assert len(calls) == 1 and not pages.available()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mincore is Linux's")
def test_resident_tells_fresh_memory_from_memory_in_use():
    mm = mmap.mmap(-1, 4 * pages.PAGE)
    try:
        addr = ctypes.addressof(ctypes.c_char.from_buffer(mm))
        assert not pages.resident(addr) and not pages.resident(addr + 3 * pages.PAGE + 5)
        mm[3 * pages.PAGE] = 1
        assert pages.resident(addr + 3 * pages.PAGE + 5) and not pages.resident(addr)
    finally:
        mm.close()


def test_memory_already_in_use_is_not_populated_again(monkeypatch):
    """Populating resident memory costs more than the copy it prepares: only fresh memory is
    populated."""
    calls = []
    real = pages.populate
    monkeypatch.setattr(pages, "populate", lambda a, n: calls.append(n) or real(a, n))
    monkeypatch.setattr(pages, "resident", lambda address: True)
    a = pages.empty((4, 84, 84, 4), np.uint8)
    assert calls == [] and a.shape == (4, 84, 84, 4)
    monkeypatch.setattr(pages, "resident", lambda address: False)
    pages.empty((4, 84, 84, 4), np.uint8)
    assert calls == ([4 * 84 * 84 * 4] if pages.available() else [])
