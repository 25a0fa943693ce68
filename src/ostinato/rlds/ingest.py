"""Whole, checked episodes from a stream of trajectories into an observer or tables.

:class:`UnitWriter` takes :class:`~ostinato.rlds.steps.TrajectoryChunk` s in order and hands a
sink one *unit* at a time: the trajectories up to and including a boundary (``step_type``
LAST), or up to a change of episode. A unit is handed over only once every step of it was
checked, so a malformed step raises before anything of its episode reaches the sink (units
before it were written). Sinks: :class:`ObserverSink` (any observer, one trajectory per call)
and :class:`TableSink` (a trajectory writer making TF-Agents' ``ReverbAddTrajectoryObserver``
windows from whole columns, without the per-step work of an observer).
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import optree

from ostinato.rlds.steps import TrajectoryChunk
from ostinato.rlds.trajectory import StepType
from ostinato.validate import is_real, positive_int

_log = logging.getLogger("ostinato.rlds")

ErrorFactory = Callable[[str], Exception]


def _tree_map(fn: Any, tree: Any, *rest: Any) -> Any:
    return optree.tree_map(fn, tree, *rest, none_is_leaf=False)


class Progress:
    """A rich progress line (steps, episodes, steps/s) when shown; a log line otherwise."""

    def __init__(self, show: bool | None, description: str = "RLDS -> table"):
        self.show = sys.stderr.isatty() if show is None else bool(show)
        self.start = time.perf_counter()
        self._bar: Any = None
        if self.show:
            from rich.console import Console
            from rich.progress import Progress as Bar
            from rich.progress import SpinnerColumn, TextColumn, TimeElapsedColumn

            self._bar = Bar(
                SpinnerColumn(),
                TextColumn("{task.description}"),
                TextColumn("{task.fields[steps]:,} steps"),
                TextColumn("{task.fields[episodes]:,} episodes"),
                TextColumn("{task.fields[rate]:,.0f} steps/s"),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=False,
            )
            self._bar.start()
            self._task = self._bar.add_task(description, steps=0, episodes=0, rate=0.0)

    def update(self, steps: int, episodes: int) -> None:
        if self._bar is not None:
            rate = steps / max(time.perf_counter() - self.start, 1e-9)
            self._bar.update(self._task, steps=steps, episodes=episodes, rate=rate)

    def finish(self, steps: int, episodes: int, failed: bool) -> str:
        elapsed = time.perf_counter() - self.start
        rate = steps / max(elapsed, 1e-9)
        line = (
            f"{'Stopped after pushing' if failed else 'Pushed'} {steps:,} steps "
            f"({episodes:,} episodes) in {elapsed:.2f} s, {rate:,.0f} steps/s"
        )
        if self._bar is not None:
            self.update(steps, episodes)
            self._bar.stop()
            self._bar.console.print(line)
        _log.info("%s", line)
        return line


class UnitWriter:
    """Groups trajectory chunks into units and writes each whole, checked unit to a sink.

    Args:
      sink: has ``write(trajectory)`` taking a trajectory of arrays (leading dim: steps).
      progress: a :class:`Progress`.
      make_error: builds the exception raised for a malformed step from its message.
    """

    def __init__(self, sink: Any, progress: Progress, make_error: ErrorFactory):
        self._sink = sink
        self._progress = progress
        self._make_error = make_error
        self._pending: list[Any] = []
        self._pending_episode: Any = None
        self.written = 0
        self.episodes = 0

    def _deliver(self) -> None:
        # The unit's parts go to the sink one after the other (sinks take rows in order and
        # keep their state between calls): joining them would copy the whole episode again.
        parts, self._pending = self._pending, []
        for part in parts:
            self._sink.write(part)
            self.written += len(part.step_type)
        self.episodes += 1
        self._progress.update(self.written, self.episodes)

    def fail(self, message: str, error_type: ErrorFactory | None = None) -> Exception:
        """The exception for a malformed step: ``message`` and what was written before it."""
        make = error_type or self._make_error
        return make(
            f"{message} -- nothing of this episode was written; {self.written} "
            f"trajectories of {self.episodes} earlier episodes were."
        )

    def feed(self, chunk: TrajectoryChunk | None, error_type: ErrorFactory | None = None) -> None:
        """Writes the units ``chunk`` completes; raises at its error (if any), after writing
        the units before the malformed step. ``None`` (what a
        :class:`~ostinato.rlds.steps.Converter` returns when a chunk completes no trajectory)
        writes nothing.

        The grouping is per step: at a step of another episode than the pending ones, they
        are written (unless that step is malformed); a step whose ``step_type`` is LAST is
        added and the unit written.
        """
        if chunk is None:
            return
        n = len(chunk)
        limit = chunk.error[0] if chunk.error is not None else n
        if limit > 0:
            episodes = chunk.episode
            cuts = set((np.nonzero(episodes[1:limit] != episodes[: limit - 1])[0] + 1).tolist())
            step_type = np.asarray(chunk.trajectory.step_type[:limit])
            cuts.update((np.nonzero(step_type == StepType.LAST)[0] + 1).tolist())
            if self._pending and episodes[0] != self._pending_episode:
                cuts.add(0)
            start = 0
            for cut in sorted(cuts):
                if cut > start:
                    s = slice(start, cut)
                    self._pending.append(_tree_map(lambda a, s=s: a[s], chunk.trajectory))
                if self._pending:
                    self._deliver()
                start = cut
            if start < limit:
                s = slice(start, limit)
                self._pending.append(_tree_map(lambda a: a[s], chunk.trajectory))
            self._pending_episode = episodes[limit - 1]
        if chunk.error is not None:
            raise self.fail(chunk.error[1], error_type)

    def finish(self) -> None:
        """Writes the last unit (the data ended)."""
        if self._pending:
            self._deliver()


class ObserverSink:
    """Calls an observer with one trajectory (of numpy values) per step."""

    def __init__(self, observer: Any):
        self._observer = observer

    def write(self, trajectory: Any) -> None:
        leaves, treedef = optree.tree_flatten(trajectory, none_is_leaf=False)
        observer, unflatten = self._observer, optree.tree_unflatten
        for row in zip(*[list(leaf) for leaf in leaves]):
            observer(unflatten(treedef, row))


def table_signature(client: Any, table: str, timeout: float | None = None) -> Any:
    """The signature of ``table`` on ``client``'s server (``None`` if it has none).

    Raises:
      ostinato.errors.TableNotFoundError: the server has no such table.
    """
    from ostinato.errors import TableNotFoundError

    info = client.server_info(None if timeout is None else max(1, int(np.ceil(timeout))))
    if table not in info:
        raise TableNotFoundError(table, sorted(info))
    return info[table].signature


#: How often (in items) a TableSink with ``max_pending_items`` looks at the pending count.
PACE_EVERY = 64


def _timeout_ms(timeout: float | None) -> int | None:
    return None if timeout is None else max(0, int(timeout * 1000))


class TableSink:
    """TF-Agents' ``ReverbAddTrajectoryObserver`` windows, written from whole columns.

    Writes exactly the items :class:`ostinato.observers.TrajectoryObserver` would write when
    called with the same trajectories one at a time (``sequence_length`` windows every
    ``stride_length`` steps, never across a boundary; padding and tiling at boundaries), with
    one trajectory writer and without the observer's per-step work. Items hold the
    trajectory's leaves as columns in its flattened order (what the table's signature, if
    any, describes).

    Args:
      client: an :class:`ostinato.Client` (embedded or networked).
      tables: a table name or a sequence of names; every item goes to each (the data is
        stored once).
      sequence_length, stride_length, priority, pad_end_of_episodes, tile_end_of_episodes:
        as :class:`~ostinato.observers.TrajectoryObserver`'s.
      timeout: seconds any one blocking wait may take (for the rate limiter or the server to
        take items, the final flush); ``None``: no limit.
      max_pending_items: items created but not yet confirmed by the server at most; the sink
        waits for the server beyond that (checked every :data:`PACE_EVERY` items). Over gRPC
        this keeps insert requests small, so that the server answers samplers between them;
        ``None``: the writer's own limits.
      max_steps_per_second: write at most this many steps per second (sleeping when ahead),
        to leave a busy server's time to its samplers; ``None``: as fast as it goes.

    Raises:
      ValueError: an argument is invalid (the message names it).
    """

    def __init__(
        self,
        client: Any,
        tables: Any,
        sequence_length: int,
        stride_length: int = 1,
        priority: float = 1.0,
        pad_end_of_episodes: bool = False,
        tile_end_of_episodes: bool = False,
        timeout: float | None = None,
        max_pending_items: int | None = None,
        max_steps_per_second: float | None = None,
    ):
        from ostinato.observers.base import flag, priority_value, table_names

        if client is None or not callable(getattr(client, "trajectory_writer", None)):
            raise ValueError(f"client ({client!r}) must be an ostinato Client")
        self._tables = table_names(tables)
        self._length = positive_int("sequence_length", sequence_length)
        self._stride = positive_int("stride_length", stride_length)
        self._priority = priority_value(priority)
        self._pad = flag(pad_end_of_episodes, "pad_end_of_episodes")
        self._tile = flag(tile_end_of_episodes, "tile_end_of_episodes")
        if self._tile and not self._pad:
            raise ValueError(
                "Must set `pad_end_of_episodes=True` when using `tile_end_of_episodes`"
            )
        if timeout is not None and (not is_real(timeout) or not timeout >= 0):
            raise ValueError(f"timeout ({timeout!r}) must be None or a number of seconds >= 0")
        self._timeout_ms = _timeout_ms(timeout)
        self._max_pending = (
            None
            if max_pending_items is None
            else positive_int("max_pending_items", max_pending_items)
        )
        self._created = 0
        if max_steps_per_second is not None and (
            not is_real(max_steps_per_second) or not max_steps_per_second > 0
        ):
            raise ValueError(
                f"max_steps_per_second ({max_steps_per_second!r}) must be None or a number > 0"
            )
        self._rate = max_steps_per_second
        self._steps = 0
        self._start: float | None = None
        self._writer = client.trajectory_writer(num_keep_alive_refs=self._length + 1)
        self._keys: list[str] | None = None
        self._history: list[Any] | None = None
        self._boundary_leaf = 0
        self._next_type_leaf = 0
        self._cached = 0

    @property
    def tables(self) -> tuple[str, ...]:
        return self._tables

    def _learn(self, trajectory: Any) -> None:
        step_type, next_step_type = object(), object()
        marked = optree.tree_leaves(
            trajectory._replace(step_type=step_type, next_step_type=next_step_type),
            none_is_leaf=False,
        )
        # Zero-padded keys: a dict's columns are in key order, here the trajectory's order.
        self._keys = [f"{i:05d}" for i in range(len(marked))]
        self._boundary_leaf = next(i for i, x in enumerate(marked) if x is step_type)
        self._next_type_leaf = next(i for i, x in enumerate(marked) if x is next_step_type)

    def _create_items(self) -> None:
        if self._history is None:
            history = self._writer.history
            self._history = [history[k] for k in self._keys]  # type: ignore[union-attr]
        n = -self._length
        item = {k: h[n:] for k, h in zip(self._keys, self._history)}  # type: ignore[arg-type]
        for table in self._tables:
            self._writer.create_item(table, self._priority, item, timeout_ms=self._timeout_ms)
        self._created += 1
        if self._max_pending is not None and self._created % PACE_EVERY == 0:
            self._writer.flush(block_until_num_items=self._max_pending, timeout_ms=self._timeout_ms)

    def _append(self, row: Any) -> None:
        self._writer.append(dict(zip(self._keys, row)))  # type: ignore[arg-type]
        self._cached += 1
        c, n = self._cached, self._length
        if c >= n and (c - n) % self._stride == 0:
            self._create_items()

    def _end_episode(self, boundary_row: Any) -> None:
        if self._pad:
            # TF-Agents' padding step: zeros, step_type LAST, next_step_type FIRST.
            pad = [np.zeros_like(np.asarray(x)) for x in boundary_row]
            for i, value in (
                (self._boundary_leaf, StepType.LAST),
                (self._next_type_leaf, StepType.FIRST),
            ):
                pad[i] = np.asarray(int(value), dtype=pad[i].dtype)
            count = self._length - 1 if self._tile else self._length - self._cached
            for _ in range(count):
                self._append(pad)
        self._cached = 0

    def _pace(self, steps: int) -> None:
        """Sleeps until ``steps`` more steps are due at ``max_steps_per_second``."""
        now = time.perf_counter()
        if self._start is None:
            self._start = now
        self._steps += steps
        ahead = self._steps / self._rate - (now - self._start)  # type: ignore[operator]
        if ahead > 0:
            time.sleep(ahead)

    def write(self, trajectory: Any) -> None:
        """Appends every step of ``trajectory`` (arrays with a leading time dimension)."""
        if self._keys is None:
            self._learn(trajectory)
        if self._rate is not None:
            # In slices of PACE_EVERY steps, so that a long episode is paced too.
            n = len(trajectory.step_type)
            for start in range(0, n, PACE_EVERY):
                s = slice(start, min(n, start + PACE_EVERY))
                self._pace(s.stop - s.start)
                self._write(_tree_map(lambda a, s=s: a[s], trajectory))
            return
        self._write(trajectory)

    def _write(self, trajectory: Any) -> None:
        leaves = optree.tree_leaves(trajectory, none_is_leaf=False)
        boundary = (np.asarray(leaves[self._boundary_leaf]) == StepType.LAST).tolist()
        append, keys = self._writer.append, self._keys
        n, stride = self._length, self._stride
        for row, is_boundary in zip(zip(*[list(leaf) for leaf in leaves]), boundary):
            append(dict(zip(keys, row)))  # type: ignore[arg-type]
            c = self._cached = self._cached + 1
            if c >= n and (c - n) % stride == 0:
                self._create_items()
            if is_boundary:
                self._end_episode(row)

    def close(self, flush: bool = True) -> None:
        """Flushes (within the timeout, when ``flush``) and closes the writer."""
        try:
            if flush:
                self._writer.flush(timeout_ms=self._timeout_ms)
        finally:
            self._writer.close()

    def run(
        self, push: Callable[[], int], keep_on: tuple[type[BaseException], ...] = (ValueError,)
    ) -> int:
        """Calls ``push`` and closes the writer; returns what ``push`` returned.

        When ``push`` raises one of ``keep_on`` (a malformed episode), the items written before
        it are flushed (that episode's own were never handed to the writer); on any other
        exception the writer is closed without flushing.
        """
        try:
            count = push()
        except keep_on:
            self.close(flush=True)
            raise
        except BaseException:
            self.close(flush=False)
            raise
        self.close()
        return count
