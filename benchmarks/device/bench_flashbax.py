"""flashbax item buffers (jit-compiled, state donated) under the common setup."""

from __future__ import annotations

import gc
import importlib.metadata

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
    import flashbax as fbx
    import jax

    args = parse_args(__doc__)
    capacity = args.capacity
    device = jax.devices(args.device)[0]

    def put(tree):
        return jax.device_put(tree, device)

    chunk = put(host_data(FILL_CHUNK, args.obs_dtype))
    one = put({k: v[0] for k, v in host_data(1, args.obs_dtype, seed=2).items()})
    batch = put(host_data(128, args.obs_dtype, seed=3))
    prios = put(priorities())
    example = {k: v[0] for k, v in chunk.items()}
    sync = jax.block_until_ready
    results = {}
    # Keys split up front, so the timed calls do not pay for splitting or slicing.
    keys = iter(list(jax.random.split(jax.random.PRNGKey(0), 20_000)))

    def timed(key, fn):
        if key in args.lines:
            results[key] = time_per_call(fn, CALLS[key], args.repeats, sync=sync)

    uniform = {"sample", "insert1", "insert128"} & set(args.lines)
    if uniform:
        kw = dict(max_length=capacity, min_length=1, sample_batch_size=SAMPLE_BATCH)
        single = fbx.make_item_buffer(**kw)
        seq = fbx.make_item_buffer(**kw, add_sequences=True)
        holder = {"state": jax.device_put(single.init(example), device)}
        add1 = jax.jit(single.add, donate_argnums=0)
        addn = jax.jit(seq.add, donate_argnums=0)
        sample = jax.jit(seq.sample)
        for _ in range(0, capacity, FILL_CHUNK):
            holder["state"] = addn(holder["state"], chunk)

        def do_add(fn, data):
            holder["state"] = fn(holder["state"], data)
            return holder["state"]

        timed("sample", lambda: sample(holder["state"], next(keys)))
        timed("insert1", lambda: do_add(add1, one))
        timed("insert128", lambda: do_add(addn, batch))
        del holder, single, seq
        gc.collect()
    per = {"per_step", "per_insert1", "per_insert128"} & set(args.lines)
    if per:
        # flashbax knows "cpu", "gpu" and "tpu". Given "cuda" it warns and falls back to
        # "cpu", whose priority update is a lax.scan over the batch with a fori_loop over
        # the tree depth: on a GPU every loop iteration is a host round trip, and filling
        # 500k rows then takes minutes (what stopped the first GPU run). "gpu" selects the
        # vectorised update, as flashbax's users on a GPU configure it.
        kw = dict(
            max_length=capacity,
            min_length=1,
            sample_batch_size=SAMPLE_BATCH,
            priority_exponent=ALPHA,
            device={"cuda": "gpu"}.get(args.device, args.device),
        )
        single = fbx.make_prioritised_item_buffer(**kw)
        seq = fbx.make_prioritised_item_buffer(**kw, add_sequences=True)
        holder = {"state": jax.device_put(single.init(example), device)}
        add1 = jax.jit(single.add, donate_argnums=0)
        addn = jax.jit(seq.add, donate_argnums=0)
        set_p = jax.jit(seq.set_priorities, donate_argnums=0)

        @jax.jit
        def sample(state, key):
            # flashbax returns probabilities; the caller computes the IS weights.
            out = seq.sample(state, key)
            w = (capacity * out.probabilities) ** (-BETA)  # the buffer is full
            return out.experience, out.indices, w / w.max()

        for _ in range(0, capacity, FILL_CHUNK):
            holder["state"] = addn(holder["state"], chunk)

        def step():
            _, indices, _ = sample(holder["state"], next(keys))
            holder["state"] = set_p(holder["state"], indices, prios)
            return holder["state"]

        def do_add(fn, data):
            holder["state"] = fn(holder["state"], data)
            return holder["state"]

        timed("per_step", step)
        timed("per_insert1", lambda: do_add(add1, one))
        timed("per_insert128", lambda: do_add(addn, batch))
    report("flashbax", args, results, version=importlib.metadata.version("flashbax"))


if __name__ == "__main__":
    main()
