"""Where each item's rows live, as numbers, so that a sampled batch is gathered with ``take``.

A writer carves the chunks of a column of small rows out of larger *blocks*, registered here
under a process-wide integer code (:func:`register_block`); such a chunk's
:attr:`~ostinato.core.chunks.Chunk.origin` is ``(block code, first row)``. For every item whose
columns are each one slice of such a chunk, :class:`Locations` records per column the block
code, the item's first row in the block and its number of rows, in one flat ``int32`` array
indexed by slot. Sampling reads the locations of all sampled slots with one fancy index, and
batch assembly copies each column's rows out of its block(s) with one ``take`` -- no
per-item Python work. Items that do not fit (nested slices, chunks without an origin, another
number of columns than the table's first located item) are not located; batch assembly falls
back to reading their chunks.

Recording a location costs one call with no loop (:func:`_adder` generates it per number of
columns, as ``collections.namedtuple`` generates its classes), so that inserting stays cheap.
"""

from __future__ import annotations

import array
import itertools
import struct
import weakref
from collections.abc import Callable, Sequence
from operator import sub
from typing import Any, NamedTuple

import numpy as np

from ostinato.core.chunks import two_runs
from ostinato.core.items import is_flat

# -- blocks, process-wide --------------------------------------------------------------------------
#: Codes fit the int32 location arrays; past this many blocks new ones are not registered
#: (their chunks are simply not located).
_MAX_CODE = 2**31 - 1
_codes = itertools.count(1)
_blocks: dict[int, weakref.ref[np.ndarray]] = {}


def register_block(block: np.ndarray) -> int | None:
    """A code for ``block`` (held weakly: the chunks carved out of it keep it alive), or None
    when no more codes are left."""
    code = next(_codes)
    if code > _MAX_CODE:
        return None

    def gone(_: object, code: int = code) -> None:
        _blocks.pop(code, None)

    _blocks[code] = weakref.ref(block, gone)
    return code


def registered_block(code: int) -> np.ndarray | None:
    """The block registered under ``code``, while it lives."""
    ref = _blocks.get(code)
    return None if ref is None else ref()


# -- per table -------------------------------------------------------------------------------------
class LocatedCall(NamedTuple):
    """The items of one writer call as a vector writer knows them (a call creates an item per
    selected environment; see :mod:`ostinato.writers.vector_rows`): item ``i``'s column ``j``
    is rows ``[firsts[j, i], firsts[j, i] + lengths[j])`` of the block registered under
    ``codes[j]``, and of the chunk ``chunks[j][i]`` (one slice per column). The items' keys
    are drawn by :func:`~ostinato.core.keys.new_keys`, so they are distinct (a table does not
    check)."""

    firsts: np.ndarray  # (columns, items)
    codes: tuple[int, ...]
    lengths: tuple[int, ...]
    chunks: tuple[Sequence[Any], ...]  # per column, each item's chunk


class Located:
    """The locations of a sampled batch: ``rows[i]`` is ``[1, code, first row, length, ...]``
    (one triple per column) for item ``i``. The blocks are looked up by code when the batch is
    assembled: the batch's trajectories hold their chunks, whose views hold the blocks."""

    __slots__ = ("rows",)

    def __init__(self, rows: np.ndarray):
        self.rows = rows


_ADDERS: dict[int, Callable[[array.array, int, Any], None]] = {}


def _adder(ncols: int) -> Callable[[array.array, int, Any], None]:
    """``add(a, offset, traj)``: writes the location of a flat item of ``ncols`` columns at
    byte ``offset`` of ``a``, or marks it not located if a chunk has no origin. Generated with
    the columns unrolled (no loop: recording a location is on every insert's path)."""
    fn = _ADDERS.get(ncols)
    if fn is None:
        cols = range(ncols)
        unpack = ", ".join(f"c{i}, o{i}, l{i}" for i in cols)
        origins = "; ".join(f"g{i} = c{i}.origin" for i in cols)
        missing = " or ".join(f"g{i} is None" for i in cols)
        values = ", ".join(f"g{i}[0], g{i}[1] + o{i}, l{i}" for i in cols)
        src = (
            f"def add(a, offset, traj):\n"
            f"    {unpack}, = traj\n"
            f"    {origins}\n"
            f"    if {missing}:\n"
            f"        a[offset >> 2] = 0\n"
            f"        return\n"
            f"    _pack(a, offset, 1, {values})\n"
            f"\n"
            f"def add_many(a, offsets, trajs):\n"
            f"    for offset, traj in zip(offsets, trajs):\n"
            f"        {unpack}, = traj\n"
            f"        {origins}\n"
            f"        if {missing}:\n"
            f"            a[offset >> 2] = 0\n"
            f"            continue\n"
            f"        _pack(a, offset, 1, {values})\n"
        )
        # One C call writes the row in place (no tuple or array built: ~0.2 instead of ~0.6 us).
        scope: dict[str, Any] = {"_pack": struct.Struct(f"={1 + 3 * ncols}i").pack_into}
        exec(compile(src, f"<ostinato.core.locations adder of {ncols} columns>", "exec"), scope)
        fn = _ADDERS[ncols] = scope["add"]
        _MANY_ADDERS[ncols] = scope["add_many"]
    return fn


