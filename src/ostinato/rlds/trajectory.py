"""TF-Agents' ``Trajectory`` layout as a plain named tuple (no TensorFlow, no tf-agents)."""

from __future__ import annotations

import enum
import importlib
import importlib.util
import logging
import sys
from typing import Any, NamedTuple

_log = logging.getLogger("ostinato.rlds")

#: The keys every RLDS step must have, in TF-Agents' ``get_rlds_step_features()`` order.
STEP_FEATURES = (
    "observation",
    "action",
    "reward",
    "discount",
    "is_first",
    "is_last",
    "is_terminal",
)


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


_TFA_MODULE = "tf_agents.trajectories.trajectory"
_tfa_failed = False


def trajectory_class(*, import_tf_agents: bool = True) -> type:
    """The class trajectories are made of: TF-Agents' own ``Trajectory`` where tf-agents is
    there, else :class:`Trajectory` (the same fields, order and predicates).

    Args:
      import_tf_agents: import tf-agents when it is installed but not imported yet (it
        imports TensorFlow; paths that must not load TensorFlow pass ``False`` and get
        TF-Agents' class only when the program imported tf-agents already).

    tf-agents is never required: when it is not installed, or its import fails (a warning
    says why, once), :class:`Trajectory` is returned.
    """
    global _tfa_failed
    module = sys.modules.get(_TFA_MODULE)
    if (
        module is None
        and not _tfa_failed
        and (
            "tf_agents" in sys.modules
            or (import_tf_agents and importlib.util.find_spec("tf_agents") is not None)
        )
    ):
        try:
            module = importlib.import_module(_TFA_MODULE)
        except Exception as e:  # noqa: BLE001 - any failure: ours is the same layout
            _tfa_failed = True
            _log.warning(
                "tf-agents is installed but %s could not be imported (%s); "
                "trajectories are ostinato.rlds.Trajectory",
                _TFA_MODULE,
                e,
            )
    cls = getattr(module, "Trajectory", None) if module is not None else None
    return cls if isinstance(cls, type) else Trajectory
