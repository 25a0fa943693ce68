"""Checking a :class:`~ostinato.writers.trajectory_writer.TrajectoryWriter`'s items.

:func:`trajectory_columns` takes the columns out of the trajectory given to ``create_item``
(refusing an empty one, or a leaf that is not a column); :class:`ItemValidator` checks an item
against its table (the table exists, the priority, the table's signature), fetching each
table's metadata once and remembering the column layouts already found valid.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import optree

from ostinato import errors
from ostinato.core.deadline import Deadline
from ostinato.core.signature import check_columns
from ostinato.validate import is_int
from ostinato.writers.chunker import CellRef
from ostinato.writers.trajectory_column import RunColumn, TrajectoryColumn

if TYPE_CHECKING:
    from ostinato.transport.base import Transport


#: A column's types: a step's ref is its squeezed column.
_COLUMN_TYPES = frozenset({TrajectoryColumn, RunColumn, CellRef})


def _is_column(x: Any) -> bool:
    return isinstance(x, TrajectoryColumn)


def trajectory_columns(
    trajectory: Any, key_cache: dict[tuple[Any, ...], list[Any]]
) -> list[TrajectoryColumn]:
    """The leaves of ``trajectory`` (a nest of :class:`TrajectoryColumn`), flattened.

    ``key_cache`` maps a dict's keys to their sorted order (the fast path for a flat dict).

    Raises:
      TypeError: a leaf of ``trajectory`` is not a TrajectoryColumn.
      ValueError: the trajectory is empty.
    """
    cols = None
    if type(trajectory) is dict:
        order = key_cache.get(tuple(trajectory))
        if order is None:
            order = sorted(trajectory)
            key_cache[tuple(trajectory)] = order
        cols = list(map(trajectory.__getitem__, order))  # no cell for `trajectory`
        for c in cols:
            if type(c) not in _COLUMN_TYPES:
                cols = None
                break
    if cols is None:
        cols = optree.tree_leaves(trajectory, is_leaf=_is_column, none_is_leaf=True)
        if not cols:
            raise ValueError("trajectory must not be empty.")
        for c in cols:
            if not isinstance(c, TrajectoryColumn):
                raise TypeError(
                    f"All leaves of `trajectory` must be `TrajectoryColumn` but got {trajectory}"
                )
    return cols


class ItemValidator:
    """Checks items against their tables, for one writer.

    Args:
      transport: the writer's transport (for the tables' metadata).
      signature_timeout_ms: how long to wait for a table's metadata; ``None`` waits forever.

    Attributes:
      trivially_valid: tables known to exist and to have no signature, where only a negative
        priority needs checking (the writer skips :meth:`validate` for the others).
    """

    __slots__ = (
        "_transport",
        "_signature_timeout_ms",
        "_table_cache",
        "_validated",
        "trivially_valid",
    )

    def __init__(self, transport: Transport, signature_timeout_ms: int | None):
        if signature_timeout_ms is not None and (
            not is_int(signature_timeout_ms) or signature_timeout_ms < 0
        ):
            raise ValueError(
                f"get_signature_timeout_ms ({signature_timeout_ms!r}) must be None or "
                "a non-negative integer (milliseconds)"
            )
        self._signature_timeout_ms = (
            None if signature_timeout_ms is None else int(signature_timeout_ms)
        )
        self._transport = transport
        self._table_cache: dict[str, Any] = {}
        self._validated: set[tuple[Any, ...]] = set()
        self.trivially_valid: set[str] = set()

    def table_meta(self, table: str) -> Any:
        meta = self._table_cache.get(table)
        if meta is None:
            ms = self._signature_timeout_ms
            if ms is None:
                meta = self._transport.table_meta(table)
            else:
                try:
                    meta = self._transport.table_meta(table, Deadline.from_ms(ms))
                except (errors.DeadlineExceededError, errors.UnavailableError) as e:
                    raise errors.DeadlineExceededError(
                        f"create_item could not fetch the signature of table {table!r} within "
                        f"get_signature_timeout_ms={ms}: {e}"
                    ) from e
            self._table_cache[table] = meta
        return meta

    def validate(
        self,
        table: str,
        priority: float,
        cols: Sequence[TrajectoryColumn],
        sq: tuple[bool, ...],
        *,
        legacy: bool = False,
    ) -> None:
        """Raises if the item may not go to ``table``.

        ``legacy``: the columns are whole steps (the legacy ``Writer``), which a signature of one
        step also describes."""
        sig = self._signature(table, priority)
        if sig is None:
            return
        key = (table, legacy, sq, tuple((id(c._chunker), len(c)) for c in cols))
        if key in self._validated:
            return
        shapes = []
        for c in cols:
            ch = c._chunker
            shape = tuple(ch.shape) if c._squeeze else (len(c), *ch.shape)
            shapes.append((ch.dtype, shape, tuple(ch.shape) if legacy else None))
        self._check(table, sig, key, shapes)

    def _signature(self, table: str, priority: float) -> Any:
        """The table's flat signature (None when it has none: the table is then trivially
        valid), after checking that it exists and takes ``priority``."""
        try:
            meta = self.table_meta(table)
        except errors.TableNotFoundError as e:
            raise errors.TableNotFoundError(table, e.available) from None
        if meta.reject_negative and priority < 0:
            raise errors.InvalidArgumentError(
                f"Priority must not be negative (got {priority} for table {table!r}, which uses a "
                "Prioritized selector)."
            )
        sig = meta.flat_signature
        if sig is None:
            self.trivially_valid.add(table)  # exists, no signature: only priorities to check
        return sig

    def validate_layout(
        self,
        table: str,
        priority: float,
        sq: tuple[bool, ...],
        layout: tuple[Any, ...],
        shapes: list[tuple[Any, tuple[int, ...], Any]],
    ) -> None:
        """Raises if items of this column layout may not go to ``table``: the check of
        :meth:`validate` for a writer that describes its columns itself.

        Args:
          priority: the lowest priority of the items.
          layout: identifies the columns (checked once per table and layout).
          shapes: per column ``(dtype, shape of the item's column, None)``.
        """
        sig = self._signature(table, priority)
        if sig is None:
            return
        key = (table, "layout", sq, layout)
        if key not in self._validated:
            self._check(table, sig, key, shapes)

    def _check(self, table: str, sig: Any, key: tuple[Any, ...], shapes: list[Any]) -> None:
        check_columns(table, sig, shapes)
        if len(self._validated) > 10_000:
            self._validated.clear()
        self._validated.add(key)
