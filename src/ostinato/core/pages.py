"""New memory faulted in at once rather than page by page.

On Linux the first write to each new 4 KiB page of memory traps into the kernel (a page fault).
Where rows are copied into fresh memory -- a writer's chunk of large rows (Atari frames), a
payload the server keeps -- those traps cost several times the copy itself on a small VM.
``madvise(MADV_POPULATE_WRITE)`` (Linux 5.14+) faults a whole range in with one call. Where it
is unavailable (another OS or interpreter, an older kernel) nothing is done, and the pages fault
in as they are written, as before.
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


def _load_madvise() -> Any:
    if sys.implementation.name != "cpython" or not sys.platform.startswith("linux"):
        return None
    try:
        madvise = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):  # pragma: no cover
        return None
    madvise.restype = ctypes.c_int
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    return madvise


_madvise = _load_madvise()
_enabled = _madvise is not None


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


def empty(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """``np.empty(shape, dtype)``, its pages faulted in at once when it is between
    :data:`MIN_BYTES` and :data:`MAX_EMPTY_BYTES` (numeric dtypes: object arrays are filled
    with references at creation anyway)."""
    a = np.empty(shape, dtype)
    if MIN_BYTES <= a.nbytes <= MAX_EMPTY_BYTES and not a.dtype.hasobject:
        populate(a.ctypes.data, a.nbytes)
    return a
