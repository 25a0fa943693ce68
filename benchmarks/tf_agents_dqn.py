"""TF-Agents' DQN CartPole tutorial on Ostinato and on dm-reverb: returns, speed, batch freshness.

The tutorial's training loop, unmodified in what touches the replay backend: a Uniform table
(``max_size=100_000``, ``MinSize(1)``, the agent's signature), ``ReverbAddTrajectoryObserver
(sequence_length=2)``, 100 steps of random play, then per iteration one collect step through a
``PyDriver`` with the collect policy, ``next(iterator)`` over
``as_dataset(num_parallel_calls=3, sample_batch_size=64, num_steps=2).prefetch(3)`` and
``agent.train``. ``--impl ostinato`` makes ``import reverb`` resolve to Ostinato; ``--impl
reverb`` is DeepMind's dm-reverb (its own virtualenv; see benchmarks/README.md).

Each run reports:

* ``returns``: the greedy policy's average return over ``--eval-episodes`` episodes every
  ``--eval-interval`` iterations (the tutorial's evaluation);
* ``iterations_per_s``: training-loop iterations per second (evaluation and the probe's
  bookkeeping excluded);
* ``freshness``: per phase of ``--phase`` iterations, the share of sampled items that are among
  the newest 100 items written, divided by uniform sampling's share (``min(1, 100 / n)`` for
  ``n`` items) -- 1.0 means the batches are as fresh as sampling at the moment of consumption.
  An item is recognised by its last step's observation (CartPole's are unique floats).

``--compare`` runs ``--seeds`` seeds on both backends, alternating backend by run (each a fresh
process), and prints per-run figures, means and ratios::

    python benchmarks/tf_agents_dqn.py --compare --seeds 4 --iterations 2000
    .venv-tfa/bin/python benchmarks/tf_agents_dqn.py --impl ostinato --seed 0

The interpreters are ``--ostinato-python`` (default ``$OSTINATO_TFA_PYTHON`` or
``.venv-tfa/bin/python``) and ``--reverb-python`` (``$OSTINATO_REVERB_TFA_PYTHON`` or
``.reverb-venv/bin/python``: dm-reverb 0.14, TensorFlow 2.15, tf-agents 0.19, gym 0.23).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

TABLE = "uniform_table"
NEWEST = 100
DEFAULT_OSTINATO_PY = os.environ.get("OSTINATO_TFA_PYTHON", ".venv-tfa/bin/python")
DEFAULT_REVERB_PY = os.environ.get("OSTINATO_REVERB_TFA_PYTHON", ".reverb-venv/bin/python")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class _Ages:
    """Which item a sampled row is, and how many items were written after it."""

    def __init__(self, observer) -> None:
        self.observer = observer
        self.index: dict[bytes, int] = {}
        self.count = 0

    def __call__(self, traj) -> None:
        # TF-Agents' observer makes an item when the episode has >= 2 cached steps after this
        # one (sequence_length=2, stride 1); the item's last step is this trajectory.
        makes_item = self.observer._cached_steps + 1 >= 2
        self.observer(traj)
        if makes_item:
            self.index[traj.observation.tobytes()] = self.count
            self.count += 1

    def share(self, last_obs) -> tuple[float, float]:
        """(observed, uniform) shares of the newest items in a batch of last-step observations."""
        n = self.count
        newest = 0
        for row in last_obs:
            i = self.index.get(row.tobytes())
            if i is not None and n - i <= NEWEST:
                newest += 1
        return newest / len(last_obs), min(1.0, NEWEST / max(n, 1))


def run_one(args) -> dict:
    if args.impl == "ostinato":
        import ostinato

        ostinato.install_as_reverb()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import random

    import numpy as np
    import reverb
    import tensorflow as tf
    from tf_agents.agents.dqn import dqn_agent
    from tf_agents.drivers import py_driver
    from tf_agents.environments import suite_gym, tf_py_environment
    from tf_agents.networks import sequential
    from tf_agents.policies import py_tf_eager_policy, random_tf_policy
    from tf_agents.replay_buffers import reverb_replay_buffer, reverb_utils
    from tf_agents.specs import tensor_spec
    from tf_agents.utils import common

    random.seed(args.seed)
    np.random.seed(args.seed)
    tf.random.set_seed(args.seed)
    env = suite_gym.load("CartPole-v0")
    eval_env = suite_gym.load("CartPole-v0")
    env.seed(args.seed)
    eval_env.seed(args.seed + 10_000)
    tf_env = tf_py_environment.TFPyEnvironment(env)

    # The tutorial's agent.
    action_spec = tensor_spec.from_spec(env.action_spec())
    num_actions = int(action_spec.maximum - action_spec.minimum + 1)
    dense = [
        tf.keras.layers.Dense(
            n,
            activation=tf.keras.activations.relu,
            kernel_initializer=tf.keras.initializers.VarianceScaling(
                scale=2.0, mode="fan_in", distribution="truncated_normal"
            ),
        )
        for n in (100, 50)
    ]
    q_values = tf.keras.layers.Dense(
        num_actions,
        activation=None,
        kernel_initializer=tf.keras.initializers.RandomUniform(minval=-0.03, maxval=0.03),
        bias_initializer=tf.keras.initializers.Constant(-0.2),
    )
    q_net = sequential.Sequential(dense + [q_values])
    agent = dqn_agent.DqnAgent(
        tf_env.time_step_spec(),
        tf_env.action_spec(),
        q_network=q_net,
        optimizer=tf.keras.optimizers.Adam(learning_rate=1e-3),
        td_errors_loss_fn=common.element_wise_squared_loss,
        train_step_counter=tf.Variable(0),
    )
    agent.initialize()

    # The tutorial's replay buffer.
    signature = tensor_spec.add_outer_dim(tensor_spec.from_spec(agent.collect_data_spec))
    table = reverb.Table(
        TABLE,
        max_size=100_000,
        sampler=reverb.selectors.Uniform(),
        remover=reverb.selectors.Fifo(),
        rate_limiter=reverb.rate_limiters.MinSize(1),
        signature=signature,
    )
    server = reverb.Server([table])
    replay = reverb_replay_buffer.ReverbReplayBuffer(
        agent.collect_data_spec, table_name=TABLE, sequence_length=2, local_server=server
    )
    observer = reverb_utils.ReverbAddTrajectoryObserver(replay.py_client, TABLE, sequence_length=2)
    ages = _Ages(observer)

    random_policy = random_tf_policy.RandomTFPolicy(tf_env.time_step_spec(), tf_env.action_spec())
    py_driver.PyDriver(
        env,
        py_tf_eager_policy.PyTFEagerPolicy(random_policy, use_tf_function=True),
        [ages],
        max_steps=100,
    ).run(env.reset())
    dataset = replay.as_dataset(num_parallel_calls=3, sample_batch_size=64, num_steps=2).prefetch(3)
    iterator = iter(dataset)
    agent.train = common.function(agent.train)
    agent.train_step_counter.assign(0)
    collect = py_driver.PyDriver(
        env,
        py_tf_eager_policy.PyTFEagerPolicy(agent.collect_policy, use_tf_function=True),
        [ages],
        max_steps=1,
    )
    greedy = py_tf_eager_policy.PyTFEagerPolicy(agent.policy, use_tf_function=True)

    def evaluate() -> float:
        total = 0.0
        for _ in range(args.eval_episodes):
            ts = eval_env.reset()
            while not ts.is_last():
                ts = eval_env.step(greedy.action(ts).action)
                total += float(ts.reward)
        return total / args.eval_episodes

    returns: list[float] = []
    phases: list[list[float]] = []  # [observed, uniform] sums per phase
    loop_s = 0.0
    probe_s = 0.0
    time_step = env.reset()
    for i in range(1, args.iterations + 1):
        t0 = time.perf_counter()
        time_step, _ = collect.run(time_step)
        experience, _ = next(iterator)
        agent.train(experience)
        t1 = time.perf_counter()
        last_obs = experience.observation[:, -1].numpy()
        observed, uniform = ages.share(last_obs)
        if (i - 1) % args.phase == 0:
            phases.append([0.0, 0.0])
        phases[-1][0] += observed
        phases[-1][1] += uniform
        t2 = time.perf_counter()
        loop_s += t1 - t0
        probe_s += t2 - t1
        if i % args.eval_interval == 0:
            returns.append(evaluate())
            log(
                f"[{args.impl} seed {args.seed}] iteration {i}: return {returns[-1]:.1f}, "
                f"{i / loop_s:.1f} it/s"
            )
    observer.close()
    server.stop()
    return {
        "impl": args.impl,
        "seed": args.seed,
        "iterations": args.iterations,
        "returns": returns,
        "iterations_per_s": args.iterations / loop_s,
        "freshness": [o / u for o, u in phases],
        "uniform_share": [u / args.phase for _, u in phases],
        "observed_share": [o / args.phase for o, _ in phases],
    }


def child(python: str, impl: str, seed: int, args) -> dict:
    cmd = [
        python,
        os.path.abspath(__file__),
        "--impl",
        impl,
        "--seed",
        str(seed),
        "--iterations",
        str(args.iterations),
        "--eval-interval",
        str(args.eval_interval),
        "--eval-episodes",
        str(args.eval_episodes),
        "--phase",
        str(args.phase),
        "--json",
        "-",
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=args.run_timeout)
    if r.returncode != 0:
        raise RuntimeError(f"{impl} seed {seed} failed:\n{r.stderr[-4000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def compare(args) -> int:
    runs: dict[str, list[dict]] = {"ostinato": [], "reverb": []}
    pythons = {"ostinato": args.ostinato_python, "reverb": args.reverb_python}
    for k, seed in enumerate(range(args.seed, args.seed + args.seeds)):
        order = ("ostinato", "reverb") if k % 2 == 0 else ("reverb", "ostinato")
        for impl in order:
            t0 = time.monotonic()
            res = child(pythons[impl], impl, seed, args)
            runs[impl].append(res)
            log(
                f"{impl:8s} seed {seed}: returns {res['returns']}, "
                f"{res['iterations_per_s']:.1f} it/s, freshness "
                f"{[round(f, 3) for f in res['freshness']]} ({time.monotonic() - t0:.0f}s)"
            )
    print(
        f"TF-Agents DQN CartPole tutorial, {args.iterations} iterations, seeds "
        f"{args.seed}..{args.seed + args.seeds - 1}, backends alternated run by run\n"
    )
    print(
        f"| backend | seed | returns (every {args.eval_interval} it.) | it/s | "
        f"freshness per {args.phase} it. |"
    )
    print("|---|---:|---|---:|---|")
    for impl, rs in runs.items():
        for r in rs:
            print(
                f"| {impl} | {r['seed']} | {', '.join(f'{x:.1f}' for x in r['returns'])} | "
                f"{r['iterations_per_s']:.1f} | "
                f"{', '.join(f'{x:.3f}' for x in r['freshness'])} |"
            )
    print()
    means = {}
    for impl, rs in runs.items():
        at = [statistics.mean(r["returns"][k] for r in rs) for k in range(len(rs[0]["returns"]))]
        speed = statistics.mean(r["iterations_per_s"] for r in rs)
        fresh = [
            statistics.mean(r["freshness"][p] for r in rs) for p in range(len(rs[0]["freshness"]))
        ]
        shares = [
            (
                statistics.mean(r["observed_share"][p] for r in rs),
                statistics.mean(r["uniform_share"][p] for r in rs),
            )
            for p in range(len(rs[0]["freshness"]))
        ]
        means[impl] = (at, speed)
        evals = ", ".join(f"{(k + 1) * args.eval_interval}: {x:.1f}" for k, x in enumerate(at))
        print(
            f"{impl:8s} mean return at iteration {evals}; mean {speed:.1f} it/s; freshness per "
            f"phase {[round(f, 3) for f in fresh]} (observed/uniform share "
            f"{', '.join(f'{o:.3f}/{u:.3f}' for o, u in shares)})"
        )
    (ro, so), (rr, sr) = means["ostinato"], means["reverb"]
    ratios = ", ".join(
        f"{(k + 1) * args.eval_interval}: {o / r:.2f}x" for k, (o, r) in enumerate(zip(ro, rr))
    )
    print(
        f"ratio Ostinato/dm-reverb: mean return at iteration {ratios}; iterations/s {so / sr:.2f}x"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(runs, f, indent=1)
    return 0


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--impl", choices=("ostinato", "reverb"))
    p.add_argument("--compare", action="store_true", help="run both, alternating, in children")
    p.add_argument("--seed", type=int, default=0, help="the (first) seed")
    p.add_argument("--seeds", type=int, default=4, help="seeds per backend with --compare")
    p.add_argument("--iterations", type=int, default=2000)
    p.add_argument("--eval-interval", type=int, default=1000)
    p.add_argument("--eval-episodes", type=int, default=10)
    p.add_argument("--phase", type=int, default=1000, help="iterations per freshness phase")
    p.add_argument("--run-timeout", type=int, default=900, help="seconds per child run")
    p.add_argument("--ostinato-python", default=DEFAULT_OSTINATO_PY)
    p.add_argument("--reverb-python", default=DEFAULT_REVERB_PY)
    p.add_argument("--json", help="write results to this file ('-' = last line of stdout)")
    args = p.parse_args(argv)
    if not args.compare and not args.impl:
        p.error("give --impl or --compare")
    for name in ("seeds", "iterations", "eval_interval", "eval_episodes", "phase"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} ({getattr(args, name)}) must be >= 1")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.compare:
        return compare(args)
    out = run_one(args)
    if args.json == "-":
        print(json.dumps(out))
    else:
        print(json.dumps(out, indent=1))
        if args.json:
            with open(args.json, "w") as f:
                json.dump(out, f, indent=1)
    sys.stdout.flush()
    os._exit(0)  # skip interpreter teardown (not measured, and identical for both)


if __name__ == "__main__":
    raise SystemExit(main())
