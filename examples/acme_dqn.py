"""Acme's own DQN agent (dm-acme 0.4.0, ``acme.agents.tf.dqn``) learning CartPole on Ostinato.

The agent is Acme's, unmodified: it builds its replay table, a ``reverb.Server``, a
``reverb.Client`` for its ``NStepTransitionAdder`` and for priority updates, and
``acme.datasets.make_reverb_dataset`` (tf.data) for its learner -- all of which are Ostinato's
here, through :func:`ostinato.install_as_reverb`. Training stops once the average return of
the last 10 episodes that began after the learner started (replay held 500 transitions) reaches
``--min-return`` (default 150; random play: ~20, CartPole-v1's maximum: 500), and the script
exits non-zero if it does not within ``--max-episodes``.

Needs (Python 3.11): what ``scripts/test_acme.sh`` installs in ``.venv-acme`` plus the TF
agent's own dependencies (pinned in ``scripts/acme_constraints.txt``; gym 0.23's CartPole
imports pygame, ``acme.wrappers`` imports gym and pillow)::

    .venv-acme/bin/pip install -c scripts/acme_constraints.txt dm-sonnet trfl \
        tensorflow-probability gym pygame pillow
    .venv-acme/bin/python examples/acme_dqn.py --min-return 150

or ``ACME_DQN=1 bash scripts/test_acme.sh``. Seen on this 2-vCPU machine: 150 reached after
64-381 episodes, 18-183 s (seeds 0, 1, 2; tf.data makes runs vary even with one seed).

``import acme`` needs dm-launchpad, which has no wheel for Python >= 3.10; when it is missing
this script puts Ostinato's test-only stand-in (``tests/acme_support/launchpad``) on
``sys.path``. Acme 0.4.0's JAX agents (``acme.agents.jax.dqn``) do not import with today's JAX:
with dm-haiku 0.0.12, optax 0.2.2, rlax 0.1.6 and chex 0.1.86 installed, ``acme/jax/utils.py``
(line 190) names ``jax.xla.Device`` when it is imported, and JAX no longer has ``jax.xla``
(``AttributeError: module 'jax' has no attribute 'xla'`` with jax 0.4.30, pinned here because
TensorFlow 2.15 needs numpy 1.x; later JAX has no ``jax.xla`` either). So this is Acme's
TensorFlow DQN.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
from pathlib import Path

import ostinato

ostinato.install_as_reverb()  # before anything imports reverb (acme does)
if importlib.util.find_spec("launchpad") is None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "acme_support"))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

MIN_REPLAY_SIZE = 500


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--min-return", type=float, default=150.0,
                        help="stop once the mean return of the last 10 episodes reaches it")
    parser.add_argument("--max-episodes", type=int, default=600)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    import gym
    import numpy as np
    import sonnet as snt
    import tensorflow as tf
    from acme import specs, wrappers
    from acme.agents.tf import dqn

    tf.random.set_seed(args.seed)
    np.random.seed(args.seed)
    env = gym.make("CartPole-v1")
    env.seed(args.seed)
    environment = wrappers.SinglePrecisionWrapper(wrappers.GymWrapper(env))
    spec = specs.make_environment_spec(environment)
    network = snt.Sequential([snt.Flatten(),
                              snt.nets.MLP([64, 64, spec.actions.num_values])])
    agent = dqn.DQN(environment_spec=spec, network=network, batch_size=64,
                    samples_per_insert=32.0, min_replay_size=MIN_REPLAY_SIZE, target_update_period=100,
                    n_step=3, learning_rate=1e-3, epsilon=tf.Variable(0.05, trainable=False),
                    checkpoint=False)

    start = time.monotonic()
    returns: list[float] = []  # of episodes that began after the learner started
    steps = 0
    for episode in range(1, args.max_episodes + 1):
        learning = steps >= MIN_REPLAY_SIZE  # the agent learns only once replay holds this many
        timestep = environment.reset()
        agent.observe_first(timestep)
        episode_return = 0.0
        while not timestep.last():
            action = agent.select_action(timestep.observation)
            timestep = environment.step(action)
            agent.observe(action, next_timestep=timestep)
            agent.update()
            episode_return += float(timestep.reward)
            steps += 1
        if learning:
            returns.append(episode_return)
        mean = float(np.mean(returns[-10:])) if returns else 0.0
        if episode % 10 == 0:
            shown = f"{mean:6.1f}" if returns else "     -"
            print(f"episode {episode:4d}  steps {steps:6d}  mean return (last 10) {shown}  "
                  f"{time.monotonic() - start:5.1f}s", flush=True)
        if len(returns) >= 10 and mean >= args.min_return:
            print(f"acme_dqn: Acme's DQN on Ostinato reached a mean return of {mean:.1f} "
                  f"(>= {args.min_return:g}) after {episode} episodes, {steps} steps, "
                  f"{time.monotonic() - start:.0f}s")
            return 0
    print(f"acme_dqn: mean return {float(np.mean(returns[-10:] or [0.0])):.1f} < {args.min_return:g} "
          f"after {args.max_episodes} episodes", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
