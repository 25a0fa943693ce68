"""Compares Ostinato's observers and replay buffer with TF-Agents' own, item for item.

Run it where TF-Agents is installed, with ``import reverb`` resolving to Ostinato::

    /opt/tfa-venv/bin/python -m ostinato.as_reverb tests/observers/tfa_compare.py

Trajectories come from TF-Agents' ``CountingEnv`` through its ``PyDriver`` (a random policy
with a fixed seed), recorded once and given to a TF-Agents observer
(``tf_agents.replay_buffers.reverb_utils``) and to the Ostinato observer with the same
arguments, each writing into its own queue table. The items (priority, then every column's
dtype, shape and values) must be equal, as must the errors raised and ``_cached_steps``.
Where Ostinato deliberately differs, the expected difference is applied to TF-Agents'
result first (see ``KNOWN``). Batched observers are compared with one TF-Agents observer per
environment index fed that index's slice of a ``BatchedPyEnvironment``'s trajectories. The
replay buffers are compared on single deterministic passes (``num_steps`` splits, broadcast
info), with TF-Agents' ``ReverbReplayBuffer`` and Ostinato's ``ReplayBuffer`` (tf and numpy).

Prints one JSON line with the counts and exits 1 on any mismatch.
"""

from __future__ import annotations

import itertools
import json
import logging
import sys

import numpy as np
import reverb  # Ostinato, through python -m ostinato.as_reverb
import tensorflow as tf
from tf_agents.drivers import py_driver
from tf_agents.environments import batched_py_environment, test_envs
from tf_agents.policies import random_py_policy
from tf_agents.replay_buffers import reverb_replay_buffer, reverb_utils
from tf_agents.specs import tensor_spec
from tf_agents.trajectories import time_step as ts

from ostinato import observers

logging.getLogger().setLevel(logging.CRITICAL)
tf.get_logger().setLevel(logging.CRITICAL)

#: Deliberate differences (README "Observers"): how TF-Agents' result is adjusted first.
KNOWN = {
    "traj_reset_duplicate": "reset(True) without padding rewrote the window already written",
    "episode_reset_overflow": "reset(True) during an overflowed episode wrote its first steps",
}


def record(k: int, steps: int, seed: int = 0, batch: list[int] | None = None) -> list:
    if batch is None:
        env = test_envs.CountingEnv(steps_per_episode=k)
    else:
        env = batched_py_environment.BatchedPyEnvironment(
            [test_envs.CountingEnv(steps_per_episode=n) for n in batch]
        )
    policy = random_py_policy.RandomPyPolicy(
        ts.time_step_spec(env.observation_spec()),
        env.action_spec(),
        seed=seed,
        outer_dims=None if batch is None else (len(batch),),
    )
    trajs: list = []
    py_driver.PyDriver(env, policy, observers=[trajs.append], max_steps=steps).run(env.reset())
    return trajs


class Tables:
    def __init__(self, names=("a", "b")):
        self.names = names
        self.server = reverb.Server([reverb.Table.queue(n, 100_000) for n in names])
        self.client = self.server.localhost_client()

    def drain(self, name: str) -> list:
        n = self.client.server_info()[name].current_size
        if not n:
            return []
        return [
            (float(s.info.priority), [np.asarray(c) for c in s.data])
            for s in self.client.sample(name, n, emit_timesteps=False)
        ]

    def clear(self):
        for n in self.names:
            self.client.reset(n)


def run(tables: Tables, make, trajs, after):
    """Feeds ``trajs`` then runs ``after``; returns (items per table, error, cached)."""
    tables.clear()
    obs = make(tables.client)
    error = None
    try:
        for i, t in enumerate(trajs):
            try:
                obs(t)
            except ValueError:
                error = f"call {i}"
                raise
        if after is not None:
            try:
                after(obs)
            except ValueError:
                error = "after"
                raise
    except ValueError:
        pass
    cached = obs._cached_steps
    obs.close()
    return {n: tables.drain(n) for n in tables.names}, error, cached


def same_items(a: list, b: list) -> bool:
    if len(a) != len(b):
        return False
    for (pa, ca), (pb, cb) in zip(a, b):
        if pa != pb or len(ca) != len(cb):
            return False
        for x, y in zip(ca, cb):
            if x.dtype != y.dtype or x.shape != y.shape or not np.array_equal(x, y):
                return False
    return True


def compare(tables, tfa_make, our_make, trajs, after, adjust=None):
    theirs = run(tables, tfa_make, trajs, after)
    ours = run(tables, our_make, trajs, after)
    t_items, t_err, t_cached = theirs
    if adjust is not None:
        t_items = adjust(t_items, t_err)
    ok = (
        t_err == ours[1]
        and t_cached == ours[2]
        and all(same_items(t_items[n], ours[0][n]) for n in tables.names)
    )
    return ok, theirs, ours


