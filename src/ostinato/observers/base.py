"""What every observer shares: argument checks, the writer's lifecycle, gymnasium input."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any

import optree

from ostinato.observers.steps import GymEpisode
from ostinato.validate import is_real
from ostinato.writers.columns import ColumnHistory

_log = logging.getLogger("ostinato.observers")


def table_names(table_name: Any) -> tuple[str, ...]:
    """``table_name`` as a tuple of names: one string, or a non-empty sequence of strings."""
    if isinstance(table_name, str):
        names: tuple[Any, ...] = (table_name,)
    elif isinstance(table_name, Sequence) and not isinstance(table_name, (bytes, bytearray)):
        names = tuple(table_name)
    else:
        raise ValueError(f"table_name ({table_name!r}) must be a string or a sequence of strings")
    if not names or not all(isinstance(n, str) and n for n in names):
        raise ValueError(
            f"table_name ({table_name!r}) must be a non-empty string or a non-empty sequence of "
            "non-empty strings"
        )
    if len(set(names)) != len(names):
        raise ValueError(f"table_name ({table_name!r}) names a table twice")
    return names


def priority_value(value: Any, name: str = "priority") -> float:
    """``value`` as a float priority; a real, finite, non-NaN number (bools refused)."""
    if not is_real(value) or not math.isfinite(float(value)):
        raise ValueError(f"{name} ({value!r}) must be a finite real number")
    return float(value)


def flag(value: Any, name: str) -> bool:
    """``value`` as a bool; ValueError unless it is a bool (or numpy bool)."""
    if not isinstance(value, bool) and type(value).__name__ != "bool_":
        raise ValueError(f"{name} ({value!r}) must be a bool")
    return bool(value)


def _is_history(x: Any) -> bool:
    return isinstance(x, ColumnHistory)


class ObserverTargets:
    """Where an observer writes: its client, its tables and the priority of its items (the
    part of TF-Agents' observer API that unbatched and batched observers share)."""

    _py_client: Any
    _table_names: tuple[str, ...]
    _priority: float

    def _set_targets(self, py_client: Any, table_name: Any, priority: Any) -> None:
        """Checks and keeps the client, the table names and the priority.

        Raises:
          ValueError: ``py_client`` is not a client, or a table name or the priority is
            invalid (the message names it).
        """
        if py_client is None or not callable(getattr(py_client, "trajectory_writer", None)):
            raise ValueError(f"py_client ({py_client!r}) must be an ostinato (or Reverb) Client")
        self._py_client = py_client
        self._table_names = table_names(table_name)
        self._priority = priority_value(priority)

    @property
    def py_client(self) -> Any:
        """The client the observer writes through."""
        return self._py_client

    @property
    def table_names(self) -> tuple[str, ...]:
        """The tables every item goes to (the data is stored once)."""
        return self._table_names

    @property
    def priority(self) -> float:
        """The priority of the items created from now on."""
        return self._priority

    def update_priority(self, priority: float) -> None:
        """Sets the priority of items created from now on (items already written keep theirs).

        Raises:
          ValueError: ``priority`` is not a finite real number.
        """
        self._priority = priority_value(priority)

    def get_table_signature(self) -> Any:
        """The signature of the first table (all tables are assumed to share it)."""
        return self._py_client.server_info()[self._table_names[0]].signature


class ObserverBase(ObserverTargets):
    """Writer lifecycle and the parts of TF-Agents' observer API common to every observer.

    Subclasses set ``_num_keep_alive_refs`` and implement ``__call__`` and ``reset``.
    """

    _num_keep_alive_refs: int

    def __init__(
        self, py_client: Any, table_name: Any, priority: Any, *, validate_items: bool = True
    ):
        self._set_targets(py_client, table_name, priority)
        self._validate_items = flag(validate_items, "validate_items")
        self._writer: Any = None
        self._gym = GymEpisode()

    # -- writer ---------------------------------------------------------------------------------
    def _new_writer(self) -> Any:
        return self._py_client.trajectory_writer(
            num_keep_alive_refs=self._num_keep_alive_refs, validate_items=self._validate_items
        )

    def _get_writer(self) -> Any:
        if self._writer is None:
            raise ValueError(
                "Could not obtain writer from py_client: the observer is closed; call open() "
                "before using it again."
            )
        return self._writer

    def _window(self, start: int | None) -> Any:
        """The newest steps of the writer's history from ``start`` (``None``: all kept)."""
        history = self._get_writer().history
        s = slice(start, None)
        return optree.tree_map(lambda h: h[s], history, is_leaf=_is_history, none_is_leaf=False)

    def _create_items(self, trajectory: Any) -> None:
        writer = self._get_writer()
        for name in self._table_names:
            writer.create_item(table=name, trajectory=trajectory, priority=self._priority)

    def _end_episode(self) -> None:
        if self._writer is None:
            self.open()
        else:
            self._writer.end_episode()

    # -- TF-Agents API --------------------------------------------------------------------------
    def flush(self) -> None:
        """Blocks until every item created so far is in its table.

        Call it before training when the table's rate limiter has a timeout.
        """
        self._get_writer().flush()

    def open(self) -> None:
        """Opens a new writer after ``close()``; does nothing while one is open."""
        if self._writer is None:
            self._writer = self._new_writer()
            self._reset_state()

    def close(self) -> None:
        """Ends the episode (delivering the items already created), then closes the writer.

        Cached steps that were not written yet are dropped (call ``reset()`` first to write
        them). ``open()`` makes the observer usable again.
        """
        if self._writer is not None:
            try:
                self._writer.end_episode()
            finally:
                self._writer.close()
                self._writer = None
                self._gym = GymEpisode()
                self._reset_state()

    def __enter__(self) -> ObserverBase:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _reset_state(self) -> None:
        raise NotImplementedError

    # -- gymnasium ------------------------------------------------------------------------------
    def on_reset(self, obs: Any, info: Any = None) -> None:
        """Starts an episode with what ``env.reset()`` returned (nothing is written yet).

        ``info`` is accepted for symmetry with gymnasium and not stored. An episode that was
        still running (the environment was reset before it ended) is abandoned: its cached
        steps are dropped, as ``reset(write_cached_steps=False)`` drops them (call
        ``reset()`` first to write them).
        """
        if self._gym.in_progress:
            self._abandon_episode()
        self._gym.reset(obs)

    def _abandon_episode(self) -> None:
        self.reset(write_cached_steps=False)

    def reset(self, write_cached_steps: bool = True) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def on_step(
        self, obs: Any, action: Any, reward: Any, terminated: Any, truncated: Any, info: Any = None
    ) -> None:
        """Writes one gymnasium transition (see :mod:`ostinato.observers.steps`).

        Args:
          obs: the observation ``env.step(action)`` returned (the final one when the episode
            ended).
          action: the action given to ``env.step``.
          reward, terminated, truncated: what ``env.step`` returned.
          info: accepted and not stored.

        When ``terminated or truncated``, the episode's boundary step is written too and the
        next ``on_step`` needs an ``on_reset`` first.
        """
        for step in self._gym.step(obs, action, reward, terminated, truncated):
            self(step)

    def __call__(self, step: Any) -> None:  # pragma: no cover - abstract
        raise NotImplementedError
