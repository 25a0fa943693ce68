"""From a writer's history columns to the packed trajectory an item holds.

An item refers to rows of chunks: per column, the slices ``(chunk, offset, length)`` its steps
occupy. A column of consecutive steps of one chunk is one slice (the usual case, found without
looking at each step); anything else -- steps across chunks, picks like ``history[[0, 2]]`` --
is merged into slices of truly contiguous rows only. See :mod:`ostinato.core.items` for the
packed form.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import Any

import optree

from ostinato.core import items as items_lib
from ostinato.core.specs import dtype_name, shape_str
from ostinato.writers.chunker import CellRef
from ostinato.writers.item_validation import trajectory_columns
from ostinato.writers.trajectory_column import RunColumn, TrajectoryColumn

_SQ_CACHE = items_lib.SQUEEZE_CACHE


def _expired(col_index: int) -> ValueError:
    return ValueError(f"Error in column {col_index}: Column contains expired CellRef.")


def merge_refs(refs: tuple[Any, ...], col_index: int) -> list[tuple[Any, int, int]]:
    """Turns refs into slices, merging only truly contiguous rows of the same chunk.

    (Reverb merged any refs sharing a chunk, which returned wrong data for picks like
    ``history[[0, 2]]``; see its bug list.)
    """
    slices: list[list[Any]] = []
    first = refs[0]
    chunker = first.chunker
    for r in refs:
        if r.expired:
            raise _expired(col_index)
        if r.chunker is not chunker and (
            r.chunker.dtype != chunker.dtype or r.chunker.shape != chunker.shape
        ):
            if r.chunker.dtype != chunker.dtype:
                raise ValueError(
                    f"Error in column {col_index}: Column references tensors with different "
                    f"dtypes: {dtype_name(chunker.dtype)} (index 0) != "
                    f"{dtype_name(r.chunker.dtype)}."
                )
            raise ValueError(
                f"Error in column {col_index}: Column references tensors with incompatible shapes: "
                f"{shape_str(chunker.shape)} (index 0) != {shape_str(r.chunker.shape)}."
            )
        if slices:
            last = slices[-1]
            if last[0] is r.chunk and last[1] + last[2] == r.offset:
                last[2] += 1
                continue
        slices.append([r.chunk, r.offset, 1])
    return [(s[0], s[1], s[2]) for s in slices]


def _repack(packed: list[Any]) -> tuple[Any, ...]:
    """Turns a mixed list of (chunk, offset, length) triples and slice lists into per-column
    form."""
    columns: list[tuple[Any, ...]] = []
    i = 0
    while i < len(packed):
        if isinstance(packed[i], list):
            columns.append(tuple(packed[i]))
            i += 1
        else:
            columns.append(((packed[i], packed[i + 1], packed[i + 2]),))
            i += 3
    return tuple(columns)


def pack_columns(cols: Sequence[TrajectoryColumn]) -> tuple[items_lib.Packed, tuple[bool, ...]]:
    """The packed trajectory and the (interned) squeeze flags of an item made of ``cols``.

    Raises:
      ValueError: a column has no steps, refers to an expired step, or mixes dtypes/shapes.
    """
    packed: list[Any] = []
    flat = True
    squeeze = []
    for c in cols:
        if type(c) is RunColumn:
            # Consecutive values of one chunker: their slices, from its counters.
            squeeze.append(False)
            if c.expired:
                raise _expired(len(squeeze) - 1)
            slices = c._chunker.slices(c._v0, c._n)
            if len(slices) == 1:
                packed += slices[0]
            else:
                flat = False
                packed.append(slices)
            continue
        refs = c._refs
        squeeze.append(c._squeeze)
        if len(refs) == 1 and not refs[0].expired:
            r = refs[0]
            packed += (r.chunk, r.offset, 1)
            continue
        if not refs:
            raise ValueError(
                f"trajectory must not contain empty columns: column {len(squeeze) - 1} "
                f"(path {c._path}) has no steps."
            )
        first, last = refs[0], refs[-1]
        if c._run and not first.expired:
            # Consecutive steps of one history column: rows of a chunk are the column's
            # consecutive steps, and refs expire oldest first.
            n = len(refs)
            if last.chunk is first.chunk and last.offset - first.offset == n - 1:
                packed += (first.chunk, first.offset, n)  # in one chunk: one slice
                continue
            # Across two chunks (a chunk closed within the run): the first chunk's last rows,
            # then the next chunk's first, found without looking at each step.
            k = len(first.chunk.data) - first.offset
            if 0 < k < n:
                mid = refs[k]
                if (
                    refs[k - 1].chunk is first.chunk
                    and mid.chunk is last.chunk
                    and mid.offset == 0
                    and last.offset == n - k - 1
                ):
                    flat = False
                    packed.append([(first.chunk, first.offset, k), (last.chunk, 0, n - k)])
                    continue
        slices = merge_refs(refs, len(squeeze) - 1)
        if len(slices) == 1:
            packed += slices[0]
        else:
            flat = False
            packed.append(slices)
    if not cols:
        raise ValueError("trajectory must not be empty.")
    sq = _SQ_CACHE.get(tuple(squeeze)) or items_lib.intern_squeeze(squeeze)
    return (tuple(packed) if flat else _repack(packed)), sq


def tuple_getter(keys: Sequence[Any]) -> Callable[[Any], tuple[Any, ...]]:
    """A function taking the entries for ``keys`` out of a dict (or indices out of a list) as
    a tuple, in C: an ``itemgetter``, but for a lone key, whose entry it would return bare.

    Given a flat dict's sorted keys (the columns' order), it takes the dict's values out in
    column order; a dict of ``len(keys)`` keys in which it finds all of them (no
    ``KeyError``) has no other key, so it stands for a cache lookup by ``tuple(dict)``."""
    if len(keys) == 1:
        key = keys[0]
        return lambda d: (d[key],)
    return itemgetter(*keys)


_SQUEEZE_BITS_MAX = 64  # distinct flag combinations a packer keeps (items mostly have one)


def _squeeze_flags(cache: dict[int, tuple[bool, ...]], bits: int, ncols: int) -> tuple[bool, ...]:
    """The interned squeeze flags of ``ncols`` columns whose column ``i`` is squeezed when bit
    ``i`` of ``bits`` is set, kept in ``cache`` (a packer's own) by ``bits``."""
    flags = items_lib.intern_squeeze([bool(bits >> i & 1) for i in range(ncols)])
    if len(cache) < _SQUEEZE_BITS_MAX:
        cache[bits] = flags
    return flags


_PACKERS: dict[tuple[Any, ...], Callable[[dict[Any, Any]], Any]] = {}
_PACKERS_MAX = 1024  # distinct key sets kept


def _packer(keys: tuple[Any, ...]) -> Callable[[dict[Any, Any]], Any]:
    """``pack(d)`` for a dict trajectory of the columns ``keys`` (sorted: the columns'
    order): ``(columns, packed, squeeze flags)`` when every column is one step (a
    :class:`CellRef`) or consecutive steps of one chunk (a run of a history column: a
    :class:`RunColumn`, or a step-1 slice of one), else
    None (then :func:`pack_columns` finds the slices or names what is wrong). Raises
    ``KeyError`` when ``d`` lacks one of ``keys``: a dict of ``len(keys)`` keys in which it
    finds them all has no other key.

    Generated with the keys and columns unrolled, as ``collections.namedtuple`` generates its
    classes: no loop, no list, no ``+=`` of a triple per column. ``create_item`` runs it per
    item."""
    fn = _PACKERS.get(keys)
    if fn is not None:
        return fn
    ncols = len(keys)
    names = ", ".join(f"c{i}" for i in range(ncols))
    every_ref = " and ".join(f"type(c{i}) is CellRef" for i in range(ncols))
    # CellRef.expired, inline.
    none_expired = " or ".join(f"c{i}.v < c{i}.chunker._live_from" for i in range(ncols))
    refs_packed = ", ".join(f"c{i}.chunk, c{i}.offset, 1" for i in range(ncols))
    lines = ["def pack(d):"]
    lines += [f"    c{i} = d[K{i}]" for i in range(ncols)]
    lines += [
        # Every column one step, squeezed (``history[path][-1]``): one expression.
        f"    if {every_ref} and not ({none_expired}):",
        f"        return ({names},), ({refs_packed},), SQUEEZED",
    ]
    for i in range(ncols):
        bit = 1 << i  # the column's squeeze flag, as a bit of the flags' index
        lines += [
            f"    t = type(c{i})",
            "    if t is RunColumn:",  # history[path][-k:]: not empty, not squeezed
            # Live values of the chunker's newest chunk (all values from its first on): one
            # slice, found from the counters.
            f"        ch = c{i}._chunker",
            f"        o{i} = c{i}._v0",
            "        first = ch._last_first",
            f"        if o{i} < first or o{i} < ch._live_from:",
            "            return None",
            f"        p{i} = ch._last_chunk",
            f"        o{i} -= first",
            f"        n{i} = c{i}._n",
            f"        s{i} = 0",
            "    elif t is CellRef:",
            f"        if c{i}.v < c{i}.chunker._live_from:",  # expired
            "            return None",
            f"        p{i} = c{i}.chunk",
            f"        o{i} = c{i}.offset",
            f"        n{i} = 1",
            f"        s{i} = {bit}",
            f"    elif t is TrajectoryColumn and c{i}._run:",  # a step-1 slice of a history
            f"        r = c{i}._refs",
            "        if not r:",
            "            return None",
            "        f = r[0]",
            "        last = r[-1]",
            f"        p{i} = f.chunk",
            f"        o{i} = f.offset",
            f"        n{i} = len(r)",
            f"        if last.chunk is not p{i} or last.offset - o{i} != n{i} - 1 or f.expired:",
            "            return None",
            f"        s{i} = {bit} if c{i}._squeeze else 0",
            "    else:",
            "        return None",
        ]
    bits = " | ".join(f"s{i}" for i in range(ncols))
    packed = ", ".join(f"p{i}, o{i}, n{i}" for i in range(ncols))
    lines += [
        f"    bits = {bits}",
        "    sq = SQ.get(bits) or squeeze_flags(SQ, bits, NCOLS)",
        f"    return ({names},), ({packed},), sq",
    ]
    scope: dict[str, Any] = {
        "CellRef": CellRef,
        "TrajectoryColumn": TrajectoryColumn,
        "RunColumn": RunColumn,
        # The interned squeeze flags by their bits (column i's flag is bit i).
        "SQ": {},
        "NCOLS": ncols,
        "squeeze_flags": _squeeze_flags,
        "SQUEEZED": items_lib.intern_squeeze((True,) * ncols),
        **{f"K{i}": k for i, k in enumerate(keys)},
    }
    src = "\n".join(lines) + "\n"
    exec(compile(src, f"<ostinato.writers.packing packer of {ncols} columns>", "exec"), scope)
    fn = scope["pack"]
    if len(_PACKERS) < _PACKERS_MAX:
        _PACKERS[keys] = fn
    return fn


def pack_trajectory(
    trajectory: Any, key_cache: dict[Any, Any]
) -> tuple[Sequence[TrajectoryColumn], items_lib.Packed, tuple[bool, ...]]:
    """``create_item``'s trajectory, as its columns (:func:`trajectory_columns`), packed
    trajectory and squeeze flags (:func:`pack_columns`).

    A flat dict whose columns are each one step or consecutive steps of one chunk -- nearly
    every item -- is taken apart and packed by the :func:`_packer` of its keys; any other nest
    of such columns (a namedtuple, nested dicts) is flattened and its leaves packed by the
    packer of as many columns; anything else goes through the two functions, which check
    everything and name what is wrong. ``key_cache`` maps a dict's keys to their sorted order
    (:func:`trajectory_columns`), by number of keys the packer of the sorted keys last seen,
    which takes a dict's columns out in order without looking at its keys, and a nest's
    structure (its ``optree`` tree spec) to the packer of its leaves.
    """
    if type(trajectory) is dict:
        pack = key_cache.get(len(trajectory))
        done = None
        if pack is not None:
            try:
                done = pack(trajectory)
            except KeyError:
                pack = None
        if pack is None:
            order = key_cache.get(tuple(trajectory))
            if order is not None:
                pack = key_cache[len(order)] = _packer(tuple(order))
                done = pack(trajectory)
        if done is not None:
            return done  # type: ignore[no-any-return]
    else:
        # Any other nest (a namedtuple of columns, as Acme's adders make; a bare column): its
        # leaves in their flattened order (trajectory_columns'), packed by the packer of as
        # many columns, kept by the nest's structure.
        leaves, spec = optree.tree_flatten(trajectory, none_is_leaf=True)
        pack = key_cache.get(spec)
        if pack is None and leaves:
            pack = key_cache[spec] = _packer(tuple(range(len(leaves))))
        if pack is not None:
            done = pack(leaves)
            if done is not None:
                return done  # type: ignore[no-any-return]
    cols = trajectory_columns(trajectory, key_cache)
    packed_, sq = pack_columns(cols)
    return cols, packed_, sq