def _reset(write: bool):
    return lambda o: o.reset(write_cached_steps=write)


def check_trajectory(tables, failures, counts):
    afters = {"none": None, "reset(True)": _reset(True), "reset(False)": _reset(False)}
    for L, stride, (pad, tile), k, steps, after_name, seq, multi in itertools.product(
        [1, 2, 3, 4],
        [1, 2, 3, 5],
        [(False, False), (True, False), (True, True)],
        [1, 2, 3, 5],
        [1, 4, 11],
        list(afters),
        [False, True],
        [False, True],
    ):
        if multi and (L, stride, k) not in {(2, 1, 3), (3, 2, 5), (4, 4, 5)}:
            continue
        trajs = record(k, steps, seed=L * 100 + k)
        names = ["a", "b"] if multi else "a"
        tfa_cls = (
            reverb_utils.ReverbTrajectorySequenceObserver
            if seq
            else reverb_utils.ReverbAddTrajectoryObserver
        )
        our_cls = observers.TrajectorySequenceObserver if seq else observers.TrajectoryObserver
        args = dict(
            table_name=names,
            sequence_length=L,
            stride_length=stride,
            priority=2,
            pad_end_of_episodes=pad,
            tile_end_of_episodes=tile,
        )
        adjust = None
        if after_name == "reset(True)" and not pad:

            def adjust(items, err, _L=L):
                # TF-Agents wrote the window due at this count a second time.
                out = {}
                for n, it in items.items():
                    if err is None and len(it) >= 2 and same_items(it[-1:], it[-2:-1]):
                        counts["known:" + "traj_reset_duplicate"] += 1
                        it = it[:-1]
                    out[n] = it
                return out

        ok, theirs, ours = compare(
            tables,
            lambda c, a=args, f=tfa_cls: f(c, **a),
            lambda c, a=args, f=our_cls: f(c, **a),
            trajs,
            afters[after_name],
            adjust,
        )
        counts["trajectory" if not seq else "sequence"] += 1
        counts["items"] += sum(map(len, ours[0].values()))
        if not ok:
            failures.append(
                dict(
                    kind="sequence" if seq else "trajectory",
                    L=L,
                    stride=stride,
                    pad=pad,
                    tile=tile,
                    k=k,
                    steps=steps,
                    after=after_name,
                    multi=multi,
                    tfa=_summary(theirs),
                    ours=_summary(ours),
                )
            )


def check_episode(tables, failures, counts):
    afters = {"none": None, "reset(True)": _reset(True), "reset(False)": _reset(False)}
    for max_len, bypass, k, steps, after_name in itertools.product(
        [1, 2, 3, 4, 6, 8], [False, True], [1, 2, 3, 5], [1, 4, 6, 11], list(afters)
    ):
        trajs = record(k, steps, seed=k)
        args = dict(
            table_name="a", max_sequence_length=max_len, priority=3, bypass_partial_episodes=bypass
        )
        theirs = run(
            tables,
            lambda c, a=args: reverb_utils.ReverbAddEpisodeObserver(c, **a),
            trajs,
            afters[after_name],
        )
        ours = run(
            tables, lambda c, a=args: observers.EpisodeObserver(c, **a), trajs, afters[after_name]
        )
        t_items = theirs[0]["a"]
        o_items = ours[0]["a"]
        # TF-Agents' reset(True) in the middle of an overflowed episode wrote that episode's
        # first max_sequence_length steps; Ostinato never writes an overflowed episode.
        if (
            after_name == "reset(True)"
            and len(t_items) == len(o_items) + 1
            and same_items(t_items[:-1], o_items)
            and len(t_items[-1][1][0]) == max_len
        ):
            counts["known:episode_reset_overflow"] += 1
            t_items = t_items[:-1]
        ok = theirs[1] == ours[1] and theirs[2] == ours[2] and same_items(t_items, o_items)
        counts["episode"] += 1
        counts["items"] += len(o_items)
        if not ok:
            failures.append(
                dict(
                    kind="episode",
                    max_len=max_len,
                    bypass=bypass,
                    k=k,
                    steps=steps,
                    after=after_name,
                    tfa=_summary(theirs),
                    ours=_summary(ours),
                )
            )


def _slice(traj, i):
    return tf.nest.map_structure(lambda x: np.asarray(x)[i], traj)


