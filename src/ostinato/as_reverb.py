"""``python -m ostinato.as_reverb [-m module | script.py] [args ...]``.

Runs a program unmodified with ``import reverb`` resolving to Ostinato (see
:mod:`ostinato.compat`), e.g. TF-Agents' own tests::

    python -m ostinato.as_reverb -m pytest --pyargs tf_agents.replay_buffers.reverb_utils_test
"""

from ostinato.compat import main

if __name__ == "__main__":
    main()
