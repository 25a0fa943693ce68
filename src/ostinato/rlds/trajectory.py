"""TF-Agents' ``Trajectory`` layout as a plain named tuple (no TensorFlow, no tf-agents)."""

from __future__ import annotations

import enum
from typing import Any, NamedTuple

#: The keys every RLDS step must have, in TF-Agents' ``get_rlds_step_features()`` order.
STEP_FEATURES = ("observation", "action", "reward", "discount", "is_first", "is_last",
                 "is_terminal")


def get_rlds_step_features() -> list[str]:
    """The RLDS step keys TF-Agents requires (a list, as TF-Agents returns it)."""
    return list(STEP_FEATURES)


class StepType(enum.IntEnum):
    """TF-Agents' step types (``tf_agents.trajectories.time_step.StepType``)."""

    FIRST = 0
    MID = 1
    LAST = 2


class Trajectory(NamedTuple):
    """One transition in TF-Agents' field order (``tf_agents.trajectories.Trajectory``).

    ``step_type`` and ``observation`` come from the current step, ``action`` and
    ``policy_info`` from the policy, ``next_step_type``, ``reward`` and ``discount`` from the
    step that follows. The predicates work elementwise on numpy arrays and tensors alike.
    """

    step_type: Any
    observation: Any
    action: Any
    policy_info: Any
    next_step_type: Any
    reward: Any
    discount: Any

    def is_first(self) -> Any:
        """``step_type == FIRST``."""
        return self.step_type == StepType.FIRST

    def is_mid(self) -> Any:
        """``step_type == MID and next_step_type == MID``."""
        a, b = self.step_type == StepType.MID, self.next_step_type == StepType.MID
        return a & b

    def is_last(self) -> Any:
        """``next_step_type == LAST``."""
        return self.next_step_type == StepType.LAST

    def is_boundary(self) -> Any:
        """``step_type == LAST`` (the step after an episode's last transition)."""
        return self.step_type == StepType.LAST

    def replace(self, **kwargs: Any) -> Trajectory:
        """A copy with the given fields replaced (TF-Agents' ``Trajectory.replace``)."""
        return self._replace(**kwargs)
