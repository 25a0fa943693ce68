"""ostinato.device buffers under the common setup (``--backend torch`` or ``jax``)."""

from __future__ import annotations

import gc
import os
import sys

from common import (
    ALPHA,
    BETA,
    CALLS,
    FILL_CHUNK,
    LINES,
    SAMPLE_BATCH,
    host_data,
    parse_args,
    priorities,
    report,
    time_per_call,
)

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "src"))

SHAPES = [(32, 32, 3), (), ()]


def main() -> None:
    backend = "torch"
    if "--backend" in sys.argv:
        i = sys.argv.index("--backend")
        backend = sys.argv[i + 1]
        del sys.argv[i : i + 2]
    args = parse_args(__doc__)
    from ostinato.device import PriorityReplayBuffer, UniformReplayBuffer

    types = [args.obs_dtype, "int32", "float32"]
    if backend == "torch":
        import torch

        device = torch.device(args.device)

        def put(array):
            return torch.as_tensor(array).to(device)

        def sync(_):
            if device.type == "cuda":
                torch.cuda.synchronize()

    else:
        import jax

        device = jax.devices(args.device)[0]

        def put(array):
            return jax.device_put(array, device)

        def sync(out):
            # Inserts return nothing: wait for the buffer's (donated, replaced) state.
            jax.block_until_ready(out if out is not None else current["buf"].state)

    def columns(data):
        return [put(data[k]) for k in ("obs", "action", "reward")]

    chunk = columns(host_data(FILL_CHUNK, args.obs_dtype))
    one = columns({k: v[0] for k, v in host_data(1, args.obs_dtype, seed=2).items()})
    batch = columns(host_data(128, args.obs_dtype, seed=3))
    prios = put(priorities())
    results = {}
    current = {}

    def timed(key, fn):
        if key in args.lines:
            results[key] = time_per_call(fn, CALLS[key], args.repeats, sync=sync)

    common = dict(shapes=SHAPES, types=types, device=args.device, seed=0, backend=backend)
    if {"sample", "insert1", "insert128"} & set(args.lines):
        buf = current["buf"] = UniformReplayBuffer(SAMPLE_BATCH, args.capacity, **common)
        for _ in range(0, args.capacity, FILL_CHUNK):
            buf.insert(chunk)
        timed("sample", buf.sample)
        timed("insert1", lambda: buf.insert(one))
        timed("insert128", lambda: buf.insert(batch))
        del buf
        current.clear()
        gc.collect()
    if {"per_step", "per_insert1", "per_insert128"} & set(args.lines):
        buf = current["buf"] = PriorityReplayBuffer(
            ALPHA, args.capacity, SAMPLE_BATCH, beta=BETA, **common
        )
        for _ in range(0, args.capacity, FILL_CHUNK):
            buf.insert(*chunk)

        def step():
            out = buf.sample()
            buf.update_priorities(out[0], prios)
            return out

        timed("per_step", step)
        timed("per_insert1", lambda: buf.insert(*one))
        timed("per_insert128", lambda: buf.insert(*batch))
    assert set(results) <= set(LINES)
    report(f"ostinato ({backend})", args, results)


if __name__ == "__main__":
    main()
