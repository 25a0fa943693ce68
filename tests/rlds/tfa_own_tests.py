"""Runs TF-Agents' own ``rlds_to_reverb_test.py`` on ``ostinato.rlds``.

Run it where TF-Agents is installed::

    /opt/tfa-venv/bin/python -m ostinato.as_reverb tests/rlds/tfa_own_tests.py

``tf_agents.replay_buffers.rlds_to_reverb``'s functions are replaced by Ostinato's before the
test module runs, so its tests (specs, conversions, pushes through TF-Agents' observer into an
Ostinato table, the ValueErrors and InvalidArgumentErrors) exercise ``ostinato.rlds``.
Exits with pytest's status.
"""

from __future__ import annotations

import os
import sys

import pytest


class _Patch:
    """pytest plugin: swaps ostinato.rlds's functions in."""

    def pytest_configure(self, config):
        from tf_agents.replay_buffers import rlds_to_reverb
        from tf_agents.system import system_multiprocessing

        from ostinato import rlds

        system_multiprocessing.enable_interactive_mode()
        for name in (
            "create_trajectory_data_spec",
            "convert_rlds_to_trajectories",
            "push_rlds_to_reverb",
        ):
            setattr(rlds_to_reverb, name, getattr(rlds, name))


def main() -> int:
    import tf_agents.replay_buffers as rb

    path = os.path.join(os.path.dirname(rb.__file__), "rlds_to_reverb_test.py")
    return pytest.main(["-q", "-p", "no:cacheprovider", path, *sys.argv[1:]], plugins=[_Patch()])


if __name__ == "__main__":
    sys.exit(main())
