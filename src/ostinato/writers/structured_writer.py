"""StructuredWriter: items built by static patterns from the newest steps (Reverb's API).

Where a :class:`~ostinato.TrajectoryWriter` leaves it to the caller to create items, a
structured writer is given configs up front (see :mod:`ostinato.writers.patterns`) and creates,
after each ``append`` and at ``end_episode``, the items whose conditions hold::

    from ostinato import structured_writer as sw

    step = {"obs": None, "action": None, "reward": None}
    transition = sw.create_config(
        sw.pattern_from_transform(step, lambda s: {
            "obs": s["obs"][-2], "action": s["action"][-2], "reward": s["reward"][-2],
            "next_obs": s["obs"][-1]}),
        table="replay")
    with client.structured_writer([transition]) as writer:
        for obs, action, reward in steps:
            writer.append({"obs": obs, "action": action, "reward": reward})
        writer.end_episode()

It is built on the trajectory writer: steps go through its chunking, history and sending, and
each item is a ``create_item`` with columns taken from its history. When items are made is
decided by :class:`PatternEngine`, which ``PatternDataset`` shares.

Rules (Reverb's, checked against dm-reverb 0.14):

* A config is tried once per step: after the ``append`` that opens the step, again after each
  ``append`` that adds to the same (partial) step until it created an item, and at
  ``end_episode`` (where ``Condition.is_end_episode()`` holds). It creates at most one item per
  step.
* It creates nothing while the history is shorter than its pattern reaches back, or when a step
  it reads has no value in the column (``None``, or not yet given in a partial step).
* ``steps_since_applied`` counts steps since the config last created an item (the first step
  counts 1) and carries over episodes. ``step_index`` is the step's index in its episode.
* Steps in which every column the configs read is ``None`` are not steps for the configs: no
  config is tried and ``steps_since_applied`` does not count them.
* Columns no config reads are not stored at all.

Differences from Reverb (each where Reverb failed silently or crashed):

* A pattern that reads a column the step does not have raises at the first ``append`` (Reverb
  never created an item, or crashed).
* ``Condition.data`` on a column that is not one integer or bool per step raises at ``append``
  (Reverb logged an error at each step and never created an item).
* Unknown tables are refused when the writer is made (Reverb failed at the first item).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import optree

from ostinato import errors
from ostinato.writers.pattern_validation import CompiledConfig, compile_configs
from ostinato.writers.trajectory_writer import TrajectoryWriter

if TYPE_CHECKING:
    from ostinato.transport.base import Transport


def _age(key: Any) -> int:
    return -(key.start if isinstance(key, slice) else key)


def _c_mod(x: int, mod: int) -> int:
    """``x % mod`` with C's sign rule (the remainder takes the sign of ``x``), as Reverb."""
    r = abs(x) % mod
    return -r if x < 0 else r