def check_batched(tables, failures, counts):
    for ks, (kind, args) in itertools.product(
        [[3, 5], [1, 2, 4], [5, 5, 5, 5]],
        [
            ("traj", dict(sequence_length=2)),
            (
                "traj",
                dict(
                    sequence_length=3,
                    stride_length=2,
                    pad_end_of_episodes=True,
                    tile_end_of_episodes=True,
                ),
            ),
            ("seq", dict(sequence_length=3, stride_length=1)),
            ("episode", dict(max_sequence_length=6, bypass_partial_episodes=True)),
        ],
    ):
        trajs = record(0, 40, seed=7, batch=ks)
        n = len(ks)
        tfa_cls = {
            "traj": reverb_utils.ReverbAddTrajectoryObserver,
            "seq": reverb_utils.ReverbTrajectorySequenceObserver,
            "episode": reverb_utils.ReverbAddEpisodeObserver,
        }[kind]
        our_cls = {
            "traj": observers.BatchedTrajectoryObserver,
            "seq": observers.BatchedTrajectorySequenceObserver,
            "episode": observers.BatchedEpisodeObserver,
        }[kind]
        tables.clear()
        per_env = [tfa_cls(tables.client, "a", **args) for _ in range(n)]
        for t in trajs:
            for i, o in enumerate(per_env):
                o(_slice(t, i))
        for o in per_env:
            o.close()
        theirs = tables.drain("a")
        tables.clear()
        ours_obs = our_cls(tables.client, "a", num_envs=n, **args)
        for t in trajs:
            ours_obs(t)
        ours_obs.close()
        ours = tables.drain("a")
        counts["batched"] += 1
        counts["items"] += len(ours)
        if not same_items(sorted(theirs, key=_key), sorted(ours, key=_key)):
            failures.append(
                dict(kind="batched-" + kind, ks=ks, args=args, tfa=len(theirs), ours=len(ours))
            )


def _key(item):
    return (item[0], tuple(c.tobytes() for c in item[1]))


def _summary(result):
    items, err, cached = result
    return dict(
        error=err,
        cached=cached,
        items={n: [[c.tolist() for c in cols] for _, cols in it][:6] for n, it in items.items()},
    )


def check_replay_buffer(failures, counts):
    """Single deterministic passes: TF-Agents' ReverbReplayBuffer against ours."""
    spec = tensor_spec.TensorSpec((), tf.int64)
    episodes = [[1, 2, 3], [10, 20, 30, 40, 50], [7], [4, 5, 6, 7, 8, 9]]
    for seq_len, num_steps, batch in [
        (None, 2, None),
        (None, None, None),
        (None, 3, None),
        (None, 2, 2),
        (2, None, 2),
        (2, 1, 3),
        (4, 2, None),
        (4, 2, 3),
        (4, 4, 1),
        (4, None, None),
    ]:
        eps = (
            episodes
            if seq_len is None
            else [list(range(100 * i, 100 * i + seq_len)) for i in range(5)]
        )
        server = reverb.Server(
            [
                reverb.Table(
                    n,
                    reverb.selectors.Fifo(),
                    reverb.selectors.Fifo(),
                    1000,
                    reverb.rate_limiters.MinSize(1),
                    max_times_sampled=1,
                )
                for n in ("tfa", "np", "tf")
            ]
        )
        client = server.localhost_client()
        with client.trajectory_writer(10) as w:
            for ep in eps:
                for x in ep:
                    w.append(np.int64(x))
                for n in ("tfa", "np", "tf"):
                    w.create_item(n, 1.0, w.history[-len(ep) :])
                w.end_episode()
        got = {}
        rb = reverb_replay_buffer.ReverbReplayBuffer(
            spec, "tfa", seq_len, local_server=server, rate_limiter_timeout_ms=200
        )
        ds = rb.as_dataset(batch, num_steps, single_deterministic_pass=True)
        got["tfa"] = [(d.numpy().tolist(), i.priority.numpy().tolist()) for d, i in ds]
        for name, fw in (("np", "numpy"), ("tf", "tf")):
            ours = observers.ReplayBuffer(
                spec, name, seq_len, local_server=server, rate_limiter_timeout_ms=200
            )
            ds = ours.as_dataset(batch, num_steps, single_deterministic_pass=True, framework=fw)
            got[name] = [(np.asarray(d).tolist(), np.asarray(i.priority).tolist()) for d, i in ds]
        server.stop()
        counts["replay_buffer"] += 1
        if not (got["tfa"] == got["np"] == got["tf"]):
            failures.append(
                dict(
                    kind="replay_buffer", seq_len=seq_len, num_steps=num_steps, batch=batch, got=got
                )
            )


def main() -> int:
    from collections import Counter

    counts: Counter = Counter()
    failures: list = []
    tables = Tables()
    check_trajectory(tables, failures, counts)
    check_episode(tables, failures, counts)
    check_batched(tables, failures, counts)
    tables.server.stop()
    check_replay_buffer(failures, counts)
    print(
        json.dumps(
            dict(counts=dict(counts), failures=failures[:5], num_failures=len(failures)),
            default=str,
        )
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
