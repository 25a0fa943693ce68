"""TorchRL ReplayBuffer(LazyTensorStorage, RandomSampler | PrioritizedSampler) under the
common setup."""

from __future__ import annotations

import gc
import importlib.metadata
import os
import sys

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


def main() -> None:
    import torch

    # The torchrl wheels on PyPI are built against a newer torch than the 2.13.0 wheel used
    # here; their C++ segment-tree extension then fails to load because of autograd symbols
    # that the segment trees never call. Binding lazily loads the same binary code; a call
    # into a missing symbol would abort the process, so a completed run measured real code.
    sys.setdlopenflags(os.RTLD_LAZY | os.RTLD_LOCAL)
    from tensordict import TensorDict
    from torchrl.data import LazyTensorStorage, ReplayBuffer
    from torchrl.data.replay_buffers.samplers import PrioritizedSampler, RandomSampler

    args = parse_args(__doc__)
    capacity = args.capacity
    device = torch.device(args.device)
    sync = torch.cuda.synchronize if device.type == "cuda" else None

    def td(data, batch):
        tensors = {k: torch.as_tensor(v).to(device) for k, v in data.items()}
        return TensorDict(tensors, batch_size=batch, device=device)

    chunk = td(host_data(FILL_CHUNK, args.obs_dtype), [FILL_CHUNK])
    one = td({k: v[0] for k, v in host_data(1, args.obs_dtype, seed=2).items()}, [])
    batch = td(host_data(128, args.obs_dtype, seed=3), [128])
    prios = torch.from_numpy(priorities()).to(device)
    results = {}

    def timed(key, fn):
        if key in args.lines:
            results[key] = time_per_call(
                fn, CALLS[key], args.repeats, sync=(lambda _: sync()) if sync else None
            )

    uniform = {"sample", "insert1", "insert128"} & set(args.lines)
    if uniform:
        rb = ReplayBuffer(
            storage=LazyTensorStorage(capacity, device=device),
            sampler=RandomSampler(),
            batch_size=SAMPLE_BATCH,
        )
        for _ in range(0, capacity, FILL_CHUNK):
            rb.extend(chunk)
        timed("sample", rb.sample)
        timed("insert1", lambda: rb.add(one))
        timed("insert128", lambda: rb.extend(batch))
        del rb
        gc.collect()
    per = {"per_step", "per_insert1", "per_insert128"} & set(args.lines)
    if per:
        rb = ReplayBuffer(
            storage=LazyTensorStorage(capacity, device=device),
            sampler=PrioritizedSampler(capacity, alpha=ALPHA, beta=BETA),
            batch_size=SAMPLE_BATCH,
        )
        for _ in range(0, capacity, FILL_CHUNK):
            rb.extend(chunk)

        def step():
            data, info = rb.sample(return_info=True)
            rb.update_priority(info["index"], prios)
            return data

        timed("per_step", step)
        timed("per_insert1", lambda: rb.add(one))
        timed("per_insert128", lambda: rb.extend(batch))
    report("torchrl", args, results, version=importlib.metadata.version("torchrl"))


if __name__ == "__main__":
    main()