class PatternEngine:
    """Decides, step by step, which configs create an item (Reverb's rules).

    It holds no step data: the caller appends steps wherever it keeps them, tells the engine
    with :meth:`note_append`, and :meth:`apply` calls back for each config that should create
    an item now.

    Args:
      configs: the configs; validated here (``ValueError`` naming position and field).
    """

    def __init__(self, configs: Sequence[Any]):
        self.configs: list[CompiledConfig] = compile_configs(configs)
        ages: dict[int, int] = {}
        data_columns: dict[int, str] = {}
        for c in self.configs:
            for column, key in c.nodes:
                ages[column] = max(ages.get(column, 0), _age(key))
            for k, cond in enumerate(c.conditions):
                if cond[1] >= 0:
                    ages[cond[1]] = max(ages.get(cond[1], 0), 1)
                    data_columns.setdefault(cond[1], f"configs[{c.position}].conditions[{k}]")
        #: Column -> how many of its newest steps the configs read.
        self.column_ages = dict(sorted(ages.items()))
        self.max_age = max(ages.values())
        self._data_columns = data_columns
        # Per config: [step it last created an item at, step it was last tried at, steps since].
        self._states: list[list[Any]] = [[None, None, 0] for _ in self.configs]
        self._episode = 0
        self._step_index = -1
        self._newest: tuple[int, int] | None = None  # None: no step, or one holding nothing read
        self._buffered = 0  # steps appended since the history was last cleared
        self._open = False
        self._values: dict[int, int] = {}  # Condition.data values of the newest step

    @property
    def step_is_open(self) -> bool:
        return self._open

    def check_width(self, width: int) -> None:
        """Raises when a config reads a column beyond a step of ``width`` columns."""
        for c in self.configs:
            for j, (column, _) in enumerate(c.nodes):
                if column >= width:
                    raise ValueError(
                        f"Invalid configuration at position {c.position}: "
                        f"`flat[{j}].flat_source_index` ({column}) is out of range: the appended "
                        f"step has {width} columns (flattened)."
                    )
            for k, cond in enumerate(c.conditions):
                if cond[1] >= width:
                    raise ValueError(
                        f"Invalid configuration at position {c.position}: "
                        f"`conditions[{k}].flat_source_index` ({cond[1]}) is out of range: the "
                        f"appended step has {width} columns (flattened)."
                    )

    def check_values(self, leaves: Sequence[Any], paths: Sequence[Any]) -> None:
        """Raises when a column read by ``Condition.data`` is not one int or bool."""
        for column, where in self._data_columns.items():
            value = leaves[column]
            if value is None:
                continue
            arr = np.asarray(value)
            if arr.dtype.kind not in "biu" or arr.size != 1:
                raise ValueError(
                    f"{where} (Condition.data) reads column {column} (path {paths[column]}), which "
                    f"must hold one integer or bool per step, but got {arr.dtype} of shape "
                    f"{list(arr.shape)}."
                )

    def note_append(self, leaves: Sequence[Any], partial_step: bool) -> None:
        """Records an ``append`` of ``leaves`` (the flattened step; ``None`` = not given)."""
        if not self._open:
            self._step_index += 1
            self._buffered += 1
            self._values = {}
            holds = False
        else:
            holds = self._newest == (self._episode, self._step_index)
        if not holds:
            holds = any(leaves[c] is not None for c in self.column_ages)
        for column in self._data_columns:
            value = leaves[column]
            if value is not None:
                self._values[column] = int(np.asarray(value).reshape(-1)[0])
        self._newest = (self._episode, self._step_index) if holds else None
        self._open = partial_step

    def apply(self, is_end_episode: bool, make_item: Callable[[CompiledConfig], bool]) -> None:
        """Calls ``make_item(config)`` for each config whose conditions hold at the newest step.

        ``make_item`` returns False when the item cannot be built (a step it reads holds no
        value); the config then counts as not applied.
        """
        current = self._newest
        if current is None:
            return
        for c, state in zip(self.configs, self._states):
            if state[0] == current:
                continue  # never twice at one step
            if state[1] != current:
                state[1] = current
                state[2] += 1
            if not self._all_hold(c.conditions, state[2], is_end_episode):
                continue
            if self._buffered < c.max_age or not make_item(c):
                continue
            state[0] = current
            state[2] = 0

    def _all_hold(self, conditions: Any, since: int, is_end_episode: bool) -> bool:
        # Apart from apply(): a generator there would make its locals cells on every step.
        return all(self._holds(cond, since, is_end_episode) for cond in conditions)

    def _holds(self, cond: tuple[Any, ...], since: int, is_end_episode: bool) -> bool:
        left, column, cmp, a, b, inverse = cond
        if left == "step_index":
            x = self._newest[1]  # type: ignore[index]
        elif left == "steps_since_applied":
            x = since
        elif left == "buffer_length":
            x = min(self._buffered, self.max_age)
        elif left == "is_end_episode":
            x = int(is_end_episode)
        else:
            value = self._values.get(column)
            if value is None:
                return False  # the newest step has no value there: false, even when inverted
            x = value
        if cmp == "eq":
            result = x == a
        elif cmp == "ge":
            result = x >= a
        else:
            result = _c_mod(x, a) == b
        return result != inverse

    def end_episode(self, clear_buffers: bool) -> None:
        """Starts a new episode (step indices from 0); ``clear_buffers`` forgets the history."""
        self._episode += 1
        self._step_index = -1
        self._open = False
        if clear_buffers:
            self._buffered = 0
            self._newest = None


def _column_key(path: tuple[Any, ...], taken: set[str]) -> str:
    key = "/".join(map(str, path)) or "step"
    while key in taken:
        key += "'"
    taken.add(key)
    return key


