"""TF-Agents on Ostinato vs on dm-reverb: the DQN CartPole tutorial's workloads, side by side.

The same TF-Agents code (0.19, TF 2.15) runs against either backend: ``--impl ostinato`` makes
``import reverb`` resolve to Ostinato (``ostinato.install_as_reverb()``), ``--impl reverb`` uses
DeepMind's dm-reverb. Workloads, each as the DQN tutorial writes it:

* ``observer``: ``ReverbAddTrajectoryObserver(sequence_length=2)`` fed 5,000 CartPole
  trajectories (the ``Trajectory`` nests a ``PyDriver`` hands it), then ``flush()``; cost per
  env step in microseconds.
* ``dataset``: ``replay_buffer.as_dataset(num_parallel_calls=3, sample_batch_size=64,
  num_steps=2).prefetch(3)`` over a table of 10,000 items; batches per second.
* ``loop``: the tutorial's training loop -- per iteration one collect step through a
  ``PyDriver`` with the agent's collect policy and the observer, ``next(iterator)``, and
  ``agent.train(experience)``; iterations per second.

Usage (the two interpreters are TF-Agents virtualenvs, one with Ostinato installed, one with
dm-reverb; see benchmarks/README.md)::

    python benchmarks/tf_agents_bench.py --compare --repeat 3
    $OSTINATO_TFA_PYTHON benchmarks/tf_agents_bench.py --impl ostinato --json out.json

``--compare`` alternates the implementations run by run (each run a fresh process) and prints
medians and ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # markdown tables

TABLE = "uniform_table"
WORKLOADS = ("observer", "dataset", "loop", "floors")
DEFAULT_OSTINATO_PY = os.environ.get("OSTINATO_TFA_PYTHON", ".venv-tfa/bin/python")
DEFAULT_REVERB_PY = os.environ.get("OSTINATO_REVERB_TFA_PYTHON", "/opt/reverb-venv/bin/python")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def setup(impl: str):
    if impl == "ostinato":
        import ostinato

        ostinato.install_as_reverb()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import reverb  # noqa: F401  (either backend)
    import tensorflow as tf

    tf.random.set_seed(0)
    return tf


def make_agent(tf, env):
    from tf_agents.agents.dqn import dqn_agent
    from tf_agents.environments import tf_py_environment
    from tf_agents.networks import sequential
    from tf_agents.specs import tensor_spec
    from tf_agents.utils import common

    tf_env = tf_py_environment.TFPyEnvironment(env)
    action_spec = tensor_spec.from_spec(env.action_spec())
    num_actions = int(action_spec.maximum - action_spec.minimum + 1)
    layers = [tf.keras.layers.Dense(n, activation="relu") for n in (100, 50)]
    q_net = sequential.Sequential(layers + [tf.keras.layers.Dense(num_actions)])
    agent = dqn_agent.DqnAgent(
        tf_env.time_step_spec(),
        tf_env.action_spec(),
        q_network=q_net,
        optimizer=tf.keras.optimizers.Adam(learning_rate=1e-3),
        td_errors_loss_fn=common.element_wise_squared_loss,
        train_step_counter=tf.Variable(0),
    )
    agent.initialize()
    return agent


def make_replay(reverb, agent):
    from tf_agents.replay_buffers import reverb_replay_buffer, reverb_utils
    from tf_agents.specs import tensor_spec

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
    return server, replay, observer


def cartpole_trajectories(env, n: int, seed: int = 0) -> list:
    """``n`` trajectories of random play, as a PyDriver gives them to observers."""
    import numpy as np
    from tf_agents.trajectories import policy_step, trajectory

    rng = np.random.default_rng(seed)
    out = []
    ts = env.reset()
    while len(out) < n:
        action = np.asarray(rng.integers(2), dtype=np.int64)
        nxt = env.step(action)
        out.append(trajectory.from_transition(ts, policy_step.PolicyStep(action, (), ()), nxt))
        ts = nxt
    return out


def run_observer(tf, reverb, args) -> dict:
    from tf_agents.environments import suite_gym

    env = suite_gym.load("CartPole-v0")
    agent = make_agent(tf, env)
    server, _, observer = make_replay(reverb, agent)
    trajs = cartpole_trajectories(env, args.observer_steps)
    for t in trajs[:200]:  # warm-up
        observer(t)
    observer.flush()
    t0 = time.perf_counter()
    for t in trajs:
        observer(t)
    observer.flush()
    dt = time.perf_counter() - t0
    observer.close()
    server.stop()
    return {"observer_us_per_step": 1e6 * dt / len(trajs)}


def run_dataset(tf, reverb, args) -> dict:
    from tf_agents.environments import suite_gym

    env = suite_gym.load("CartPole-v0")
    agent = make_agent(tf, env)
    server, replay, observer = make_replay(reverb, agent)
    for t in cartpole_trajectories(env, args.table_items + 1):
        observer(t)
    observer.flush()
    ds = replay.as_dataset(num_parallel_calls=3, sample_batch_size=64, num_steps=2).prefetch(3)
    rate = _batches_per_s(iter(ds), args.batches)
    observer.close()
    server.stop()
    return {"dataset_batches_per_s": rate}


def _batches_per_s(it, n: int, warmup: int = 50) -> float:
    for _ in range(warmup):
        next(it)
    t0 = time.perf_counter()
    for _ in range(n):
        next(it)
    return n / (time.perf_counter() - t0)


def run_loop(tf, reverb, args) -> dict:
    from tf_agents.drivers import py_driver
    from tf_agents.environments import suite_gym
    from tf_agents.policies import py_tf_eager_policy, random_tf_policy
    from tf_agents.utils import common

    env = suite_gym.load("CartPole-v0")
    agent = make_agent(tf, env)
    server, replay, observer = make_replay(reverb, agent)
    random_policy = random_tf_policy.RandomTFPolicy(agent.time_step_spec, agent.action_spec)
    py_driver.PyDriver(
        env,
        py_tf_eager_policy.PyTFEagerPolicy(random_policy, use_tf_function=True),
        [observer],
        max_steps=100,
    ).run(env.reset())
    dataset = replay.as_dataset(num_parallel_calls=3, sample_batch_size=64, num_steps=2).prefetch(3)
    iterator = iter(dataset)
    agent.train = common.function(agent.train)
    collect = py_driver.PyDriver(
        env,
        py_tf_eager_policy.PyTFEagerPolicy(agent.collect_policy, use_tf_function=True),
        [observer],
        max_steps=1,
    )
    time_step = env.reset()

    def iteration():
        nonlocal time_step
        time_step, _ = collect.run(time_step)
        experience, _ = next(iterator)
        return agent.train(experience).loss

    for _ in range(args.loop_warmup):
        iteration()
    t0 = time.perf_counter()
    for _ in range(args.loop_iterations):
        iteration()
    dt = time.perf_counter() - t0
    observer.close()
    server.stop()
    return {"loop_iterations_per_s": args.loop_iterations / dt}


class _NoopColumn:
    def __getitem__(self, index):
        return self


class _NoopWriter:
    """A trajectory writer that stores nothing: what TF-Agents' observer costs by itself."""

    def __init__(self, structure):
        self.history = structure

    def append(self, data, partial_step=False):
        pass

    def create_item(self, table, priority, trajectory):
        pass

    def flush(self, *args, **kwargs):
        pass

    def end_episode(self, *args, **kwargs):
        pass

    def close(self):
        pass


