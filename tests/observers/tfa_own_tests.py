"""Runs TF-Agents' own observer and replay-buffer tests on Ostinato's observers and buffer.

Run it where TF-Agents is installed::

    /opt/tfa-venv/bin/python -m ostinato.as_reverb tests/observers/tfa_own_tests.py

``tf_agents.replay_buffers.reverb_utils``' three observer classes are replaced by Ostinato's
(``ostinato.observers``), and ``reverb_replay_buffer.ReverbReplayBuffer`` by
``ostinato.observers.ReplayBuffer`` with ``as_dataset(framework="tf")``, before TF-Agents'
test modules (``reverb_utils_test.py``, ``reverb_replay_buffer_test.py``) are imported, so
their tests -- mocked writer call counts, real-server table sizes, datasets -- exercise
Ostinato's classes. Exits with pytest's status.
"""

from __future__ import annotations

import os
import sys

import pytest


class _Patch:
    """pytest plugin: swaps the observers in and enables TF-Agents' multiprocessing mode."""

    def pytest_configure(self, config):
        from tf_agents.replay_buffers import reverb_replay_buffer, reverb_utils
        from tf_agents.system import system_multiprocessing

        from ostinato import observers

        class TFReplayBuffer(observers.ReplayBuffer):
            def as_dataset(self, *args, **kwargs):
                kwargs.setdefault("framework", "tf")
                return super().as_dataset(*args, **kwargs)

        system_multiprocessing.enable_interactive_mode()
        reverb_replay_buffer.ReverbReplayBuffer = TFReplayBuffer
        reverb_utils.ReverbAddTrajectoryObserver = observers.TrajectoryObserver
        reverb_utils.ReverbTrajectorySequenceObserver = observers.TrajectorySequenceObserver
        reverb_utils.ReverbAddEpisodeObserver = observers.EpisodeObserver


def main() -> int:
    import tf_agents.replay_buffers as rb

    here = os.path.dirname(rb.__file__)
    files = [
        os.path.join(here, "reverb_utils_test.py"),
        os.path.join(here, "reverb_replay_buffer_test.py"),
    ]
    return pytest.main(["-q", "-p", "no:cacheprovider", *files, *sys.argv[1:]], plugins=[_Patch()])


if __name__ == "__main__":
    sys.exit(main())
