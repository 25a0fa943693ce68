"""Fixed-length windows of steps: TF-Agents' ``ReverbAddTrajectoryObserver`` and
``ReverbTrajectorySequenceObserver`` semantics."""

from __future__ import annotations

from typing import Any

from ostinato.observers.base import ObserverBase, flag
from ostinato.observers.steps import check_step, is_boundary, padding_step
from ostinato.validate import positive_int


def window_arguments(
    sequence_length: Any, stride_length: Any, pad_end_of_episodes: Any, tile_end_of_episodes: Any
) -> tuple[int, int, bool, bool]:
    """The window arguments of the trajectory observers, checked.

    Raises:
      ValueError: an argument is invalid (the message names it), or ``tile_end_of_episodes``
        without ``pad_end_of_episodes``.
    """
    length = positive_int("sequence_length", sequence_length)
    stride = positive_int("stride_length", stride_length)
    pad = flag(pad_end_of_episodes, "pad_end_of_episodes")
    tile = flag(tile_end_of_episodes, "tile_end_of_episodes")
    if tile and not pad:
        raise ValueError("Must set `pad_end_of_episodes=True` when using `tile_end_of_episodes`")
    return length, stride, pad, tile


class TrajectoryObserver(ObserverBase):
    """Writes every window of ``sequence_length`` steps (every ``stride_length``-th) as an item.

    TF-Agents' ``ReverbAddTrajectoryObserver``, argument for argument: call it once per
    environment step. With ``L = sequence_length`` and ``S = stride_length``, the item written
    after the ``c``-th step of an episode (``c >= L`` and ``(c - L) % S == 0``) holds the last
    ``L`` steps: ``S = 1`` gives windows ``{0..L-1}, {1..L}, ...``, ``S = L`` disjoint windows.
    Windows never cross an episode boundary (a step whose ``step_type`` is LAST, which may be
    a window's last step); at a boundary the cache is dropped, or padded first when
    ``pad_end_of_episodes``. Without padding, an episode shorter than ``L`` steps (counting
    its boundary step) gives no item.

    Args:
      py_client: an :class:`ostinato.Client` (embedded or networked) or a Reverb client.
      table_name: one table name, or a sequence of names: each item goes to every table, and
        the data is stored once.
      sequence_length: ``L``, the number of steps in every item.
      stride_length: ``S``, steps between the starts of consecutive windows.
      priority: priority of the items (see :meth:`update_priority`).
      pad_end_of_episodes: at a boundary, append padding steps (zeros, ``step_type`` LAST,
        ``next_step_type`` FIRST) until one last window ending in padding is written:
        ``F M L P`` for ``L = 4`` after ``F M L``.
      tile_end_of_episodes: with padding, append ``L - 1`` padding steps, writing every
        window due by the stride rule: ``F M L P``, ``M L P P``, ``L P P P``.
      validate_items: (Ostinato only) check each item against the table's signature when it
        is created (TF-Agents turned this off); errors then name the column.

    Steps are TF-Agents ``Trajectory`` objects (or anything with ``is_boundary()``), step
    dicts with a ``"step_type"`` entry, or gymnasium transitions through :meth:`on_reset`
    and :meth:`on_step` (see :mod:`ostinato.observers.steps`).

    Raises:
      ValueError: an argument is invalid (the message names it), or ``tile_end_of_episodes``
        without ``pad_end_of_episodes``.

    Example:
      >>> observer = TrajectoryObserver(client, "replay", sequence_length=2)
      >>> obs, info = env.reset(seed=0)
      >>> observer.on_reset(obs, info)
      >>> for _ in range(1000):
      ...     action = env.action_space.sample()
      ...     obs, reward, terminated, truncated, info = env.step(action)
      ...     observer.on_step(obs, action, reward, terminated, truncated, info)
      ...     if terminated or truncated:
      ...         obs, info = env.reset()
      ...         observer.on_reset(obs, info)
    """

    def __init__(
        self,
        py_client: Any,
        table_name: Any,
        sequence_length: int,
        stride_length: int = 1,
        priority: float = 1,
        pad_end_of_episodes: bool = False,
        tile_end_of_episodes: bool = False,
        *,
        validate_items: bool = True,
    ):
        super().__init__(py_client, table_name, priority, validate_items=validate_items)
        (
            self._sequence_length,
            self._stride_length,
            self._pad_end_of_episodes,
            self._tile_end_of_episodes,
        ) = window_arguments(
            sequence_length, stride_length, pad_end_of_episodes, tile_end_of_episodes
        )
        self._num_keep_alive_refs = self._sequence_length + 1
        self._cached_steps = 0
        self._last_trajectory: Any = None
        self.open()

    def _reset_state(self) -> None:
        self._cached_steps = 0
        self._last_trajectory = None

    @property
    def sequence_length(self) -> int:
        return self._sequence_length

    @property
    def stride_length(self) -> int:
        return self._stride_length

    @property
    def cached_steps(self) -> int:
        """Steps appended since the episode (or the last ``reset``) began."""
        return self._cached_steps

    def __call__(self, step: Any) -> None:
        """Appends one step; writes the window it completes; handles an episode boundary.

        Args:
          step: one unbatched step (see the class docstring).

        Raises:
          ValueError: a batched step, or a step dict without ``"step_type"``.
          TypeError: ``step`` is neither a trajectory nor a mapping.
        """
        boundary = is_boundary(step)  # checked before anything is appended
        self._append(step)
        if boundary:
            self.reset(write_cached_steps=self._pad_end_of_episodes)

    def _append(self, step: Any) -> None:
        writer = self._get_writer()
        self._last_trajectory = step
        writer.append(step)
        self._cached_steps += 1
        self._write_if_due()

    def _due(self) -> bool:
        c, n = self._cached_steps, self._sequence_length
        return c >= n and (c - n) % self._stride_length == 0

    def _write_if_due(self) -> None:
        if self._due():
            self._create_items(self._window(-self._sequence_length))

    def reset(self, write_cached_steps: bool = True) -> None:
        """Ends the episode: pads and writes the cached steps if asked, then drops them.

        Called at every boundary by the observer itself; call it yourself once collection
        ends, or when an episode is cut short.

        Args:
          write_cached_steps: with ``pad_end_of_episodes``, pad the cache and write the
            padded windows (see the class docstring). Without padding, the cache holds no
            window that was not written already: a window is due at the current step count
            and was written when its last step arrived (TF-Agents wrote it a second time), or
            none is due and ``ValueError`` is raised. ``False`` drops the cache.

        Raises:
          ValueError: ``write_cached_steps`` without ``pad_end_of_episodes`` and no window is
            due at the current step count.
        """
        write_cached_steps = flag(write_cached_steps, "write_cached_steps")
        if write_cached_steps and self._last_trajectory is not None:
            if self._pad_end_of_episodes:
                pad = padding_step(self._last_trajectory)
                n = (
                    self._sequence_length - 1
                    if self._tile_end_of_episodes
                    else self._sequence_length - self._cached_steps
                )
                writer = self._get_writer()
                for _ in range(n):
                    writer.append(pad)
                    self._cached_steps += 1
                    self._write_if_due()
            elif not self._due():
                raise ValueError(
                    "write_cached_steps is True, but not enough steps remain in the cache to "
                    f"write an item with sequence_length={self._sequence_length}, consider "
                    "enabling pad_end_of_episodes."
                )
        self._cached_steps = 0
        self._last_trajectory = None
        self._end_episode()


class TrajectorySequenceObserver(TrajectoryObserver):
    """Like :class:`TrajectoryObserver`, but windows run across episode boundaries.

    TF-Agents' ``ReverbTrajectorySequenceObserver``: boundaries do not reset the cache, so
    an item may hold the end of one episode and the start of the next (its steps' types show
    where). The stride rule counts every step since construction or the last ``reset``. Note
    that TF-Agents' drivers do not count boundary steps, so ``N`` driver steps are more than
    ``N`` observer calls.
    """

    def __call__(self, step: Any) -> None:
        """Appends one step and writes the window it completes (boundaries are not special).

        Raises:
          TypeError: ``step`` is neither a trajectory nor a mapping.
        """
        check_step(step)
        self._append(step)

    def _abandon_episode(self) -> None:
        pass  # windows run across episodes anyway