class StructuredWriter:
    """Appends steps and creates the items that its configs describe.

    Obtain one with ``client.structured_writer(configs)``. Not thread-safe: use one writer per
    thread. The step must flatten to the same number of columns at every ``append``.

    Args:
      transport: the client's transport.
      configs: :class:`~ostinato.writers.patterns.Config` objects (from ``create_config``).
      max_pending_items: (Ostinato only) items held back by rate limiters before ``append``
        blocks (see :class:`~ostinato.TrajectoryWriter`).

    Raises:
      ValueError: no configs, or an invalid one (the message names its position and field).
      TableNotFoundError: a config names a table the server does not have.
    """

    def __init__(
        self, transport: Transport, configs: Sequence[Any], *, max_pending_items: int | None = None
    ):
        self._engine = PatternEngine(configs)
        checked: set[str] = set()
        for c in self._engine.configs:
            if c.table in checked:
                continue
            try:
                transport.table_meta(c.table)
            except errors.TableNotFoundError as e:
                err = errors.TableNotFoundError(c.table, e.available)
                err.args = (
                    f"Invalid configuration at position {c.position}: `table` "
                    f"({c.table!r}) is not a table of the server. Available tables: "
                    f"{', '.join(err.available) or '(none)'}.",
                )
                raise err from None
            checked.add(c.table)
        kwargs: dict[str, Any] = {}
        if max_pending_items is not None:
            kwargs["max_pending_items"] = max_pending_items
        self._writer = TrajectoryWriter(transport, self._engine.max_age, **kwargs)
        self._width: int | None = None
        self._paths: list[tuple[Any, ...]] = []
        self._keys: dict[int, str] = {}
        self._history: dict[int, Any] = {}

    def _learn(self, data: Any) -> None:
        paths = [tuple(p) for p in optree.tree_paths(data, none_is_leaf=True)]
        self._engine.check_width(len(paths))
        taken: set[str] = set()
        self._keys = {c: _column_key(paths[c], taken) for c in self._engine.column_ages}
        for column, key in self._keys.items():
            self._writer.configure(
                (key,), num_keep_alive_refs=self._engine.column_ages[column], max_chunk_length=None
            )
        self._paths = paths
        self._width = len(paths)

    def append(self, data: Any, *, partial_step: bool = False) -> None:
        """Appends a step (or part of one), then creates the items whose conditions hold.

        Args:
          data: a nest of arrays/scalars with the same number of leaves at every call; leaves
            may be ``None`` (no value in that column at this step).
          partial_step: the step stays open; later ``append`` calls fill in the columns left
            ``None`` (each column at most once per step), the last one with
            ``partial_step=False``.

        Raises:
          ValueError: the step flattens to a different number of columns than the first, a
            column changes dtype or shape, or a column is given twice within one step.
        """
        leaves = optree.tree_leaves(data, none_is_leaf=True)
        if self._width is None:
            self._learn(data)
        elif len(leaves) != self._width:
            raise ValueError(
                f"Flattened data has an unexpected length, got {len(leaves)} but "
                f"wanted {self._width}."
            )
        self._engine.check_values(leaves, self._paths)
        # dict(zip(...)), not comprehensions: those would make this method's locals cells,
        # created on every step.
        keys = self._keys
        self._writer.append(
            dict(zip(keys.values(), map(leaves.__getitem__, keys))), partial_step=partial_step
        )
        if not self._history:
            self._history = dict(zip(keys, map(self._writer.history.__getitem__, keys.values())))
        self._engine.note_append(leaves, partial_step)
        self._engine.apply(False, self._create_item)

    def _create_item(self, config: CompiledConfig) -> bool:
        columns = []
        for column, key in config.nodes:
            try:
                columns.append(self._history[column][key])
            except ValueError:
                return False  # a step it reads has no value in this column
        if config.td is None:
            priority = config.constant_priority
        else:
            priority = _td_error_priority(config, columns, self._paths)
        # A dict keyed 0..n-1 keeps the flat order and takes create_item's fast path.
        self._writer.create_item(config.table, priority, dict(enumerate(columns)))
        return True

    def flush(self, block_until_num_items: int = 0, timeout_ms: int | None = None) -> None:
        """Waits until at most ``block_until_num_items`` items are not yet in their tables.

        See :meth:`ostinato.TrajectoryWriter.flush`.
        """
        self._writer.flush(block_until_num_items, timeout_ms)

    def end_episode(self, clear_buffers: bool = True, timeout_ms: int | None = None) -> None:
        """Creates the items of configs that hold at the episode's end, flushes, and starts a
        new episode (an open partial step is closed).

        Args:
          clear_buffers: forget the history; with ``False`` patterns may reach into the
            previous episode.
          timeout_ms: as in :meth:`flush`; the new episode starts even when it times out.
        """
        self._engine.apply(True, self._create_item)
        try:
            self._writer.end_episode(clear_buffers, timeout_ms)
        finally:
            self._engine.end_episode(clear_buffers)

    @property
    def step_is_open(self) -> bool:
        """True if the latest ``append`` had ``partial_step=True``."""
        return self._engine.step_is_open

    @property
    def num_pending_items(self) -> int:
        """(Ostinato only) Items created but not yet confirmed by the server."""
        return self._writer.num_pending_items

    def close(self) -> None:
        """Stops the writer; items not yet accepted by the server are dropped (with a warning)."""
        self._writer.close()

    def __enter__(self) -> StructuredWriter:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self._writer.__exit__(exc_type, exc, tb)

    def __repr__(self) -> str:
        return (
            f"StructuredWriter(configs={len(self._engine.configs)}, "
            f"step_is_open={self.step_is_open}, writer={self._writer!r})"
        )


def _td_error_priority(config: CompiledConfig, columns: list[Any], paths: Sequence[Any]) -> float:
    weight, j = config.td  # type: ignore[misc]
    column = columns[j]
    values = column.numpy()
    if values.dtype.kind not in "biuf" or values.ndim != (0 if column.is_squeezed else 1):
        source = config.nodes[j][0]
        raise ValueError(
            f"Config at position {config.position}: the TD error priority reads column "
            f"{source} (path {paths[source]}), which must hold one number per step, but got "
            f"{values.dtype} of shape {list(values.shape)} for the item."
        )
    x = np.abs(values.astype(np.float64, copy=False))
    return float(weight * x.max() + (1.0 - weight) * x.mean())