def run_floors(tf, reverb, args) -> dict:
    """Floors no backend can go below: TF-Agents' observer over a writer that does nothing
    (its own per-step Python), and TF-Agents' ``as_dataset`` pipeline (interleave of 32 streams,
    per-element info broadcast, batch of 64, prefetch) over a source that costs nothing."""
    from tf_agents.environments import suite_gym
    from tf_agents.replay_buffers import reverb_replay_buffer, reverb_utils

    env = suite_gym.load("CartPole-v0")
    agent = make_agent(tf, env)
    trajs = cartpole_trajectories(env, args.observer_steps)
    structure = tf.nest.map_structure(lambda _: _NoopColumn(), agent.collect_data_spec)

    class _Client:
        def trajectory_writer(self, *a, **k):
            return _NoopWriter(structure)

    observer = reverb_utils.ReverbAddTrajectoryObserver(_Client(), TABLE, sequence_length=2)
    for t in trajs[:200]:
        observer(t)
    t0 = time.perf_counter()
    for t in trajs:
        observer(t)
    observer_floor = 1e6 * (time.perf_counter() - t0) / len(trajs)

    spec = agent.collect_data_spec
    item = tf.nest.map_structure(lambda s: tf.zeros([2, *s.shape], s.dtype), spec)
    info = reverb.SampleInfo(*(tf.zeros([], d) for d in reverb.SampleInfo.tf_dtypes()))

    orig = reverb.TrajectoryDataset  # replaced by the same element at no cost
    reverb.TrajectoryDataset = lambda *a, **k: tf.data.Dataset.from_tensors(
        reverb.ReplaySample(info, item)
    ).repeat()
    try:
        ds = reverb_replay_buffer.make_reverb_dataset(
            "unused:0",
            TABLE,
            spec,
            max_in_flight_samples_per_worker=6,
            batch_size=64,
            sequence_length=2,
            cycle_length=32,
            num_parallel_calls=3,
        ).prefetch(3)
        dataset_ceiling = _batches_per_s(iter(ds), args.batches)
    finally:
        reverb.TrajectoryDataset = orig
    return {
        "floor_observer_us_per_step": observer_floor,
        "ceiling_dataset_batches_per_s": dataset_ceiling,
    }


