"""Observers that write an agent's experience into tables, for every framework (no TF needed).

TF-Agents' Reverb observers with their arguments and semantics, plus batched observers for
vectorised environments and a framework-free replay-buffer facade:

* :class:`TrajectoryObserver` (TF-Agents' ``ReverbAddTrajectoryObserver``): fixed-length
  windows of steps (``sequence_length``, ``stride_length``, ``pad_end_of_episodes``,
  ``tile_end_of_episodes``) that never cross an episode boundary.
* :class:`TrajectorySequenceObserver` (``ReverbTrajectorySequenceObserver``): windows that
  run across boundaries.
* :class:`EpisodeObserver` (``ReverbAddEpisodeObserver``): one item per whole episode
  (``max_sequence_length``, ``bypass_partial_episodes``).
* :class:`BatchedTrajectoryObserver`, :class:`BatchedTrajectorySequenceObserver`,
  :class:`BatchedEpisodeObserver`: the same items as one observer per environment index, for
  gymnasium ``VectorEnv`` (every autoreset mode) and TF-Agents batched ``PyEnvironment``
  steps; the trajectory observers write all environments through one
  ``VectorTrajectoryWriter`` (one append and one item creation per vector step).
* :class:`ReplayBuffer` (TF-Agents' ``ReverbReplayBuffer``): ``as_dataset`` for numpy,
  PyTorch, JAX or TensorFlow, ``num_frames``, ``update_priorities``, ``clear``,
  ``get_table_info``.

Observers take TF-Agents ``Trajectory`` objects (duck-typed: anything with
``is_boundary()``; TensorFlow is not imported), step dicts (with a ``"step_type"`` entry),
or gymnasium transitions through ``on_reset(obs, info)`` and
``on_step(obs, action, reward, terminated, truncated, info)``; :mod:`.steps` says how a
gymnasium transition maps onto TF-Agents' trajectory semantics. Every observer writes
through the client's ``TrajectoryWriter``, with an embedded or a networked client alike.

The TF-Agents names are aliases (``ReverbAddTrajectoryObserver`` is
:class:`TrajectoryObserver`, ``ReverbReplayBuffer`` is :class:`ReplayBuffer`), so code
written for TF-Agents' ``reverb_utils`` can import them from here.

Example:
  >>> import gymnasium as gym
  >>> from ostinato import observers
  >>> envs = gym.make_vec("CartPole-v1", num_envs=8, vectorization_mode="sync")
  >>> observer = observers.BatchedTrajectoryObserver(client, "replay", 2, env=envs)
  >>> obs, info = envs.reset(seed=0)
  >>> observer.on_reset(obs, info)
  >>> actions = envs.action_space.sample()
  >>> obs, rewards, terminated, truncated, info = envs.step(actions)
  >>> observer.on_step(obs, actions, rewards, terminated, truncated, info)
"""

from ostinato.observers.batched import (
    BatchedEpisodeObserver,
    BatchedObserver,
    autoreset_mode_name,
)
from ostinato.observers.episode import EpisodeObserver
from ostinato.observers.replay_buffer import DEFAULT_TABLE, ReplayBuffer
from ostinato.observers.steps import (
    GYM_STEP_KEYS,
    GymEpisode,
    StepType,
    add_outer_dim,
    gym_step_spec,
    is_boundary,
    padding_step,
)
from ostinato.observers.trajectory import TrajectoryObserver, TrajectorySequenceObserver
from ostinato.observers.vector import (
    BatchedTrajectoryObserver,
    BatchedTrajectorySequenceObserver,
)

# TF-Agents' names (tf_agents.replay_buffers.reverb_utils / reverb_replay_buffer).
ReverbAddTrajectoryObserver = TrajectoryObserver
ReverbTrajectorySequenceObserver = TrajectorySequenceObserver
ReverbAddEpisodeObserver = EpisodeObserver
ReverbReplayBuffer = ReplayBuffer

__all__ = [
    "DEFAULT_TABLE",
    "GYM_STEP_KEYS",
    "BatchedEpisodeObserver",
    "BatchedObserver",
    "BatchedTrajectoryObserver",
    "BatchedTrajectorySequenceObserver",
    "EpisodeObserver",
    "GymEpisode",
    "ReplayBuffer",
    "ReverbAddEpisodeObserver",
    "ReverbAddTrajectoryObserver",
    "ReverbReplayBuffer",
    "ReverbTrajectorySequenceObserver",
    "StepType",
    "TrajectoryObserver",
    "TrajectorySequenceObserver",
    "add_outer_dim",
    "autoreset_mode_name",
    "gym_step_spec",
    "is_boundary",
    "padding_step",
]
