"""The column of an item, as ``create_item`` takes it: :class:`TrajectoryColumn`.

A column is one or more references to steps of one history column. A step's own reference
(:class:`~ostinato.writers.chunker.CellRef`) is also that step's squeezed column -- what
``history[path][-1]`` returns -- so that reading the newest step of a column, which user code
does for every item, builds nothing.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from ostinato.writers.chunker import CellRef, ColumnChunker


#: What ``numpy()`` of a column with an expired step raises (Reverb's message).
EXPIRED_NUMPY = "Cannot convert TrajectoryColumn with expired data references to numpy array."


class TrajectoryColumn:
    """A column of an item: references to consecutive or picked steps of one history column.

    Args:
      data_references: the refs (from ``history``), oldest first.
      squeeze: drop the time dimension; needs exactly one ref.
      path: the column's path, for error messages.
    """

    __slots__ = ("_refs", "_squeeze", "_path", "_run")
    _refs: tuple[CellRef, ...]
    _squeeze: bool
    _path: tuple[Any, ...] | None
    _run: bool

    def __init__(
        self,
        data_references: Sequence[CellRef | None],
        *,
        squeeze: bool = False,
        path: tuple[Any, ...] | None = None,
    ):
        refs = tuple(data_references)
        if squeeze and len(refs) != 1:
            raise ValueError(
                f"Columns must contain exactly one data reference when squeeze set, got {len(refs)}"
            )
        if None in refs:
            raise ValueError(
                "TrajectoryColumns cannot contain any None data references: TrajectoryColumn at "
                f"path {path} got {list(refs)}."
            )
        self._refs = refs  # type: ignore[assignment]  # no None (checked above)
        self._squeeze = squeeze
        self._path = path
        #: The refs are consecutive steps of one history column (a step-1 slice of a
        #: :class:`RunColumn` or of a step's ref), which lets ``create_item`` turn them into
        #: chunk slices without looking at each ref.
        self._run = False

    @property
    def _chunker(self) -> ColumnChunker:
        """The chunker of the column's (first) step."""
        return self._refs[0].chunker

    @property
    def is_squeezed(self) -> bool:
        return self._squeeze

    def __len__(self) -> int:
        return len(self._refs)

    def __iter__(self) -> Iterator[CellRef]:
        return iter(self._refs)

    def __getitem__(self, index: Any) -> TrajectoryColumn:
        if isinstance(index, (int, np.integer)):
            return self._refs[index]  # a step's ref is its squeezed column
        if isinstance(index, slice):
            col = TrajectoryColumn(self._refs[index], path=self._path)
            col._run = self._run and index.step in (None, 1)
            return col
        if isinstance(index, list):
            return TrajectoryColumn([self._refs[i] for i in index], path=self._path)
        raise TypeError(
            "TrajectoryColumn indices must be integers, slices or lists, "
            f"not {type(index).__name__}"
        )

    @property
    def shape(self) -> tuple[int | None, ...]:
        if not self._refs:
            return (0,)
        inner = tuple(self._refs[0].chunker.shape)
        return inner if self._squeeze else (len(self._refs), *inner)

    @property
    def dtype(self) -> np.dtype:
        return self._refs[0].chunker.dtype  # type: ignore[return-value]  # set by a value

    def numpy(self) -> np.ndarray:
        """The column's data as a new array (stacked over steps unless squeezed)."""
        if any(r.expired for r in self._refs):
            raise RuntimeError(EXPIRED_NUMPY)
        if self._squeeze:
            return self._refs[0].numpy()
        # Live refs have a chunk (checked above).
        return np.stack([r.chunk.data[r.offset] for r in self._refs])  # type: ignore[union-attr]

    def __repr__(self) -> str:
        return (
            f"TrajectoryColumn(len={len(self._refs)}, squeeze={self._squeeze}, path={self._path})"
        )


class RunColumn(TrajectoryColumn):
    """What ``history[path][-k:]`` returns: consecutive steps of one history column, oldest
    first, none of them missing -- a column like any other, made without a call to
    ``__init__``.

    It holds no refs: the steps are the values ``_v0 .. _v0 + _n - 1`` of the column's chunker
    (see :class:`~ostinato.writers.columns.ColumnHistory`), and ``create_item`` finds their
    chunk slices from the chunker's counters. ``_refs`` makes the refs when something asks
    for them. The history sets ``_chunker``, ``_v0``, ``_n`` and ``_path``; the flags are class
    attributes (an unsqueezed run of consecutive steps), read in place of
    :class:`TrajectoryColumn`'s slots, which a run leaves unset.
    """

    __slots__ = ("_chunker", "_v0", "_n")
    _chunker: ColumnChunker
    _v0: int
    _n: int
    _squeeze = False
    _run = True

    __init__ = object.__init__  # type: ignore[assignment]

    @property
    def _refs(self) -> tuple[CellRef, ...]:  # type: ignore[override]
        ref = self._chunker.ref
        return tuple(map(ref, range(self._v0, self._v0 + self._n)))

    def __len__(self) -> int:
        return self._n

    @property
    def shape(self) -> tuple[int | None, ...]:
        return (self._n, *self._chunker.shape)

    @property
    def dtype(self) -> np.dtype:
        return self._chunker.dtype  # type: ignore[return-value]

    @property
    def expired(self) -> bool:
        """Some of its steps have left the writer's keep-alive window."""
        return self._v0 < self._chunker._live_from

    def numpy(self) -> np.ndarray:
        if self.expired:
            raise RuntimeError(EXPIRED_NUMPY)
        parts = [c.data[o : o + n] for c, o, n in self._chunker.slices(self._v0, self._n)]
        return np.concatenate(parts) if len(parts) > 1 else np.array(parts[0])
