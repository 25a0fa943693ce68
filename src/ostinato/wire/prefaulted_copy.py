"""Copies large payloads into new ``bytes`` objects, cheaply.

A server stores what writers send: every payload it keeps is new memory, and on Linux the
first write to each new 4 KiB page traps into the kernel (a page fault). Copying 140 MB of rows
this way costs about 70 ms on a small VM, several times the copy itself. :func:`copy_out`
allocates the ``bytes`` object uninitialised, asks the kernel to fault all its pages in at once
(``madvise(MADV_POPULATE_WRITE)``, Linux 5.14+), then copies with the GIL released, so that
other threads run meanwhile. Where any of that is unavailable (another OS or interpreter, an
older kernel) it falls back to an ordinary slice copy with the same result.
"""

from __future__ import annotations

import ctypes
import os
import sys
from typing import Any

import numpy as np

from ostinato.core import pages

#: Payloads smaller than this are copied by slicing (the set-up would cost more than it saves).
MIN_BYTES = pages.MIN_BYTES


def _load() -> tuple[Any, Any] | None:
    if sys.implementation.name != "cpython":
        return None
    try:
        new = ctypes.pythonapi.PyBytes_FromStringAndSize
        new.restype = ctypes.py_object
        new.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t]
        as_string = ctypes.pythonapi.PyBytes_AsString
        as_string.restype = ctypes.c_void_p
        as_string.argtypes = [ctypes.py_object]
    except AttributeError:  # pragma: no cover - CPython always has these
        return None
    return new, as_string


_API = _load()


def address_of(buf: Any) -> int:
    """The address of a contiguous buffer's first byte (the buffer must outlive its use)."""
    return np.frombuffer(buf, dtype=np.uint8).ctypes.data


def copy_out(buf: Any, base: int, offset: int, n: int) -> bytes:
    """``bytes(buf[offset:offset + n])``, where ``base`` is ``address_of(buf)``.

    The caller has checked that ``[offset, offset + n)`` lies inside ``buf``.
    """
    if _API is None or n < MIN_BYTES:
        return bytes(memoryview(buf)[offset : offset + n])
    new, as_string = _API
    out = new(None, n)  # uninitialised; nobody else can see it before it is returned
    dst = as_string(out)
    pages.populate(dst, n)
    ctypes.memmove(dst, base + offset, n)  # a foreign call: the GIL is released meanwhile
    return out


def pread_out(fd: int, offset: int, n: int) -> bytes:
    """``n`` bytes of the file ``fd`` at ``offset``, read with ``pread`` (the GIL is released
    during the read; the kernel copies straight into the new ``bytes`` object, which measured
    faster than populating it first as :func:`copy_out` does).

    Reading a file through a descriptor, unlike through a mapping, cannot fault the process:
    if the file is shorter than ``offset + n`` (another process truncated it) the read comes
    back short and this raises ``EOFError`` naming how many bytes were there.
    """
    out = os.pread(fd, n, offset)
    if len(out) == n:
        return out
    parts = [out]
    got = len(out)
    while got < n:  # a short read: the end of the file, or a read capped by the kernel
        b = os.pread(fd, n - got, offset + got)
        if not b:
            raise EOFError(f"file ended after {got} of {n} bytes at offset {offset}")
        parts.append(b)
        got += len(b)
    return b"".join(parts)
