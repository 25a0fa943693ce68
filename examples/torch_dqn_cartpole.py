"""DQN in PyTorch on gymnasium's CartPole, 8 vectorised environments, replay through Ostinato.

Experience goes from a gymnasium ``SyncVectorEnv`` through
``ostinato.observers.BatchedTrajectoryObserver`` (one writer per environment, two-step items
``[t, t+1]`` that never cross an episode or an environment) into an embedded Ostinato table,
and comes back as torch batches from ``ostinato.observers.ReplayBuffer.as_dataset``. Each
two-step item is one transition: ``observation[:, 0]``, ``action[:, 0]``, ``reward[:, 0]``,
``discount[:, 0]`` (0 when the episode terminated, 1 when it was truncated, so a time-limit
end bootstraps) and the next observation ``observation[:, 1]``. The learner is double DQN
with a target network, epsilon-greedy exploration and a decaying learning rate; every
``select_every`` steps the greedy network is checked and the best one is kept (see
:func:`train`). Runs are not bit-for-bit repeatable: the table samples with its own random
generator, on the sampler's background thread.

Run::

    python examples/torch_dqn_cartpole.py --seed 0

Needs ``torch`` and ``gymnasium``. No TensorFlow.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import time
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

import ostinato as reverb
from ostinato import observers


@dataclasses.dataclass
class Config:
    seed: int = 0
    num_envs: int = 8
    env_steps: int = 24_000          # transitions collected, over all environments
    learning_starts: int = 1_000     # items in the table before the first update
    updates_per_step: int = 2        # gradient steps per vector step (8 transitions)
    batch_size: int = 128
    gamma: float = 0.99
    lr: float = 1e-3
    lr_end: float = 0.1              # the learning rate decays linearly to lr * lr_end
    target_period: int = 250         # gradient steps between target-network copies
    eps_start: float = 1.0
    eps_end: float = 0.05
    eps_fraction: float = 0.5        # of env_steps over which epsilon decays
    capacity: int = 50_000
    hidden: int = 128
    eval_episodes: int = 10          # final greedy evaluation (its own episode seeds)
    select_every: int = 2_000        # env steps between greedy checks choosing the network
    select_episodes: int = 10        # (0: keep the last network)


def q_network(obs_dim: int, num_actions: int, hidden: int) -> nn.Module:
    return nn.Sequential(nn.Linear(obs_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden),
                         nn.ReLU(), nn.Linear(hidden, num_actions))


def make_server(envs: Any, capacity: int, min_size: int) -> reverb.Server:
    step_spec = observers.gym_step_spec(envs.single_observation_space, envs.single_action_space)
    return reverb.Server([reverb.Table(
        "replay", sampler=reverb.selectors.Uniform(), remover=reverb.selectors.Fifo(),
        max_size=capacity, rate_limiter=reverb.rate_limiters.MinSize(min_size),
        signature=observers.add_outer_dim(step_spec, 2))])


def evaluate(net: nn.Module, seed: int, episodes: int) -> list[float]:
    """Greedy returns on a fresh CartPole-v1 (500 steps at most)."""
    env = gym.make("CartPole-v1")
    returns = []
    with torch.no_grad():
        for i in range(episodes):
            obs, _ = env.reset(seed=seed + i)
            done, total = False, 0.0
            while not done:
                action = int(net(torch.as_tensor(obs)[None]).argmax(1))
                obs, reward, terminated, truncated, _ = env.step(action)
                total += float(reward)
                done = terminated or truncated
            returns.append(total)
    env.close()
    return returns


def train(config: Config, log: Any = None) -> dict[str, Any]:
    """Trains a DQN agent; returns the greedy evaluation of the network it keeps.

    DQN's greedy return on CartPole swings from one update to the next, so (like
    Stable-Baselines' ``EvalCallback``) every ``select_every`` steps the greedy network plays
    ``select_episodes`` episodes and the best one is kept; training stops early when it
    balances all of them for 500 steps. The reported evaluation plays ``eval_episodes``
    other episodes (different seeds) with the kept network; the last network's is reported
    too.
    """
    start = time.perf_counter()
    torch.manual_seed(config.seed)
    rng = np.random.default_rng(config.seed)
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * config.num_envs)
    n_actions = int(envs.single_action_space.n)
    net = q_network(envs.single_observation_space.shape[0], n_actions, config.hidden)
    target = q_network(envs.single_observation_space.shape[0], n_actions, config.hidden)
    target.load_state_dict(net.state_dict())
    optimizer = torch.optim.Adam(net.parameters(), lr=config.lr)

    # MinSize(1): this loop both writes and samples, so it waits for items itself (a
    # rate limiter asking for more items than are written would block it forever).
    server = make_server(envs, config.capacity, 1)
    client = server.localhost_client()
    observer = observers.BatchedTrajectoryObserver(client, "replay", sequence_length=2, env=envs)
    buffer = observers.ReplayBuffer(table_name="replay", sequence_length=2, local_server=server)
    batches = None
    obs, info = envs.reset(seed=config.seed)
    observer.on_reset(obs, info)

    steps = updates = 0
    kept: tuple[float, int, dict[str, Any] | None] = (-1.0, 0, None)  # score, steps, weights
    episode_returns: list[float] = []
    running = np.zeros(config.num_envs)
    decay_steps = config.eps_fraction * config.env_steps
    try:
        while steps < config.env_steps:
            eps = max(config.eps_end, config.eps_start - (config.eps_start - config.eps_end)
                      * steps / decay_steps)
            with torch.no_grad():
                actions = net(torch.as_tensor(obs)).argmax(1).numpy()
            explore = rng.random(config.num_envs) < eps
            actions = np.where(explore, rng.integers(n_actions, size=config.num_envs), actions)
            next_obs, rewards, terminated, truncated, info = envs.step(actions)
            observer.on_step(next_obs, actions, rewards, terminated, truncated, info)
            running += rewards
            for i in np.flatnonzero(terminated | truncated):
                episode_returns.append(float(running[i]))
                running[i] = 0.0
            obs = next_obs
            steps += config.num_envs
            if batches is None:
                if buffer.num_frames() < config.learning_starts:
                    continue
                batches = iter(buffer.as_dataset(config.batch_size, framework="torch"))
            for group in optimizer.param_groups:
                group["lr"] = config.lr * (1 - (1 - config.lr_end) * steps / config.env_steps)
            for _ in range(config.updates_per_step):
                data, _ = next(batches)
                o, o2 = data["observation"][:, 0], data["observation"][:, 1]
                a = data["action"][:, 0]
                r, d = data["reward"][:, 0], data["discount"][:, 0]
                with torch.no_grad():  # double DQN target
                    a2 = net(o2).argmax(1, keepdim=True)
                    y = r + config.gamma * d * target(o2).gather(1, a2).squeeze(1)
                q = net(o).gather(1, a[:, None]).squeeze(1)
                loss = nn.functional.smooth_l1_loss(q, y)
                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(net.parameters(), 10.0)
                optimizer.step()
                updates += 1
                if updates % config.target_period == 0:
                    target.load_state_dict(net.state_dict())
            if config.select_episodes and steps % config.select_every < config.num_envs:
                score = float(np.mean(evaluate(net, seed=20_000 + 100 * config.seed + steps,
                                               episodes=config.select_episodes)))
                if score >= kept[0]:
                    kept = (score, steps, copy.deepcopy(net.state_dict()))
                if log is not None:
                    log(f"steps {steps:6d}  greedy return {score:6.1f}")
                if score >= 500.0:
                    break
            if log is not None and steps % 4000 < config.num_envs:
                recent = np.mean(episode_returns[-20:]) if episode_returns else 0.0
                log(f"steps {steps:6d}  eps {eps:.2f}  items {buffer.num_frames():6d}  "
                    f"recent return {recent:6.1f}  {time.perf_counter() - start:5.1f}s")
    finally:
        observer.close()
        envs.close()
        server.stop()
    train_s = time.perf_counter() - start
    eval_seed = 10_000 + 100 * config.seed
    last = evaluate(net, seed=eval_seed, episodes=config.eval_episodes)
    if kept[2] is not None:
        net.load_state_dict(kept[2])
    returns = evaluate(net, seed=eval_seed, episodes=config.eval_episodes)
    return dict(seed=config.seed, eval_returns=returns, eval_mean=float(np.mean(returns)),
                kept_at_steps=kept[1] if kept[2] is not None else steps,
                last_network_eval_mean=float(np.mean(last)), env_steps=steps, updates=updates,
                episodes=len(episode_returns), train_seconds=round(train_s, 1),
                total_seconds=round(time.perf_counter() - start, 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for field in dataclasses.fields(Config):
        parser.add_argument("--" + field.name.replace("_", "-"), type=type(field.default),
                            default=field.default)
    parser.add_argument("--quiet", action="store_true")
    args = vars(parser.parse_args())
    quiet = args.pop("quiet")
    torch.set_num_threads(1)
    result = train(Config(**args), log=None if quiet else print)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
