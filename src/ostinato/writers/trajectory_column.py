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
    from ostinato.writers.chunker import CellRef


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
        #: The refs are consecutive steps of one history column (a step-1 slice of it), which
        #: lets ``create_item`` turn them into one chunk slice without looking at each ref.
        self._run = False

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
            raise RuntimeError(
                "Cannot convert TrajectoryColumn with expired data references to numpy array."
            )
        if self._squeeze:
            return self._refs[0].numpy()
        return np.stack([r.chunk.data[r.offset] for r in self._refs])

    def __repr__(self) -> str:
        return (
            f"TrajectoryColumn(len={len(self._refs)}, squeeze={self._squeeze}, path={self._path})"
        )


class RunColumn(TrajectoryColumn):
    """What ``history[path][-k:]`` returns: the newest ``k`` steps of one history column,
    oldest first, none of them missing -- a column like any other, made without a call to
    ``__init__``.

    The history sets ``_refs`` (a non-empty tuple of refs) and ``_path``; the flags are class
    attributes (an unsqueezed run of consecutive steps), read in place of
    :class:`TrajectoryColumn`'s slots, which a run leaves unset. ``create_item`` recognises a
    run by its type and turns it into one chunk slice when its steps lie in one chunk.
    """

    __slots__ = ()
    _squeeze = False
    _run = True

    __init__ = object.__init__  # type: ignore[assignment]
