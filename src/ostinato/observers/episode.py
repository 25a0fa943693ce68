"""Whole episodes as items: TF-Agents' ``ReverbAddEpisodeObserver`` semantics."""

from __future__ import annotations

from typing import Any

from ostinato.observers.base import ObserverBase, _log, flag
from ostinato.observers.steps import is_boundary
from ostinato.validate import is_int


class EpisodeObserver(ObserverBase):
    """Caches an episode's steps and writes the whole episode as one item at its boundary.

    TF-Agents' ``ReverbAddEpisodeObserver``, argument for argument: call it once per
    environment step. At a boundary step (``step_type`` LAST) one item holding every step of
    the episode, boundary included, goes to each table; items therefore have different
    lengths (read them one at a time, or with ``sample_batch_size=None``). An unfinished
    episode stays cached until :meth:`reset` writes (or drops) it.

    Args:
      py_client: an :class:`ostinato.Client` (embedded or networked) or a Reverb client.
      table_name: one table name, or a sequence of names (the data is stored once).
      max_sequence_length: the most steps an episode may have, **counting its boundary
        step** (an episode of ``k`` transitions needs ``k + 1``).
      priority: priority of the items (see :meth:`update_priority`).
      bypass_partial_episodes: an episode longer than ``max_sequence_length`` is skipped
        with an error logged, instead of raising ``ValueError``; its steps are dropped so
        that the table only ever holds whole episodes.
      validate_items: (Ostinato only) check items against the table's signature.

    Raises:
      ValueError: ``max_sequence_length`` is not a positive integer, or another argument is
        invalid (the message names it).
    """

    def __init__(
        self,
        py_client: Any,
        table_name: Any,
        max_sequence_length: int,
        priority: float = 1,
        bypass_partial_episodes: bool = False,
        *,
        validate_items: bool = True,
    ):
        super().__init__(py_client, table_name, priority, validate_items=validate_items)
        if not is_int(max_sequence_length) or max_sequence_length <= 0:
            raise ValueError(
                "`max_sequence_length` must be an integer greater equal one "
                f"(got {max_sequence_length!r})."
            )
        self._max_sequence_length = int(max_sequence_length)
        self._bypass_partial_episodes = flag(bypass_partial_episodes, "bypass_partial_episodes")
        self._num_keep_alive_refs = self._max_sequence_length + 1
        self._cached_steps = 0
        self._overflow_episode = False
        self.open()

    def _reset_state(self) -> None:
        # TF-Agents kept the step count of the episode a close() cut short; the writer's
        # history is gone then, so Ostinato starts from zero.
        self._cached_steps = 0
        self._overflow_episode = False

    @property
    def max_sequence_length(self) -> int:
        return self._max_sequence_length

    @property
    def cached_steps(self) -> int:
        """Steps of the current episode cached so far."""
        return self._cached_steps

    def __call__(self, step: Any) -> None:
        """Caches one step; at a boundary writes the episode (or drops an overflowed one).

        Raises:
          ValueError: the episode grows beyond ``max_sequence_length`` and
            ``bypass_partial_episodes`` is False (raised by the step that does not fit; the
            rest of that episode is then dropped); a batched step; a step dict without
            ``"step_type"``.
          TypeError: ``step`` is neither a trajectory nor a mapping.
        """
        boundary = is_boundary(step)
        if self._cached_steps >= self._max_sequence_length and not self._overflow_episode:
            self._overflow_episode = True
            if self._bypass_partial_episodes:
                _log.error(
                    "The number of trajectories within the same episode exceeds "
                    "`max_sequence_length` (%d). This episode is bypassed and will NOT be "
                    "written into the replay buffer. Consider increasing the "
                    "`max_sequence_length`.",
                    self._max_sequence_length,
                )
            else:
                raise ValueError(
                    "The number of trajectories within the same episode exceeds "
                    f"`max_sequence_length` ({self._max_sequence_length}). Consider "
                    "increasing the `max_sequence_length` or set `bypass_partial_episodes` to "
                    "true to bypass the episodes with length more than `max_sequence_length`."
                )
        if self._overflow_episode:
            if boundary:
                self.reset(write_cached_steps=False)
            return
        self._get_writer().append(step)
        self._cached_steps += 1
        if boundary:
            self.reset(write_cached_steps=True)

    def reset(self, write_cached_steps: bool = True) -> None:
        """Ends the episode: writes the cached steps as one item if asked, then drops them.

        Called at every boundary by the observer itself; call it yourself once collection
        ends to write the unfinished episode (``True``) or drop it (``False``). An overflowed
        episode is never written (TF-Agents wrote its first ``max_sequence_length`` steps when
        ``reset()`` came before the episode's boundary).
        """
        write_cached_steps = flag(write_cached_steps, "write_cached_steps")
        if write_cached_steps and self._cached_steps and not self._overflow_episode:
            self._create_items(self._window(None))
        elif write_cached_steps:
            _log.info("Skipped writing to the replay tables because no steps are cached.")
        self._cached_steps = 0
        self._overflow_episode = False
        self._end_episode()
