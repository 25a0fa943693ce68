"""VectorTrajectoryWriter: one writer for ``num_envs`` environments stepped together.

Vectorised environments (gymnasium's ``SyncVectorEnv``/``AsyncVectorEnv``, TF-Agents' batched
environments) produce one step per environment at a time, every leaf with a leading dimension
of ``num_envs``. A :class:`~ostinato.writers.trajectory_writer.TrajectoryWriter` per
environment pays its per-step Python work ``num_envs`` times; this writer takes the batch as it
comes:

* ``append(step)`` stores each column's ``num_envs`` rows with one numpy store. Every
  environment (a *lane*) has its own chunks, so items never mix environments, and an item of
  ``k`` consecutive steps of one lane is one slice of one chunk (two when it straddles a chunk
  boundary), exactly like a ``TrajectoryWriter``'s;
* ``create_items(table, priority, trajectory)`` creates one item per selected lane and hands all
  of them to the stream in one call;
* history references are step offsets (``history["obs"][-k:]``), resolved per lane only when
  items are created.

The items are ordinary items: tables, sampling, checkpoints and the network see no difference.

Differences from ``TrajectoryWriter`` (deliberate, for speed): the step structure is fixed by
the first ``append`` (no partial steps, no ``None`` leaves, no new fields later); string
columns are not supported; ``end_episode`` does not wait for the items already created (call
``flush``).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import repeat
from typing import TYPE_CHECKING, Any

import numpy as np
import optree

from ostinato import errors
from ostinato.core import items as items_lib
from ostinato.core.deadline import Deadline
from ostinato.core.keys import new_key, new_keys
from ostinato.validate import positive_int
from ostinato.writers.item_validation import ItemValidator
from ostinato.writers.lanes import Lanes, VectorColumn, VectorColumnHistory, column_name
from ostinato.writers.packing import tuple_getter
from ostinato.writers.stream_writer import StreamWriter
from ostinato.writers.vector_packing import pack_items
from ostinato.writers.vector_rows import Locator

if TYPE_CHECKING:
    from ostinato.transport.base import Transport

_NEVER = Deadline.never()
_BOOL = np.dtype(bool)
_VECTOR_COLUMN = {VectorColumn}


def _is_vcol(x: Any) -> bool:
    return isinstance(x, VectorColumn)


class VectorTrajectoryWriter(StreamWriter):
    """Appends a batch of steps, one per environment, and creates their items in one call.

    Obtain one with ``client.vector_writer(num_envs, num_keep_alive_refs)``. Not thread-safe.

    Args:
      transport: the client's transport.
      num_envs: the number of environments (lanes); every leaf of a step has this leading
        dimension.
      num_keep_alive_refs: how many of each environment's newest steps items may refer to.
      validate_items: check table names, priorities and signatures (once per layout).
      max_chunk_length: rows per chunk of each environment; default sizes chunks by bytes.
      max_pending_items: items created but not yet in their tables before ``create_items``
        blocks (default as for ``trajectory_writer``).
      signature_timeout_ms: how long to wait for a table's signature; ``None`` waits forever.

    Example:
      >>> with client.vector_writer(num_envs=16, num_keep_alive_refs=2) as w:
      ...     obs, _ = envs.reset(seed=0)
      ...     for t in range(1000):
      ...         actions = policy(obs)
      ...         next_obs, rewards, terminated, truncated, _ = envs.step(actions)
      ...         w.append({"obs": obs, "action": actions, "reward": rewards})
      ...         w.create_items("replay", 1.0, {"obs": w.history["obs"][-2:],
      ...                                        "action": w.history["action"][-1]},
      ...                        mask=w.episode_steps >= 2)
      ...         w.end_episode(terminated | truncated)
      ...         obs = next_obs
    """

    def __init__(
        self,
        transport: Transport,
        num_envs: int,
        num_keep_alive_refs: int,
        *,
        validate_items: bool = True,
        max_chunk_length: int | None = None,
        max_pending_items: int | None = None,
        signature_timeout_ms: int | None = None,
    ):
        self._n = positive_int("num_envs", num_envs)
        self._keep = positive_int("num_keep_alive_refs", num_keep_alive_refs)
        positive_int("max_chunk_length", max_chunk_length, none_ok=True)
        positive_int("max_pending_items", max_pending_items, none_ok=True)
        self._max_chunk_length = max_chunk_length
        self._validate = bool(validate_items)
        self._validator = ItemValidator(transport, signature_timeout_ms)
        self._columns: list[Lanes] = []
        self._treespec: Any = None
        self._keys: tuple[Any, ...] | None = None  # a flat dict's keys, in its order
        self._dict_order: list[Lanes] | None = None  # those keys' columns
        self._history: Any = None
        self._traj_getters: dict[int, Any] = {}  # see _columns_of
        self._steps = np.zeros(self._n, np.int64)  # a row of _grid once there are columns
        self._grid = self._steps[None]
        self._grid_ones = np.ones_like(self._grid)  # see append
        #: steps_at_least's right-hand sides: numpy compares an array with an array of the
        #: same shape for about 60% of what it takes with a Python int.
        self._at_least: dict[int, np.ndarray] = {}
        self._minsteps = 0  # a lower bound on every environment's episode steps
        self._all = np.arange(self._n)
        #: Per trajectory layout: its squeeze flags and how far back it reaches.
        self._layouts: dict[tuple[Any, ...], tuple[tuple[bool, ...], int]] = {}
        # The columns of the last create_items call and their layout (most callers pass the
        # same columns every time: one identity comparison instead of the layout's tuple).
        self._last_cols: tuple[VectorColumn, ...] = ()
        self._last_layout: tuple[Any, ...] = ((), (), 0)
        self._episodes = [new_key() for _ in range(self._n)]
        self._closed = False
        self._stream = transport.writer_stream(
            self._keep_keys, None if max_pending_items is None else int(max_pending_items)
        )
        #: Works out where the items' rows are, when the stream takes that (in-process).
        self._locator: Locator | None = None

    # -- properties -----------------------------------------------------------------------------
    @property
    def num_envs(self) -> int:
        return self._n

    @property
    def episode_steps(self) -> np.ndarray:
        """Steps appended to each environment's episode (a copy, int64)."""
        return self._steps.copy()

    @property
    def min_episode_steps(self) -> int:
        """A lower bound on every environment's :attr:`episode_steps` (no numpy call): when
        it reaches an item's length, ``create_items`` needs no mask."""
        return self._minsteps

    def steps_at_least(self, n: int) -> np.ndarray:
        """Per environment, whether its episode has at least ``n`` steps: a mask for
        :meth:`create_items` (``episode_steps >= n`` without the copy)."""
        if type(n) is not int or not -(2**62) < n < 2**62:  # a float, a numpy integer, ...
            return self._steps >= n
        bound = self._at_least.get(n)
        if bound is None:
            if len(self._at_least) >= 64:
                self._at_least.clear()
            bound = self._at_least[n] = np.full(self._n, n, np.int64)
        return self._steps >= bound

    @property
    def history(self) -> Any:
        """The step structure with each leaf replaced by its :class:`VectorColumnHistory`."""
        if self._history is None:
            raise RuntimeError(
                "history cannot be accessed before `append` is called at least once."
            )
        return self._history

    # -- append ---------------------------------------------------------------------------------
    def _mask(self, mask: Any, name: str = "mask") -> np.ndarray | None:
        """``mask`` as the indices of the selected lanes, or None for all of them."""
        if mask is None:
            return None
        m = mask if type(mask) is np.ndarray else np.asarray(mask)
        if (m.dtype is not _BOOL and m.dtype != bool) or m.shape != (self._n,):
            raise ValueError(
                f"{name} must be None or a bool array of shape ({self._n},) (one flag per "
                f"environment); got {m.dtype} {m.shape}"
            )
        idx = m.nonzero()[0]  # a quarter of np.flatnonzero's cost (its Python wrappers)
        return None if len(idx) == self._n else idx

    def _learn(self, step: Any) -> None:
        paths, leaves, spec = optree.tree_flatten_with_path(step, none_is_leaf=True)
        if not leaves:
            raise ValueError("a step must have at least one leaf")
        cols = []
        for i, (p, leaf) in enumerate(zip(paths, leaves)):
            if leaf is None:
                raise ValueError(
                    f"leaf {column_name(tuple(p))} is None: a VectorTrajectoryWriter writes every "
                    "column at every step"
                )
            col = Lanes(tuple(p), i, self._n, self._keep)
            arr = self._array(leaf, col)
            col.first(arr, self._max_chunk_length)
            cols.append(col)
        # Every column's positions (rows) and the episode step counts, one row each: an
        # append advances all of them with one numpy call (see Lanes.store).
        grid = np.zeros((len(cols) + 1, self._n), np.int64)
        for col, row in zip(cols, grid):
            col.pos = row
        grid[-1] = self._steps
        self._steps = grid[-1]
        self._grid = grid
        self._grid_ones = np.ones_like(grid)
        if getattr(self._stream, "takes_located_calls", False):
            self._locator = Locator(grid)
        self._columns = cols
        self._treespec = spec
        self._history = optree.tree_unflatten(spec, [VectorColumnHistory(c, self) for c in cols])
        if type(step) is dict and all(type(k) is str for k in step):
            self._keys = tuple(step)
            by_path = {c.path: c for c in cols}
            self._dict_order = [by_path[(k,)] for k in step]

    def _array(self, leaf: Any, col: Lanes) -> np.ndarray:
        arr = leaf if type(leaf) is np.ndarray else np.asarray(leaf)
        if arr.ndim == 0 or arr.shape[0] != self._n:
            raise ValueError(
                f"column {column_name(col.path)} has shape {arr.shape}, but a writer for "
                f"num_envs={self._n} needs a leading dimension of {self._n} on every leaf"
            )
        return arr

    def append(self, step: Any, mask: Any = None) -> None:
        """Appends one step to every environment (or to those ``mask`` selects).

        Args:
          step: a nest whose leaves all have a leading dimension of ``num_envs`` (row ``i``
            is environment ``i``'s value). The structure, dtypes and shapes are those of the
            first step.
          mask: ``None`` (every environment) or a bool array of shape ``(num_envs,)``; rows
            of unselected environments are ignored.

        Raises:
          ValueError: a leaf's leading dimension, dtype or shape differs; another structure.
        """
        if self._closed:
            self._check_usable()
        lanes = self._mask(mask)
        if self._columns and type(step) is dict and tuple(step) == self._keys:
            cols = self._dict_order
            leaves = list(step.values())
        else:
            if not self._columns:
                self._learn(step)
            leaves, spec = optree.tree_flatten(step, none_is_leaf=True)
            if spec != self._treespec:
                raise ValueError(
                    f"step structure {spec} differs from the first step's {self._treespec}"
                )
            cols = self._columns
        arrays = []
        n = self._n
        for leaf, col in zip(leaves, cols):  # type: ignore[arg-type]
            arr = leaf if type(leaf) is np.ndarray else np.asarray(leaf)
            s = arr.shape
            if not s or s[0] != n:
                self._array(arr, col)  # raises
            if (arr.dtype is not col.dtype and arr.dtype != col.dtype) or s[1:] != col.shape:
                col.check(arr)  # raises
            arrays.append(arr)
        if lanes is not None and not len(lanes):
            return  # checked, nothing to write
        made: dict[int, tuple[list[int], int]] | None = None  # rows per chunk -> make_room's
        for arr, col in zip(arrays, cols):  # type: ignore[arg-type]
            if col.room <= 0:  # some lane's chunk may be full or closed: look
                # Columns with as many rows per chunk need room in the same lanes (see Lanes).
                if made is None:
                    made = {}
                done = made.get(col.rows)
                if done is None:
                    made[col.rows] = col.make_room(lanes, self._episodes)
                else:
                    col.make_room_as(done, self._episodes)
            col.store(arr, lanes)
        if lanes is None:
            # Every column's positions and the step counts (an array of ones: numpy adds a
            # Python int for about 1.6 times as much).
            self._grid += self._grid_ones
            self._minsteps += 1
        else:
            self._grid[:, lanes] += 1

    # -- items ----------------------------------------------------------------------------------
    def _columns_of(self, trajectory: Any) -> Sequence[VectorColumn]:
        if type(trajectory) is dict and trajectory:
            # The columns in the order of the sorted keys, taken out by the getter of the
            # keys last seen in a dict of as many (writers.packing.tuple_getter).
            n = len(trajectory)
            getter = self._traj_getters.get(n)
            try:
                cols = getter(trajectory) if getter is not None else None
            except KeyError:
                cols = None
            if cols is None:
                getter = self._traj_getters[n] = tuple_getter(sorted(trajectory))
                cols = getter(trajectory)
            if set(map(type, cols)) == _VECTOR_COLUMN:
                return cols
        cols = optree.tree_leaves(trajectory, is_leaf=_is_vcol, none_is_leaf=True)
        if not cols:
            raise ValueError("trajectory must not be empty.")
        for c in cols:
            if not isinstance(c, VectorColumn):
                raise TypeError(
                    "All leaves of `trajectory` must be columns of this writer's history "
                    f"(writer.history[...][-k:]) but got {type(c).__name__}"
                )
            if c.lanes not in self._columns:
                raise ValueError(f"column {c!r} is not from this writer's history")
        return cols

    def create_items(
        self,
        table: str,
        priority: Any,
        trajectory: Any,
        *,
        mask: Any = None,
        timeout_ms: int | None = None,
    ) -> int:
        """Creates one item per selected environment from its own steps.

        Args:
          table: the table's name.
          priority: one priority for all items, or an array of ``num_envs`` (entry ``i`` for
            environment ``i``).
          trajectory: a nest of columns from :attr:`history` (``history["obs"][-k:]``).
          mask: ``None`` (every environment) or a bool array of shape ``(num_envs,)``. Every
            selected environment must have at least as many steps in its episode as the
            trajectory reaches back.
          timeout_ms: how long to wait when ``max_pending_items`` items already wait for
            their tables; ``None`` waits forever.

        Returns:
          The number of items created.

        Raises:
          ValueError: a NaN priority, an environment without enough steps, a column that does
            not match the table's signature. No item of the call is created then.
        """
        return self._create_items(table, priority, trajectory, mask, timeout_ms, False)

    def _create_items(
        self,
        table: str,
        priority: Any,
        trajectory: Any,
        mask: Any,
        timeout_ms: int | None,
        steps_checked: bool,
    ) -> int:
        """:meth:`create_items`. ``steps_checked``: every environment ``mask`` selects is known
        to have as many steps as ``trajectory`` reaches back (a batched observer's mask from
        :meth:`steps_at_least` of its window's length), so they are not counted again."""
        if self._closed:
            self._check_usable()
        lanes = self._mask(mask)
        sel = self._all if lanes is None else lanes
        count = len(sel)
        if not count:
            return 0
        cols = self._columns_of(trajectory)
        prios: Any = None
        if type(priority) is float or type(priority) is int or np.ndim(priority) == 0:
            p = float(priority)
            if p != p:
                raise ValueError("`priority` must not be nan.")
        else:
            prio = np.asarray(priority, dtype=np.float64)
            if prio.shape != (self._n,):
                raise ValueError(
                    f"priority must be a number or an array of shape ({self._n},); got "
                    f"shape {prio.shape}"
                )
            prios = prio[sel]
            if np.isnan(prios).any():
                raise ValueError("`priority` must not be nan.")
            p = float(prios.min())
        key = tuple(cols)
        if key == self._last_cols:  # the same column objects as last time (by identity)
            layout, sq, reach = self._last_layout
        else:
            layout = tuple((c.lanes.index, c.back, c.length, c.squeeze) for c in cols)
            known = self._layouts.get(layout)
            if known is None:
                known = self._layouts[layout] = (
                    items_lib.intern_squeeze([c.squeeze for c in cols]),
                    max(c.back for c in cols),
                )
            sq, reach = known
            self._last_cols = key
            self._last_layout = (layout, sq, reach)
        if not steps_checked and (reach > self._minsteps or lanes is not None):
            short = self._steps[sel] < reach
            if np.count_nonzero(short):
                env = int(sel[np.flatnonzero(short)[0]])
                raise ValueError(
                    f"environment {env} has {int(self._steps[env])} steps in its episode, but "
                    f"the trajectory reaches {reach} steps back; select environments with "
                    f"enough steps through mask= (e.g. mask=writer.episode_steps >= {reach})"
                )
        if self._validate and (table not in self._validator.trivially_valid or p < 0):
            self._validator.validate_layout(
                table, p, sq, layout, [(c.lanes.dtype, c.shape, None) for c in cols]
            )
        # Packed trajectories, and each column's chunks while every item is in its lanes'
        # current chunks (then the table is told where the items' rows are: vector_rows).
        packed, chunks = pack_items(cols, lanes, sel, count, self._locator is not None)
        keys = new_keys(count)
        items = list(
            zip(keys, repeat(p, count) if prios is None else prios.tolist(), packed, repeat(sq))
        )
        deadline = _NEVER if timeout_ms is None else Deadline.from_ms(timeout_ms)
        try:
            if chunks is not None:  # an in-process stream: it takes where the rows are
                located = self._locator.locate(cols, layout, lanes, chunks)  # type: ignore[union-attr]
                self._stream.insert(table, items, deadline, located)  # type: ignore[call-arg]
            else:
                self._stream.insert(table, items, deadline)
        except errors.DeadlineExceededError as e:
            raise errors.DeadlineExceededError(
                f"create_items waited for the server to accept pending items: {e}"
            ) from e
        return count

    def _keep_keys(self) -> set[int]:
        keys: set[int] = set()
        for col in list(self._columns):
            keys |= col.chunk_keys()
        return keys

    # -- episodes, flush, lifecycle ---------------------------------------------------------------
    def end_episode(self, mask: Any = None, *, clear_buffers: bool = True) -> None:
        """Starts a new episode in the selected environments (default all).

        Their chunks are closed; with ``clear_buffers`` their history is emptied (and
        ``episode_steps`` set to 0). Unlike ``TrajectoryWriter.end_episode`` this does not
        wait for the items already created: call :meth:`flush` for that.
        """
        if self._closed:
            self._check_usable()
        lanes = self._mask(mask)
        idx = range(self._n) if lanes is None else lanes.tolist()
        for i in idx:
            for col in self._columns:
                col.close_lane(i, clear_buffers)
            self._episodes[i] = new_key()
            if clear_buffers:
                self._steps[i] = 0
                self._minsteps = 0
        for col in self._columns:
            col.set_common(None)

    def _release_spare_rows(self) -> None:
        for col in self._columns:
            for i in range(self._n):
                col.close_lane(i, True)

    def __enter__(self) -> VectorTrajectoryWriter:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            if exc_type is None and not self._closed:
                self.flush()
        finally:
            self.close()

    def __repr__(self) -> str:
        return (
            f"VectorTrajectoryWriter(num_envs={self._n}, columns={len(self._columns)}, "
            f"pending={self._stream.pending()}, closed={self._closed})"
        )
