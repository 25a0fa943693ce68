"""The one-launch row moves of CUDA storages (rows.py), run through Triton's interpreter on
the CPU, against torch's own gathers and copies."""

import pytest
from _device_helpers import NEEDS_TRITON

torch = pytest.importorskip("torch")

from ostinato.device.ring import RingCursor  # noqa: E402

pytestmark = NEEDS_TRITON


def _columns(capacity):
    gen = torch.Generator().manual_seed(0)
    return [
        torch.randint(0, 255, (capacity, 3, 4), generator=gen).to(torch.uint8),
        torch.randint(-9, 9, (capacity,), generator=gen).to(torch.int32),
        torch.randn(capacity, 2, generator=gen, dtype=torch.float64),
        torch.rand(capacity, generator=gen) > 0.5,
    ]


def test_gather_matches_index_select():
    from ostinato.device.torch.rows import RowKernels

    columns = _columns(50)
    rows = RowKernels(columns, torch.device("cpu"))
    slots = torch.tensor([0, 49, 7, 7, 23, 1])
    for got, column in zip(rows.gather(slots), columns):
        assert got.dtype == column.dtype and torch.equal(got, column.index_select(0, slots))
    assert [g.shape[0] for g in rows.gather(torch.zeros(0, dtype=torch.long))] == [0] * 4


@pytest.mark.parametrize(("before", "batch"), [(0, 5), (47, 6), (3, 120), (10, 1)])
def test_write_matches_slicing(before, batch):
    from ostinato.device.torch.rows import RowKernels

    columns = _columns(50)
    expect = [c.clone() for c in columns]
    rows = RowKernels(columns, torch.device("cpu"))
    ring = RingCursor(50)
    ring.advance(before)
    # Rows that differ from each other and from what the columns hold.
    values = [~c if c.dtype == torch.bool else c + 1 for c in _columns(batch)]
    segments = ring.advance(batch)
    assert rows.write(segments, values)
    for seg in segments:
        for e, v in zip(expect, values):
            e[seg.slot : seg.slot + seg.length] = v[seg.src : seg.src + seg.length]
    for got, want in zip(columns, expect):
        assert torch.equal(got, want)


def test_write_refuses_values_it_cannot_move():
    from ostinato.device.torch.rows import RowKernels

    columns = _columns(8)
    rows = RowKernels(columns, torch.device("cpu"))
    values = [torch.zeros(3, 4, 2, dtype=torch.uint8)[..., 0], torch.tensor(1, dtype=torch.int32),
              torch.zeros(2, dtype=torch.float64), torch.tensor(True)]
    before = [c.clone() for c in columns]
    assert not rows.write(RingCursor(8).advance(1), values)  # a strided view
    assert all(torch.equal(a, b) for a, b in zip(columns, before))
