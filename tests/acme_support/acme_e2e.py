"""End to end, Acme's own pieces on Ostinato: a toy ``dm_env`` environment -> Acme's
``NStepTransitionAdder(n_step=3)`` -> an Ostinato server over gRPC -> Acme's
``make_reverb_dataset`` (tf.data, through ``reverb.TrajectoryDataset``) -> ``NumpyIterator``
-> 200 batches, every transition in them checked against what the environment produced.

Run with ``import reverb`` resolving to Ostinato (``scripts/test_acme.sh`` does)::

    python -m ostinato.as_reverb tests/acme_support/acme_e2e.py [--batches 200]

Each observation is ``(episode, t)``, so a sampled transition says where it came from; its
action, n-step return, total discount and next observation are then recomputed from the
environment's rules and compared. Exits non-zero (an ``AssertionError``) on any mismatch.
"""

from __future__ import annotations

import argparse
import sys
import time

import dm_env
import numpy as np
from dm_env import specs as env_specs

N_STEP = 3
GAMMA = 0.9


def action_for(episode: int, t: int) -> int:
    return (7 * t + episode) % 3


def reward_for(episode: int, t: int) -> float:
    """Reward of the action taken at step ``t`` (received with observation ``t + 1``)."""
    return float(np.float32(0.25 * t + 0.01 * episode))


def length_of(episode: int) -> int:
    return 2 + (5 * episode) % 7  # 2..8 steps: shorter and longer than N_STEP


def terminates(episode: int) -> bool:
    return episode % 3 != 0  # every third episode is truncated (last discount 1)


class ToyEnv(dm_env.Environment):
    """Deterministic episodes whose observations name themselves: ``[episode, t]``."""

    def __init__(self) -> None:
        self._episode = -1
        self._t = 0

    def _obs(self) -> np.ndarray:
        return np.array([self._episode, self._t], dtype=np.float32)

    def reset(self) -> dm_env.TimeStep:
        self._episode += 1
        self._t = 0
        return dm_env.restart(self._obs())

    def step(self, action: int) -> dm_env.TimeStep:
        expected = action_for(self._episode, self._t)
        if int(action) != expected:
            raise AssertionError(f"policy chose {action}, expected {expected}")
        reward = np.float32(reward_for(self._episode, self._t))
        self._t += 1
        if self._t < length_of(self._episode):
            return dm_env.transition(reward, self._obs(), discount=np.float32(1.0))
        # dm_env.termination's discount is a Python float (float64); keep the spec's float32.
        discount = np.float32(0.0 if terminates(self._episode) else 1.0)
        return dm_env.TimeStep(dm_env.StepType.LAST, reward, discount, self._obs())

    def observation_spec(self) -> env_specs.Array:
        return env_specs.Array((2,), np.float32, name="observation")

    def action_spec(self) -> env_specs.DiscreteArray:
        return env_specs.DiscreteArray(3, dtype=np.int32, name="action")

    def reward_spec(self) -> env_specs.Array:
        return env_specs.Array((), np.float32, name="reward")

    def discount_spec(self) -> env_specs.BoundedArray:
        return env_specs.BoundedArray((), np.float32, 0.0, 1.0, name="discount")


def expected_transitions(episode: int) -> set[tuple[int, int]]:
    """``(t, k)``: the adder's transitions s_t -> s_{t+k} of one episode."""
    T = length_of(episode)
    out = {(0, k) for k in range(1, min(N_STEP, T) + 1)}
    out |= {(t, min(N_STEP, T - t)) for t in range(1, T)}
    return out


def env_discount(episode: int, t: int) -> float:
    """The environment's discount that comes with observation ``t + 1``."""
    last = t + 1 == length_of(episode)
    return 0.0 if last and terminates(episode) else 1.0


