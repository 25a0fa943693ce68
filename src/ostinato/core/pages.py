"""New memory faulted in at once rather than page by page.

On Linux the first write to each new 4 KiB page of memory traps into the kernel (a page fault).
Where rows are copied into fresh memory -- a writer's chunk of large rows (Atari frames), a
payload the server keeps -- those traps cost several times the copy itself on a small VM.
``madvise(MADV_POPULATE_WRITE)`` (Linux 5.14+) faults a whole range in with one call. Where it
is unavailable (another OS or interpreter, an older kernel) nothing is done, and the pages fault
in as they are written, as before.

Memory the allocator hands out again (freed by an earlier chunk: a networked writer's chunks
once they are sent) is already in memory, and populating it anyway costs more than the copy
(about 8 µs per 113 KB on a small VM): :func:`empty` asks the kernel first (``mincore`` on a
page in the middle of the array, about 3 µs with the call) and populates only memory that is
not. (Not the first or the last page: the allocator writes its own headers just before and
just after an allocation, so those pages are in memory even when the rest is fresh.)
"""

from __future__ import annotations

import ctypes
import mmap
import sys
from typing import Any

import numpy as np

#: Buffers smaller than this are left alone (the call would cost more than it saves).
MIN_BYTES = 64 * 1024
#: :func:`empty` populates arrays up to this size only: the pages of a chunk's rows that are
#: never written (an episode ending mid-chunk) are then resident too, at most this much per
#: chunk being filled.
MAX_EMPTY_BYTES = 1 << 20
PAGE = mmap.PAGESIZE
_MADV_POPULATE_WRITE = 23


def _load(name: str, *argtypes: Any, keep_gil: bool = False) -> Any:
    """libc's ``name`` (returning int) with ``argtypes``, or None off Linux/CPython; with
    ``keep_gil`` the call does not release the GIL (for calls of a few microseconds, where
    handing the GIL to another thread and waiting to get it back costs more)."""
    if sys.implementation.name != "cpython" or not sys.platform.startswith("linux"):
        return None
    try:
        lib = ctypes.PyDLL(None, use_errno=True) if keep_gil else ctypes.CDLL(None, use_errno=True)
        fn = getattr(lib, name)
    except (OSError, AttributeError):  # pragma: no cover
        return None
    fn.restype = ctypes.c_int
    fn.argtypes = list(argtypes)
    return fn


_madvise = _load("madvise", ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
_mincore = _load("mincore", ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, keep_gil=True)
_enabled = _madvise is not None
#: mincore's answer for one page (bit 0: resident).
_vec = ctypes.create_string_buffer(1)  # the GIL is held during the call: one buffer will do
_address = ctypes.addressof
_as_chars = ctypes.c_char.from_buffer


def available() -> bool:
    """Whether :func:`populate` does anything on this machine (so far)."""
    return _enabled


def populate(address: int, nbytes: int) -> None:
    """Faults in the whole pages of ``[address, address + nbytes)`` of this process's writable
    memory with one call (pages it only partly covers fault in as usual)."""
    global _enabled
    if not _enabled:
        return
    start = (address + PAGE - 1) & -PAGE
    stop = (address + nbytes) & -PAGE
    if stop > start and _madvise(start, stop - start, _MADV_POPULATE_WRITE) != 0:
        _enabled = False  # an older kernel (EINVAL): pages fault in as they are written


def resident(address: int) -> bool:
    """Whether the page holding ``address`` (of this process's memory) is in memory; False
    where the kernel cannot say."""
    if _mincore is None:
        return False
    return _mincore(address & -PAGE, PAGE, _vec) == 0 and bool(_vec.raw[0] & 1)


def empty(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """``np.empty(shape, dtype)``, its pages faulted in at once when it is between
    :data:`MIN_BYTES` and :data:`MAX_EMPTY_BYTES` (numeric dtypes: object arrays are filled
    with references at creation anyway) and the page in its middle is not in memory yet
    (memory the allocator gives out again is resident: nothing to fault in)."""
    a = np.empty(shape, dtype)
    nbytes = a.nbytes
    if _enabled and MIN_BYTES <= nbytes <= MAX_EMPTY_BYTES and not a.dtype.hasobject:
        address = _address(_as_chars(a))  # type: ignore[arg-type]  # ndarray is a buffer
        if not resident(address + nbytes // 2):
            populate(address, nbytes)
    return a
