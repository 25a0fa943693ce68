"""TrajectoryWriter: append steps, build items from their history, send them to tables.

The checks of an item before it is sent are in :mod:`ostinato.writers.item_validation`.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import optree

from ostinato import errors
from ostinato.core import items as items_lib
from ostinato.core import keys as keys_lib
from ostinato.core.deadline import Deadline
from ostinato.core.keys import new_key
from ostinato.validate import positive_int
from ostinato.writers.chunker import ColumnChunker
from ostinato.writers.columns import ColumnHistory, TrajectoryColumn
from ostinato.writers.item_validation import ItemValidator
from ostinato.writers.packing import pack_trajectory
from ostinato.writers.step_writers import LEAF_TYPES, part_step_writer, whole_step_writer
from ostinato.writers.stream_writer import StreamWriter

if TYPE_CHECKING:
    from ostinato.transport.base import Transport


_NEVER = Deadline.never()


class _Column:
    __slots__ = ("index", "path", "chunker", "history")

    def __init__(
        self, index: int, path: tuple[Any, ...], chunker: ColumnChunker, history: ColumnHistory
    ):
        self.index = index
        self.path = path
        self.chunker = chunker
        self.history = history


class _HistoryBeforeAppend:
    """``TrajectoryWriter.history`` while the writer has no column: reading it raises (once
    a column exists, the instance's own ``history`` attribute hides this)."""

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        if obj is None:
            return self
        raise RuntimeError("history cannot be accessed before `append` is called at least once.")


class TrajectoryWriter(StreamWriter):
    """Writes steps and creates items that refer to any of the recent steps.

    Obtain one with ``client.trajectory_writer(num_keep_alive_refs)``. Not thread-safe: use one
    writer per thread.

    Items are handed to the writer's stream (:mod:`ostinato.transport.streams`) as soon as they
    are created and delivered in order; at most ``max_pending_items`` may wait for their tables
    (rate limiters, the network), after which ``create_item`` blocks.

    Example:
      >>> with client.trajectory_writer(num_keep_alive_refs=3) as w:
      ...     for step in steps:
      ...         w.append({"obs": step})
      ...         if w.episode_steps >= 3:
      ...             w.create_item("replay", 1.0, {"obs": w.history["obs"][-3:]})
    """

    def __init__(
        self,
        transport: Transport,
        num_keep_alive_refs: int,
        *,
        validate_items: bool = True,
        max_chunk_length: int | None = None,
        max_pending_items: int | None = None,
        signature_timeout_ms: int | None = None,
    ):
        positive_int("num_keep_alive_refs", num_keep_alive_refs)
        if max_chunk_length is not None and not 1 <= max_chunk_length:
            raise ValueError(f"max_chunk_length ({max_chunk_length}) must be None or >= 1")
        positive_int("max_pending_items", max_pending_items, none_ok=True)
        self._validator = ItemValidator(transport, signature_timeout_ms)
        self._transport = transport
        self._num_keep_alive_refs = int(num_keep_alive_refs)
        self._default_max_chunk_length = max_chunk_length
        self._validate = validate_items
        self._columns: list[_Column] = []
        self._path_to_column: dict[tuple[Any, ...], _Column] = {}
        self._path_config: dict[tuple[Any, ...], tuple[int, int | None]] = {}
        self._structure: Any = None
        self._spec_cache: dict[Any, list[_Column]] = {}
        self._dict_cache: dict[tuple[Any, ...], list[_Column]] = {}
        self._missing_cache: dict[int, tuple[list[_Column], list[_Column]]] = {}  # _missing
        #: Whole steps as flat dicts that name every column: ``(number of keys,
        #: step_writers.whole_step_writer of the keys)``; None until such a step is seen,
        #: and again when a column is added.
        self._whole: tuple[int, Any] | None = None
        #: The parts of steps written in several appends, as flat dicts: the opening one
        #: (``partial_step=True``), and those that fill the open step (the last one closes
        #: it): by number of keys, the ``step_writers.part_step_writer`` of the keys last
        #: seen; emptied when a column is added.
        self._opening: dict[int, Any] = {}
        self._filling: dict[int, Any] = {}
        self._part_writers: dict[tuple[bool, tuple[Any, ...]], Any] = {}  # by (filling, keys)
        self._traj_key_cache: dict[Any, Any] = {}  # see writers.packing.pack_trajectory
        self._episode_id = new_key()
        self._episode_steps = 0
        self._step_open = False
        self._closed = False
        self._trivially_valid = self._validator.trivially_valid  # the same set
        self._stream = transport.writer_stream(
            self._keep_keys, None if max_pending_items is None else int(max_pending_items)
        )
        #: The stream's ``insert`` takes ``nan_checked`` (an in-process ``Delivery``): items
        #: whose priority ``create_item`` found not NaN are not checked again for a table that
        #: checks nothing else.
        self._nan_checked_stream = bool(getattr(self._stream, "takes_nan_checked", False))

    # -- structure ---------------------------------------------------------------------------------
    @property
    def max_num_keep_alive_refs(self) -> int:
        return max([self._num_keep_alive_refs] + [n for n, _ in self._path_config.values()])

    @property
    def episode_steps(self) -> int:
        """Number of complete (non-partial) appends since the last ``end_episode``."""
        return self._episode_steps

    def _new_column(self, path: tuple[Any, ...]) -> _Column:
        keep, chunk_len = self._path_config.get(
            path, (self._num_keep_alive_refs, self._default_max_chunk_length)
        )
        # Align with the existing columns (which may span episodes after
        # end_episode(clear_buffers=False)); an open step already has its slot there.
        steps_so_far = len(self._columns[0].history) if self._columns else 0
        # The open step is reserved like the other columns' (the step's next append fills it,
        # see ColumnHistory.append); the steps before it have no value in this column.
        open_step = 1 if self._step_open and steps_so_far else 0
        hist = ColumnHistory(
            path, self.max_num_keep_alive_refs, history_padding=steps_so_far - open_step
        )
        chunker = ColumnChunker(path, keep, chunk_len, history=hist)
        if open_step:
            hist.append(None)
        col = _Column(len(self._columns), path, chunker, hist)
        self._whole = None  # its steps would not name the new column
        self._opening.clear()  # they would leave it out
        self._filling.clear()
        self._part_writers.clear()
        self._missing_cache.clear()  # every step that does not name it leaves it out
        self._columns.append(col)
        self._path_to_column[path] = col
        return col

    def _learn(self, data: Any, treespec: Any) -> list[_Column]:
        paths, _, _ = optree.tree_flatten_with_path(data, none_is_leaf=True)
        cols = []
        for p in paths:
            p = tuple(p)
            col = self._path_to_column.get(p)
            if col is None:
                col = self._new_column(p)
            cols.append(col)
        skeleton = optree.tree_map(lambda _: 0, data, none_is_leaf=True)
        self._structure = _union(self._structure, skeleton)
        self.history = self._build_history()  # with the new columns
        self._spec_cache[treespec] = cols
        return cols

    #: The step structure with each leaf replaced by its :class:`ColumnHistory`: user code
    #: reads it for every column of every item. An instance attribute, set when a column is
    #: added; before the first ``append`` the class's descriptor raises ``RuntimeError``. Not a
    #: ``functools.cached_property``: that writes into the instance's ``__dict__``, and once an
    #: object's ``__dict__`` exists CPython 3.11 no longer specialises reads of its other
    #: attributes (``self._closed``...), each then costing about 270 more CPU instructions.
    history: Any = _HistoryBeforeAppend()

    def _build_history(self) -> Any:
        paths, _, spec = optree.tree_flatten_with_path(self._structure, none_is_leaf=True)
        leaves = [self._path_to_column[tuple(p)].history for p in paths]
        return optree.tree_unflatten(spec, leaves)

    # -- append ------------------------------------------------------------------------------------
    def append(self, data: Any, *, partial_step: bool = False) -> None:
        """Appends one step (or part of one, with ``partial_step=True``).

        Leaves set to ``None`` (or missing from a dict) are not written this step. New fields
        may appear at any step; their earlier history reads as ``None``.

        Raises:
          ValueError: a value's dtype or shape differs from the column's first value, or a
            field is set twice within one open step.
        """
        if self._closed:
            self._check_usable()
        whole = self._whole
        if (
            whole is not None
            and type(data) is dict
            and len(data) == whole[0]
            and not (partial_step or self._step_open)
        ):
            # Fastest path: a whole step, a flat dict of the keys seen before that names every
            # column, all its values arrays or scalars.
            if whole[1](data, self._episode_id):
                self._episode_steps += 1
                return
        parts = None
        cols = None
        if type(data) is dict:
            # A part of a step written in several appends, of keys seen before (Acme's adders).
            if self._step_open:
                parts = self._filling
            elif partial_step:
                parts = self._opening
            if parts is not None:
                put = parts.get(len(data))
                if put is not None and put(data, self._episode_id):
                    if partial_step:
                        self._step_open = True
                    else:
                        self._step_open = False
                        self._episode_steps += 1
                    return
            # Fast path: a flat dict whose values are all arrays or scalars.
            fast = self._dict_cache.get(tuple(data))
            if fast is not None:
                leaves = list(data.values())
                for v in leaves:
                    if type(v) not in LEAF_TYPES:
                        break
                else:
                    cols = fast
        if cols is None:
            leaves, treespec = optree.tree_flatten(data, none_is_leaf=True)
            cols = self._spec_cache.get(treespec)
            if cols is None:
                cols = self._learn(data, treespec)
            if (
                type(data) is dict
                and len(cols) == len(data)
                and all(type(v) in LEAF_TYPES for v in data.values())
            ):
                cols = self._learn_dict(data, cols)
                leaves = list(data.values())
        step = self._episode_steps
        episode = self._episode_id
        if self._step_open:
            for value, col in zip(leaves, cols):
                if value is None:
                    continue
                if not col.history.can_set_last():  # its step has a value already
                    raise ValueError(
                        f"Field {col.path} has already been set in the active step by previous "
                        "(partial) append call and thus must be omitted or set to None "
                        f"but got: {value}"
                    )
            for value, col in zip(leaves, cols):
                if value is not None:
                    col.history.drop_reserved()  # the chunker appends the value in its place
                    try:
                        col.chunker.append(value, episode)
                    except BaseException:
                        col.history.append(None)
                        raise
        else:
            for value, col in zip(leaves, cols):
                if value is None:
                    col.history.append(None)
                else:
                    col.chunker.append(value, episode)  # the history counts it
            if len(cols) != len(self._columns):
                for col in self._missing(cols):
                    col.history.append(None)
        if partial_step:
            self._step_open = True
        else:
            self._step_open = False
            self._episode_steps = step + 1
        if parts is not None and data and self._dict_cache.get(tuple(data)) is cols:
            # (a flat dict of arrays and scalars: its columns are the dict cache's)
            self._learn_part(data, cols, parts)

    def _learn_part(self, data: dict[Any, Any], cols: list[_Column], parts: dict[int, Any]) -> None:
        """Makes the :func:`~ostinato.writers.step_writers.part_step_writer` of a flat dict
        step ``data`` (its columns ``cols``, in its key order) the one ``parts`` (the writer's
        opening or filling parts) tries for dicts of its number of keys."""
        filling = parts is self._filling
        keys = tuple(data)
        put = self._part_writers.get((filling, keys))
        if put is None:
            put = part_step_writer(
                keys,
                [c.chunker.append for c in cols],
                [c.history for c in cols],
                [c.history for c in self._missing(cols)],
                filling=filling,
            )
            self._part_writers[(filling, keys)] = put
        parts[len(keys)] = put

    def _missing(self, cols: list[_Column]) -> list[_Column]:
        """The writer's columns that ``cols`` (a step's columns, as cached for its structure)
        leaves out, in column order; remembered (by id, with the list) until a column is added."""
        hit = self._missing_cache.get(id(cols))
        if hit is not None and hit[0] is cols:
            return hit[1]
        seen = {id(c) for c in cols}
        missing = [col for col in self._columns if id(col) not in seen]
        self._missing_cache[id(cols)] = (cols, missing)  # holds cols: its id stays its own
        return missing

    def _learn_dict(self, data: dict[Any, Any], cols: list[_Column]) -> list[_Column]:
        """Caches the columns of a flat dict step (``cols`` in the order of the sorted keys)
        in the dict's own key order, and the whole-step getter when it names every column.
        Apart from :meth:`append`: its comprehensions would make ``append``'s locals cells,
        created on every call."""
        order = {k: i for i, k in enumerate(sorted(data))}
        cols = self._dict_cache[tuple(data)] = [cols[order[k]] for k in data]
        if len(cols) == len(self._columns):
            keys = sorted(data)  # the columns' order (cols[order[k]] above)
            by_key = dict(zip(data, cols))
            stores = [by_key[k].chunker.append for k in keys]
            self._whole = (len(keys), whole_step_writer(keys, stores))
        return cols

    # -- items -------------------------------------------------------------------------------------
    def create_item(
        self, table: str, priority: float, trajectory: Any, *, timeout_ms: int | None = None
    ) -> None:
        """Creates an item in ``table`` from columns taken from :attr:`history`.

        Args:
          table: the table's name.
          priority: the item's priority (not NaN; not negative on Prioritized tables).
          trajectory: a nest of :class:`TrajectoryColumn`.
          timeout_ms: (Ostinato only) how long to wait when ``max_pending_items`` items already
            wait for the rate limiter; ``None`` waits forever.

        Raises:
          TypeError: a leaf of ``trajectory`` is not a TrajectoryColumn.
          ValueError: empty trajectory or column, NaN/negative priority, unknown table, or a
            column that does not match the table's signature. Nothing is stored then.
        """
        if self._closed:
            self._check_usable()
        priority = float(priority)
        if priority != priority:
            raise ValueError("`priority` must not be nan.")
        cols, packed, sq = pack_trajectory(trajectory, self._traj_key_cache)
        if (
            timeout_ms is None
            and self._nan_checked_stream
            and not (self._validate and (table not in self._trivially_valid or priority < 0))
        ):
            # The usual embedded item (what _create_packed does, without its call): nothing to
            # validate, and no deadline that an in-process stream could raise for.
            # next(keys.counter) is new_key() without its call (read each time: a forked child
            # draws from a counter of its own).
            item = ((next(keys_lib.counter), priority, packed, sq),)
            self._stream.insert(table, item, _NEVER, None, True)
            return
        self._create_packed(table, priority, cols, packed, sq, timeout_ms)

    def _create_packed(
        self,
        table: str,
        priority: float,
        cols: Sequence[TrajectoryColumn],
        packed: items_lib.Packed,
        sq: tuple[bool, ...],
        timeout_ms: int | None,
        whole_steps: bool = False,
    ) -> None:
        """Validates (when asked to) and submits an item made of ``cols``, packed, whose
        ``priority`` the caller found not NaN.

        ``whole_steps``: the columns are whole steps (the legacy ``Writer``), which a signature
        of one step also describes."""
        if self._validate and (table not in self._trivially_valid or priority < 0):
            self._validator.validate(table, priority, cols, sq, legacy=whole_steps)
        deadline = _NEVER if timeout_ms is None else Deadline.from_ms(timeout_ms)
        # Callers have refused a NaN priority: an in-process stream need not look again.
        nan_checked = (None, True) if self._nan_checked_stream else ()
        try:
            self._stream.insert(table, ((new_key(), priority, packed, sq),), deadline, *nan_checked)
        except errors.DeadlineExceededError as e:
            raise errors.DeadlineExceededError(
                f"create_item waited for the server to accept pending items: {e}"
            ) from e

    def _keep_keys(self) -> set[int]:
        """Keys of chunks that items created later may still refer to (live refs)."""
        keys: set[int] = set()
        for col in list(self._columns):
            keys.update(col.chunker.live_chunk_keys())
        return keys

    # -- flush / episodes --------------------------------------------------------------------------
    def end_episode(self, clear_buffers: bool = True, timeout_ms: int | None = None) -> None:
        """Flushes, then starts a new episode; ``clear_buffers`` empties the history.

        The new episode starts even when the flush times out (pending items are still
        delivered); Reverb skipped the reset in that case.
        """
        self._check_usable()
        try:
            self.flush(0, timeout_ms)
        except errors.DeadlineExceededError as e:
            self._new_episode(clear_buffers)
            raise errors.DeadlineExceededError(
                f"End episode call did not complete within provided timeout of "
                f"{datetime.timedelta(milliseconds=timeout_ms or 0)}: {e}"
            ) from e
        self._new_episode(clear_buffers)

    def _new_episode(self, clear_buffers: bool) -> None:
        for col in self._columns:
            col.chunker.end_episode(clear_buffers)  # with clear_buffers, resets col.history
        self._episode_id = new_key()
        self._episode_steps = 0
        self._step_open = False

    def configure(
        self, path: tuple[Any, ...], *, num_keep_alive_refs: int, max_chunk_length: int | None
    ) -> None:
        """Overrides keep-alive and chunk length for one column (now or when it first appears)."""
        if num_keep_alive_refs < 1:
            raise ValueError(
                f"num_keep_alive_refs ({num_keep_alive_refs}) must be a positive integer"
            )
        if max_chunk_length is not None and not 1 <= max_chunk_length <= num_keep_alive_refs:
            raise ValueError(
                f"max_chunk_length ({max_chunk_length}) must be None or in [1, num_keep_alive_refs "
                f"({num_keep_alive_refs})]"
            )
        path = tuple(path)
        self._path_config[path] = (num_keep_alive_refs, max_chunk_length)
        col = self._path_to_column.get(path)
        if col is not None:
            col.chunker.configure(num_keep_alive_refs, max_chunk_length)
        size = self.max_num_keep_alive_refs
        for c in self._columns:
            c.history.resize(size)

    # -- lifecycle ---------------------------------------------------------------------------------
    def __enter__(self) -> TrajectoryWriter:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None or not issubclass(exc_type, errors.ReverbError):
            if not self._closed:
                self.flush()
        self._release_spare_rows()

    def _release_spare_rows(self) -> None:
        """Shrinks partly filled chunks so items do not pin unused preallocated rows."""
        for col in self._columns:
            col.chunker.release_spare_rows()

    def __repr__(self) -> str:
        return (
            f"TrajectoryWriter(columns={len(self._columns)}, episode_steps={self._episode_steps}, "
            f"pending={self._stream.pending()}, closed={self._closed})"
        )


def _union(a: Any, b: Any) -> Any:
    """Tree union of two step structures (dicts by key, sequences by position)."""
    if a is None:
        return b
    if b is None:
        return a
    if isinstance(a, dict) and isinstance(b, dict):
        out = dict(a)
        for k, v in b.items():
            out[k] = _union(a.get(k), v)
        return type(a)(out) if type(a) is not dict else out
    if hasattr(a, "_asdict") and hasattr(b, "_asdict") and type(a) is type(b):
        return type(a)(*[_union(x, y) for x, y in zip(a, b)])
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and type(a) is type(b):
        n = max(len(a), len(b))
        merged = [
            _union(a[i] if i < len(a) else None, b[i] if i < len(b) else None) for i in range(n)
        ]
        return type(a)(merged)
    return a
