"""A prioritized step at Atari scale: 1,000,000 frames of (84, 84) uint8, batch 256.

One implementation per process (``--impl``), each printing JSON lines like the other
benchmarks:

* ``ostinato-torch``: ``PriorityReplayBuffer(device=...)`` with its default kernels (the
  fused Triton path on CUDA);
* ``ostinato-torch-tree``: the same with ``kernels="torch"`` (the sum tree, torch ops);
* ``ostinato-torch-graph``: the fused step (sample + update) captured once in a CUDA graph
  and replayed, as a learner that captures its whole update would;
* ``naive-torch``: what a user writes by hand in six lines of torch: ``p.pow(alpha)``,
  ``torch.multinomial`` over every priority, gathers, a scatter;
* ``ostinato-jax``: the jitted functional buffer (``search="flat"`` on a GPU), state
  donated;
* ``flashbax``: ``make_prioritised_item_buffer`` jitted, state donated, ``device="gpu"``.

Lines: ``per_step`` (sample 256 + update 256), ``per_sample``, ``per_update`` and
``per_insert1`` (one frame, action and reward).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "src"))

from common import time_per_call  # noqa: E402

ALPHA, BETA, BATCH, FRAME = 0.6, 0.4, 256, (84, 84)
CALLS = 300


def frames(n: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "obs": rng.integers(0, 256, size=(n, *FRAME), dtype=np.uint8),
        "action": rng.integers(0, 18, size=(n,), dtype=np.int32),
        "reward": rng.random(n, dtype=np.float32),
    }


def run_torch(impl: str, capacity: int, repeats: int) -> dict[str, float]:
    import torch

    from ostinato.device import PriorityReplayBuffer

    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    sync = (lambda _: torch.cuda.synchronize()) if dev.type == "cuda" else None
    chunk = {k: torch.from_numpy(v).to(dev) for k, v in frames(10_000, 0).items()}
    one = {k: torch.as_tensor(v[0]).to(dev) for k, v in frames(1, 1).items()}
    prios = torch.rand(BATCH, device=dev) + 0.01
    out: dict[str, float] = {}
    if impl == "naive-torch":
        obs = torch.empty((capacity, *FRAME), dtype=torch.uint8, device=dev)
        action = torch.empty(capacity, dtype=torch.int32, device=dev)
        reward = torch.empty(capacity, dtype=torch.float32, device=dev)
        for s in range(0, capacity, 10_000):
            n = min(10_000, capacity - s)
            obs[s : s + n] = chunk["obs"][:n]
            action[s : s + n] = chunk["action"][:n]
            reward[s : s + n] = chunk["reward"][:n]
        p = torch.ones(capacity, device=dev)

        def sample():
            probs = p.pow(ALPHA)
            probs = probs / probs.sum()
            idx = torch.multinomial(probs, BATCH, replacement=True)
            w = (capacity * probs[idx]) ** -BETA
            return idx, w / w.max(), obs[idx], action[idx], reward[idx]

        def step():
            batch = sample()
            p[batch[0]] = prios
            return batch

        out["per_step"] = time_per_call(step, CALLS, repeats, sync)
        out["per_sample"] = time_per_call(sample, CALLS, repeats, sync)
        return out
    kernels = "torch" if impl == "ostinato-torch-tree" else None
    buf = PriorityReplayBuffer(
        ALPHA,
        capacity,
        BATCH,
        [FRAME, (), ()],
        ["uint8", "int32", "float32"],
        device=dev,
        seed=0,
        validate=False,
        kernels=kernels,
    )
    cols = [chunk["obs"], chunk["action"], chunk["reward"]]
    for _ in range(0, capacity, 10_000):
        buf.insert(*cols)

    def step():
        batch = buf.sample(BETA)
        buf.update_priorities(batch[0], prios)
        return batch

    if impl == "ostinato-torch-graph":
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        graph.register_generator_state(buf.sampler.generator)
        with torch.cuda.graph(graph):
            step()
        out["per_step"] = time_per_call(graph.replay, CALLS, repeats, sync)
        return out
    out["per_step"] = time_per_call(step, CALLS, repeats, sync)
    out["per_sample"] = time_per_call(lambda: buf.sample(BETA), CALLS, repeats, sync)
    ids = buf.sample(BETA)[0]
    out["per_update"] = time_per_call(
        lambda: buf.update_priorities(ids, prios), CALLS, repeats, sync
    )
    row = [one["obs"], one["action"], one["reward"]]
    out["per_insert1"] = time_per_call(lambda: buf.insert(*row), CALLS * 3, repeats, sync)
    return out


def run_jax(impl: str, capacity: int, repeats: int) -> dict[str, float]:
    import jax
    import jax.numpy as jnp

    data = {k: jnp.asarray(v) for k, v in frames(10_000, 0).items()}
    one = {k: jnp.asarray(v[0]) for k, v in frames(1, 1).items()}
    prios = jnp.asarray(np.random.default_rng(2).random(BATCH, dtype=np.float32) + 0.01)
    keys = iter(list(jax.random.split(jax.random.PRNGKey(0), 20 * CALLS * repeats)))
    holder: dict = {}
    out: dict[str, float] = {}
    if impl == "flashbax":
        import flashbax as fbx

        platform = jax.devices()[0].platform
        kw = dict(
            max_length=capacity,
            min_length=1,
            sample_batch_size=BATCH,
            priority_exponent=ALPHA,
            device="gpu" if platform == "gpu" else "cpu",
        )
        seq = fbx.make_prioritised_item_buffer(**kw, add_sequences=True)
        single = fbx.make_prioritised_item_buffer(**kw)
        holder["s"] = seq.init({k: v[0] for k, v in data.items()})
        add = jax.jit(seq.add, donate_argnums=0)
        add1 = jax.jit(single.add, donate_argnums=0)
        set_p = jax.jit(seq.set_priorities, donate_argnums=0)

        @jax.jit
        def sample(state, key):
            res = seq.sample(state, key)
            w = (capacity * res.probabilities) ** (-BETA)
            return res.experience, res.indices, w / w.max()

        for _ in range(0, capacity, 10_000):
            holder["s"] = add(holder["s"], data)

        def step():
            _, idx, _ = sample(holder["s"], next(keys))
            holder["s"] = set_p(holder["s"], idx, prios)
            return holder["s"]

        def insert1():
            holder["s"] = add1(holder["s"], one)
            return holder["s"]

        out["per_step"] = time_per_call(step, CALLS, repeats, jax.block_until_ready)
        out["per_sample"] = time_per_call(
            lambda: sample(holder["s"], next(keys)), CALLS, repeats, jax.block_until_ready
        )
        out["per_insert1"] = time_per_call(insert1, CALLS, repeats, jax.block_until_ready)
        return out
    from ostinato.device.jax import make_priority_buffer

    buf = make_priority_buffer(
        ALPHA, capacity, BATCH, [FRAME, (), ()], ["uint8", "int32", "float32"]
    ).jit()
    holder["s"] = buf.init()
    cols = (data["obs"], data["action"], data["reward"])
    for _ in range(0, capacity, 10_000):
        holder["s"] = buf.add(holder["s"], cols)

    def step():
        batch = buf.sample(holder["s"], next(keys), BETA)
        holder["s"] = buf.update_priorities(holder["s"], batch[0], prios)
        return holder["s"]

    def insert1():
        holder["s"] = buf.add(holder["s"], (one["obs"], one["action"], one["reward"]))
        return holder["s"]

    out["per_step"] = time_per_call(step, CALLS, repeats, jax.block_until_ready)
    out["per_sample"] = time_per_call(
        lambda: buf.sample(holder["s"], next(keys), BETA), CALLS, repeats, jax.block_until_ready
    )
    out["per_insert1"] = time_per_call(insert1, CALLS, repeats, jax.block_until_ready)
    out["search"] = buf.buffer.search  # type: ignore[assignment]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--impl",
        required=True,
        choices=[
            "ostinato-torch",
            "ostinato-torch-tree",
            "ostinato-torch-graph",
            "naive-torch",
            "ostinato-jax",
            "flashbax",
        ],
    )
    parser.add_argument("--capacity", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    started = time.time()
    if args.impl in ("ostinato-jax", "flashbax"):
        results = run_jax(args.impl, args.capacity, args.repeats)
    else:
        results = run_torch(args.impl, args.capacity, args.repeats)
    extra = {k: v for k, v in results.items() if not isinstance(v, float)}
    for line, ms in results.items():
        if isinstance(ms, float):
            print(
                json.dumps(
                    {
                        "bench": "atari",
                        "impl": args.impl,
                        "line": line,
                        "ms": ms,
                        "capacity": args.capacity,
                        "repeats": args.repeats,
                        "seconds": round(time.time() - started, 1),
                        **extra,
                    }
                ),
                flush=True,
            )


if __name__ == "__main__":
    main()
