"""RLDS and Minari datasets into tables as TF-Agents trajectories, without tf-agents.

TF-Agents' ``tf_agents.replay_buffers.rlds_to_reverb`` with the same names, arguments and
semantics, for TensorFlow >= 2.18 and without tf-agents, rlds or dm-reverb installed:

* :func:`create_trajectory_data_spec` -- the :class:`Trajectory` of specs of one step;
* :func:`create_trajectory_data_signature` -- the same with an outer time dimension of
  ``None`` (TF-Agents' ``tensor_spec.add_outer_dim``): a table's ``signature``;
* :func:`convert_rlds_to_trajectories` -- a ``tf.data.Dataset`` of :class:`Trajectory`, one
  per RLDS step, built from overlapping pairs of steps (the end padded with a ``is_first``
  step);
* :func:`push_rlds_to_reverb` -- writes them through an observer (Ostinato's or TF-Agents'),
  returning the number of trajectories written; :func:`push_rlds_to_table` does the same for
  a client and a table name.

``rlds_data`` is a ``tf.data.Dataset`` of RLDS episodes (dicts with a ``"steps"`` dataset),
as TF-Agents takes, or -- beyond TF-Agents -- a ``tf.data.Dataset`` of RLDS steps.

Minari datasets (gymnasium's offline-RL format), without TensorFlow
(:mod:`ostinato.rlds.minari_ingest` has the mapping):

* :func:`push_minari_to_table` / :func:`push_minari_to_reverb` -- the same trajectories and
  windows from a ``minari.MinariDataset`` (or any iterable of Minari episodes);
* :func:`create_minari_trajectory_spec` / :func:`create_minari_trajectory_signature` --
  their specs as :class:`ostinato.TensorSpec`; :func:`load_minari` -- a local dataset by id
  or path (never downloaded).

``ostinato-ingest`` (``python -m ostinato.rlds``) does either from the command line into a
running server's table.

Trajectories are TF-Agents' own ``Trajectory`` class where tf-agents is installed (see
:func:`trajectory_class`), else :class:`Trajectory`. Importing this package imports neither
TensorFlow nor Minari; the functions import what they need when called (the Minari ones
never import TensorFlow).
"""

from ostinato.rlds.steps import MalformedEpisodeError
from ostinato.rlds.trajectory import STEP_FEATURES, StepType, Trajectory, trajectory_class

__all__ = [
    "STEP_FEATURES",
    "MalformedEpisodeError",
    "StepType",
    "Trajectory",
    "convert_rlds_to_trajectories",
    "create_minari_trajectory_signature",
    "create_minari_trajectory_spec",
    "create_trajectory_data_signature",
    "create_trajectory_data_spec",
    "get_rlds_step_features",
    "load_minari",
    "push_minari_to_reverb",
    "push_minari_to_table",
    "push_rlds_to_reverb",
    "push_rlds_to_table",
    "trajectory_class",
]

_LAZY = {
    "convert_rlds_to_trajectories": "ostinato.rlds.convert",
    "create_trajectory_data_signature": "ostinato.rlds.convert",
    "create_trajectory_data_spec": "ostinato.rlds.convert",
    "get_rlds_step_features": "ostinato.rlds.trajectory",
    "push_rlds_to_reverb": "ostinato.rlds.push",
    "push_rlds_to_table": "ostinato.rlds.push",
    "create_minari_trajectory_signature": "ostinato.rlds.minari_ingest",
    "create_minari_trajectory_spec": "ostinato.rlds.minari_ingest",
    "load_minari": "ostinato.rlds.minari_ingest",
    "push_minari_to_reverb": "ostinato.rlds.minari_ingest",
    "push_minari_to_table": "ostinato.rlds.minari_ingest",
}


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'ostinato.rlds' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
