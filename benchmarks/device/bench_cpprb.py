"""cpprb (numpy buffers with C++ segment trees) under the common setup; CPU only."""

from __future__ import annotations

import gc
import importlib.metadata

import numpy as np
from common import (
    ALPHA,
    BETA,
    CALLS,
    FILL_CHUNK,
    SAMPLE_BATCH,
    host_data,
    parse_args,
    priorities,
    report,
    time_per_call,
)


def env_dict(obs_dtype: str) -> dict:
    return {
        "obs": {"shape": (32, 32, 3), "dtype": np.dtype(obs_dtype)},
        "action": {"shape": 1, "dtype": np.int32},
        "reward": {"shape": 1, "dtype": np.float32},
    }


def fill(rb, data: dict, capacity: int) -> None:
    for _ in range(0, capacity, FILL_CHUNK):
        rb.add(**data)


def main() -> None:
    import cpprb

    args = parse_args(__doc__)
    capacity = args.capacity
    chunk = host_data(FILL_CHUNK, args.obs_dtype)
    one = {k: v[0] for k, v in host_data(1, args.obs_dtype, seed=2).items()}
    batch = host_data(128, args.obs_dtype, seed=3)
    prios = priorities()
    results = {}
    uniform = {"sample", "insert1", "insert128"} & set(args.lines)
    if uniform:
        rb = cpprb.ReplayBuffer(capacity, env_dict(args.obs_dtype))
        fill(rb, chunk, capacity)
        if "sample" in uniform:
            results["sample"] = time_per_call(
                lambda: rb.sample(SAMPLE_BATCH), CALLS["sample"], args.repeats
            )
        if "insert1" in uniform:
            results["insert1"] = time_per_call(
                lambda: rb.add(**one), CALLS["insert1"], args.repeats
            )
        if "insert128" in uniform:
            results["insert128"] = time_per_call(
                lambda: rb.add(**batch), CALLS["insert128"], args.repeats
            )
        del rb
        gc.collect()
    per = {"per_step", "per_insert1", "per_insert128"} & set(args.lines)
    if per:
        rb = cpprb.PrioritizedReplayBuffer(capacity, env_dict(args.obs_dtype), alpha=ALPHA)
        fill(rb, chunk, capacity)

        def step():
            sample = rb.sample(SAMPLE_BATCH, beta=BETA)
            rb.update_priorities(sample["indexes"], prios)
            return sample

        if "per_step" in per:
            results["per_step"] = time_per_call(step, CALLS["per_step"], args.repeats)
        if "per_insert1" in per:
            results["per_insert1"] = time_per_call(
                lambda: rb.add(**one), CALLS["per_insert1"], args.repeats
            )
        if "per_insert128" in per:
            results["per_insert128"] = time_per_call(
                lambda: rb.add(**batch), CALLS["per_insert128"], args.repeats
            )
    report("cpprb", args, results, version=importlib.metadata.version("cpprb"))


if __name__ == "__main__":
    main()