#: ``add_many(a, offsets, trajs)``: :func:`_adder`'s function for many items (one loop, no
#: call per item), by number of columns.
_MANY_ADDERS: dict[int, Callable[[array.array, list[int], Any], None]] = {}


def _contiguous(traj: Any) -> list[int] | None:
    """The location of an item whose columns may span several chunks (one per slice): each
    column's slices must be consecutive rows of one block -- as a column's chunks are, when a
    writer carved them one after the other. None otherwise."""
    out = [1]
    for col in traj:
        code = first = end = None
        for chunk, off, length in col:
            origin = chunk.origin
            if origin is None:
                return None
            start = origin[1] + off
            if code is None:
                code, first = origin[0], start
            elif origin[0] != code or start != end:
                return None
            end = start + length
        out += (code, first, end - first)  # type: ignore[operator, arg-type]
    return out


def _not_set(a: array.array, offset: int, traj: Any) -> None:
    raise AssertionError("no located item yet")


def _not_set_many(a: array.array, offsets: list[int], trajs: Any) -> None:
    raise AssertionError("no located item yet")


def _split(rows: Any, k: int) -> tuple[Any, Any]:
    """Rows (a slice or an array) cut after the first ``k``."""
    if type(rows) is slice:
        return slice(rows.start, rows.start + k), slice(rows.start + k, rows.stop)
    return rows[:k], rows[k:]


