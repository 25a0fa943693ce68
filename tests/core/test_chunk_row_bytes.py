"""``chunk_row_bytes``: a chunk's rows as raw little-endian C-order bytes, whatever the array's
byte order and strides (what a sample reply sends for rows written in the server's process)."""

from __future__ import annotations

import numpy as np
import pytest

from ostinato.core.chunks import Chunk, chunk_row_bytes


@pytest.mark.parametrize("dtype", ["<f4", ">f4", "<i8", ">i8", "u1", "?", "<c8", ">u2"])
@pytest.mark.parametrize("layout", ["contiguous", "strided", "fortran"])
def test_rows_are_little_endian_c_order(dtype, layout):
    base = np.arange(10 * 6).reshape(10, 6)
    rows = (base % 2 == 0) if dtype == "?" else base.astype(dtype)
    if layout == "strided":
        rows = rows[:, ::2]
    elif layout == "fortran":
        rows = np.asfortranarray(rows)
    chunk = Chunk(1, rows)
    want = np.ascontiguousarray(rows[2:7]).astype(rows.dtype.newbyteorder("<")).tobytes()
    assert chunk_row_bytes(chunk, 2, 7) == want
    back = np.frombuffer(chunk_row_bytes(chunk, 2, 7), rows.dtype.newbyteorder("<"))
    np.testing.assert_array_equal(back.reshape(rows[2:7].shape), rows[2:7])