RUNNERS = {"observer": run_observer, "dataset": run_dataset, "loop": run_loop, "floors": run_floors}
UNITS = {
    "observer_us_per_step": ("observer, µs per env step", "lower"),
    "dataset_batches_per_s": ("as_dataset(64, num_steps=2), batches/s", "higher"),
    "loop_iterations_per_s": ("DQN tutorial loop, iterations/s", "higher"),
    "floor_observer_us_per_step": ("floor: TF-Agents' observer over a no-op writer, µs", "lower"),
    "ceiling_dataset_batches_per_s": (
        "ceiling: TF-Agents' as_dataset pipeline over a free source, batches/s",
        "higher",
    ),
}
TARGETS = {
    "observer_us_per_step": 1 / 3,
    "dataset_batches_per_s": 3.0,
    "loop_iterations_per_s": 1.5,
}
#: Floors/ceilings are properties of TF-Agents and TensorFlow, shown once (from Ostinato's run).
BOUNDS = ("floor_observer_us_per_step", "ceiling_dataset_batches_per_s")


def run_here(args) -> dict:
    tf = setup(args.impl)
    import reverb

    out: dict = {"impl": args.impl, "tf": tf.__version__}
    for w in args.workloads:
        t0 = time.perf_counter()
        out.update(RUNNERS[w](tf, reverb, args))
        log(f"[{args.impl}] {w}: done in {time.perf_counter() - t0:.1f}s")
    return out


def child(python: str, impl: str, args) -> dict:
    cmd = [
        python,
        os.path.abspath(__file__),
        "--impl",
        impl,
        "--workloads",
        ",".join(args.workloads),
        "--json",
        "-",
        "--batches",
        str(args.batches),
        "--loop-iterations",
        str(args.loop_iterations),
        "--observer-steps",
        str(args.observer_steps),
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        raise RuntimeError(f"{impl} run failed:\n{r.stderr[-4000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def compare(args) -> int:
    runs: dict[str, list[dict]] = {"ostinato": [], "reverb": []}
    pythons = {"ostinato": args.ostinato_python, "reverb": args.reverb_python}
    for i in range(args.repeat):
        order = ("ostinato", "reverb") if i % 2 == 0 else ("reverb", "ostinato")
        for impl in order:
            log(f"run {i + 1}/{args.repeat}: {impl}")
            res = child(pythons[impl], impl, args)
            runs[impl].append(res)
            log(f"  {res}")
    print(f"TF-Agents on Ostinato vs dm-reverb (median of {args.repeat}, runs alternated)\n")
    rows = []
    for key in UNITS:
        if not runs["ostinato"] or key not in runs["ostinato"][0] or key in BOUNDS:
            continue
        o = statistics.median(r[key] for r in runs["ostinato"])
        v = statistics.median(r[key] for r in runs["reverb"])
        name, better = UNITS[key]
        ratio = o / v
        target = TARGETS[key]
        met = ratio <= target if better == "lower" else ratio >= target
        tgt = f"{'≤' if better == 'lower' else '≥'} {target:.2g}×"
        rows.append(
            (name, f"{o:,.1f}", f"{v:,.1f}", f"{ratio:.2f}×", f"{tgt} {'met' if met else 'MISSED'}")
        )
    for key in BOUNDS:
        vals = [r[key] for rs in runs.values() for r in rs if key in r]
        if vals:
            rows.append((UNITS[key][0], f"{statistics.median(vals):,.1f} (both)", "", "", ""))
    print(
        harness.markdown_table(
            rows, ("workload", "Ostinato", "Reverb", "ratio", "target"), right=(1, 2, 3)
        )
    )
    print("\nEvery run:")
    for impl, rs in runs.items():
        for key in UNITS:
            vals = [r[key] for r in rs if key in r]
            if vals:
                print(f"  {impl:8s} {key}: " + ", ".join(f"{v:,.1f}" for v in vals))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(runs, f, indent=1)
    return 0


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--impl", choices=("ostinato", "reverb"))
    p.add_argument("--compare", action="store_true", help="run both, alternating, in children")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--workloads", default=",".join(WORKLOADS))
    p.add_argument("--batches", type=int, default=400)
    p.add_argument("--table-items", type=int, default=10_000)
    p.add_argument("--loop-iterations", type=int, default=500)
    p.add_argument("--loop-warmup", type=int, default=100)
    p.add_argument("--observer-steps", type=int, default=5000)
    p.add_argument("--ostinato-python", default=DEFAULT_OSTINATO_PY)
    p.add_argument("--reverb-python", default=DEFAULT_REVERB_PY)
    p.add_argument("--json", help="write results to this file ('-' = last line of stdout)")
    args = p.parse_args(argv)
    args.workloads = [w for w in args.workloads.split(",") if w]
    bad = [w for w in args.workloads if w not in WORKLOADS]
    if bad:
        p.error(f"unknown workloads {bad}; choose from {WORKLOADS}")
    if not args.compare and not args.impl:
        p.error("give --impl or --compare")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.compare:
        return compare(args)
    out = run_here(args)
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