class Locations:
    """Per slot: where the item's rows are (see the module docstring)."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self.ncols = 0  # columns of the items located (0: none seen yet)
        self._stride = 0
        #: A flat item's length (``3 * ncols``) once the shape is known, else -1; for a flat
        #: item (``traj[0]`` a :class:`Chunk`) of that length, ``add_flat(array, slot *
        #: stride_bytes, traj)`` is what :meth:`add` does, without the checks.
        self.flat_len = -1
        self.stride_bytes = 0
        self.add_flat: Callable[[array.array, int, Any], None] = _not_set
        #: ``add_flat_many(array, offsets, trajs)``: :attr:`add_flat` for many items.
        self.add_flat_many: Callable[[array.array, list[int], Any], None] = _not_set_many
        self.array = array.array("i")
        self._view: np.ndarray | None = None

    def _setup(self, ncols: int) -> None:
        self.ncols = ncols
        self._stride = 1 + 3 * ncols
        self.flat_len = 3 * ncols
        self.stride_bytes = 4 * self._stride
        self.array = array.array("i", bytes(4 * self._stride * self._capacity))
        self._view = np.frombuffer(self.array, dtype=np.int32).reshape(self._capacity, self._stride)
        self.add_flat = _adder(ncols)
        self.add_flat_many = _MANY_ADDERS[ncols]

    def grow(self, capacity: int) -> None:
        """The slots now go up to ``capacity`` (new slots hold no location)."""
        if self._stride:  # a new array: the numpy view of the old one pins its size
            a = array.array("i", self.array)
            a.extend(array.array("i", bytes(4 * self._stride * (capacity - self._capacity))))
            self.array = a
            self._view = np.frombuffer(a, dtype=np.int32).reshape(capacity, self._stride)
        self._capacity = capacity

    def add(self, slot: int, traj: Any) -> None:
        """Records where the item in ``slot`` has its rows, if it can be located."""
        if is_flat(traj):  # one slice per column
            if len(traj) == self.flat_len:
                self.add_flat(self.array, slot * self.stride_bytes, traj)
                return
            if not self.ncols and traj[0].origin is not None:
                self._setup(len(traj) // 3)  # the first located item sets the shape
                self.add_flat(self.array, slot * self.stride_bytes, traj)
                return
        elif len(traj) == self.ncols:  # the shape is learnt from flat items only
            located = _contiguous(traj)
            if located is not None:
                self.array[slot * self._stride : (slot + 1) * self._stride] = array.array(
                    "i", located
                )
                return
        if self._stride:
            self.array[slot * self._stride] = 0

    def firsts(self, runs: Sequence[LocatedCall], n: int) -> np.ndarray | None:
        """The first rows (columns x items) of ``n`` items located by their writer in
        ``runs``, when the runs fit this table: as many columns as its located items, one set
        of block codes and lengths, ``n`` items in all (the first located items of a table
        set its number of columns). Else None."""
        codes, lengths = runs[0].codes, runs[0].lengths
        if not self.ncols and codes:
            self._setup(len(codes))
        if len(codes) != self.ncols:
            return None
        for r in runs:
            if r.codes != codes or r.lengths != lengths:
                return None
        out = runs[0].firsts if len(runs) == 1 else np.concatenate([r.firsts for r in runs], 1)
        return out if out.shape[1] == n else None

    def put(self, where: Any, runs: Sequence[LocatedCall], firsts: np.ndarray) -> None:
        """Records the locations of the items in slots ``where`` (a slice or an array): what
        :meth:`add` would for each, from their writer's ``runs`` and :meth:`firsts`."""
        view = self._view
        assert view is not None
        view[where, 0] = 1
        view[where, 1::3] = runs[0].codes
        view[where, 2::3] = firsts.T
        view[where, 3::3] = runs[0].lengths

    def add_runs(
        self, where: Any, n: int, nested: Sequence[int], fields: Sequence[Sequence[Any]]
    ) -> bool:
        """Records, column by column, where the flat items of a batch of ``n`` have their rows,
        when they are as a writer's items are: per column, one chunk or a run of one chunk
        then a run of another, their offsets going up by one per item within each run, and
        one length. ``where``: the batch's slots (a slice or an array); ``nested``: the
        positions of its items that are not flat (left out here: the caller locates them
        one by one); ``fields``: the flat items' fields, transposed (see
        :func:`~ostinato.core.chunk_counts.count_chunks`). Returns False, having recorded
        nothing, when they are not like that (then each item is located by itself)."""
        view = self._view
        if view is None:
            return False
        if nested:
            kept = np.delete(np.arange(n), nested)  # the flat items' positions in the batch
            positions: Sequence[int] = kept.tolist()
            rows = (np.arange(where.start, where.stop) if type(where) is slice else where)[kept]
        else:
            kept = None
            positions = range(n)
            rows = where
        m = n - len(nested)
        plan = []
        for j in range(self.ncols):
            chunks = fields[3 * j]
            k = two_runs(chunks)
            ga = chunks[0].origin
            if not k or ga is None:
                return False
            offsets = fields[3 * j + 1]
            if (  # the runs' ends first (cheap): items made otherwise mostly fail here
                offsets[k - 1] - offsets[0] != positions[k - 1] - positions[0]
                or offsets[m - 1] - offsets[k] != positions[m - 1] - positions[k]
                if k < m
                else offsets[m - 1] - offsets[0] != positions[m - 1] - positions[0]
            ):
                return False
            # The offset less the position: one value per run.
            d = list(map(sub, offsets, positions))
            da = d[0]
            if (d[:k] if k < m else d).count(da) != k:
                return False
            gb, db = ga, da
            if k < m:
                gb, db = chunks[-1].origin, d[k]
                if gb is None or d[k:].count(db) != m - k:
                    return False
            lengths = fields[3 * j + 2]
            if lengths.count(lengths[0]) != m:
                return False
            plan.append((k, ga, da, gb, db, lengths[0]))
        at = np.arange(n) if kept is None else kept
        view[rows, 0] = 1
        for j, (k, ga, da, gb, db, length) in enumerate(plan):
            c = 1 + 3 * j
            if k == m:
                view[rows, c] = ga[0]
                view[rows, c + 1] = at + (ga[1] + da)
            else:
                ra, rb = _split(rows, k)
                view[ra, c] = ga[0]
                view[ra, c + 1] = at[:k] + (ga[1] + da)
                view[rb, c] = gb[0]
                view[rb, c + 1] = at[k:] + (gb[1] + db)
            view[rows, c + 2] = length
        return True

    def remove(self, slot: int) -> None:
        """Forgets the item in ``slot``."""
        if self._stride:
            self.array[slot * self._stride] = 0

    def remove_run(self, start: int, stop: int) -> None:
        """Forgets the items in slots ``start`` to ``stop - 1`` (one numpy assignment)."""
        if self._view is not None:
            self._view[start:stop, 0] = 0

    def clear(self) -> None:
        """Forgets every item (the shape of item learned is kept)."""
        if self._view is not None:
            self._view[:, 0] = 0

    def take(self, slots: np.ndarray) -> Located | None:
        """The locations of ``slots``, or None unless every one of them is located."""
        if self._view is None or not len(slots):
            return None
        rows = self._view[slots]
        return Located(rows) if rows[:, 0].all() else None