def check(
    obs: np.ndarray, action: int, reward: float, discount: float, next_obs: np.ndarray
) -> tuple[int, int, int]:
    episode, t = int(obs[0]), int(obs[1])
    next_episode, next_t = int(next_obs[0]), int(next_obs[1])
    k = next_t - t
    assert next_episode == episode, (obs, next_obs)
    assert (t, k) in expected_transitions(episode), (episode, t, k)
    assert action == action_for(episode, t), (episode, t, action)
    ret, total = 0.0, 1.0
    for i in range(k):  # R = r_t + g d_t r_{t+1} + ..., D = g^(k-1) d_t ... d_{t+k-1}
        ret += total * reward_for(episode, t + i)
        total *= env_discount(episode, t + i) * (GAMMA if i < k - 1 else 1.0)
    np.testing.assert_allclose(reward, ret, rtol=1e-5, err_msg=f"return of {(episode, t, k)}")
    np.testing.assert_allclose(discount, total, rtol=1e-5, err_msg=f"discount of {(episode, t, k)}")
    return episode, t, k


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=60)
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args(argv)

    import reverb

    if not getattr(reverb, "__ostinato__", False):
        raise SystemExit("run this with `python -m ostinato.as_reverb` (reverb is not Ostinato)")
    from acme import specs
    from acme.adders import reverb as adders
    from acme.datasets import NumpyIterator, make_reverb_dataset

    start = time.monotonic()
    env = ToyEnv()
    spec = specs.make_environment_spec(env)
    table = reverb.Table(
        name=adders.DEFAULT_PRIORITY_TABLE,
        sampler=reverb.selectors.Uniform(),
        remover=reverb.selectors.Fifo(),
        max_size=100_000,
        rate_limiter=reverb.rate_limiters.MinSize(1),
        signature=adders.NStepTransitionAdder.signature(spec),
    )
    server = reverb.Server([table], port=None)
    address = f"localhost:{server.port}"
    try:
        client = reverb.Client(address)
        adder = adders.NStepTransitionAdder(client, n_step=N_STEP, discount=GAMMA)
        expected: set[tuple[int, int, int]] = set()
        for _ in range(args.episodes):
            timestep = env.reset()
            episode = int(timestep.observation[0])
            adder.add_first(timestep)
            t = 0
            while not timestep.last():
                action = np.int32(action_for(episode, t))
                timestep = env.step(action)
                adder.add(action, timestep)
                t += 1
            expected |= {(episode, t0, k) for t0, k in expected_transitions(episode)}
        del adder  # flushes and closes its writer (Acme's __del__)
        size = client.server_info()[adders.DEFAULT_PRIORITY_TABLE].current_size
        assert size == len(expected), f"table holds {size} items, expected {len(expected)}"

        dataset = make_reverb_dataset(
            address, batch_size=args.batch_size, num_parallel_calls=2, prefetch_size=2
        )
        seen: set[tuple[int, int, int]] = set()
        iterator = NumpyIterator(dataset)
        for _ in range(args.batches):
            sample = next(iterator)
            data = sample.data
            assert data.observation.shape == (args.batch_size, 2), data.observation.shape
            assert sample.info.key.shape == (args.batch_size,)
            assert np.all(sample.info.times_sampled >= 1)
            for i in range(args.batch_size):
                seen.add(
                    check(
                        data.observation[i],
                        int(data.action[i]),
                        float(data.reward[i]),
                        float(data.discount[i]),
                        data.next_observation[i],
                    )
                )
        assert seen <= expected
        coverage = len(seen) / len(expected)
        assert coverage > 0.9, f"only {len(seen)} of {len(expected)} transitions were sampled"
        print(
            f"acme_e2e: {args.episodes} episodes -> {len(expected)} transitions "
            f"(NStepTransitionAdder n_step={N_STEP}) -> {args.batches} batches of "
            f"{args.batch_size} checked via make_reverb_dataset ({len(seen)} distinct, "
            f"{coverage:.0%}) in {time.monotonic() - start:.1f}s"
        )
        del iterator, dataset
        client.close()
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
