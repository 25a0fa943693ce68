"""The benchmark workloads, written once against the ``reverb`` module object.

The same functions run on Ostinato (``import ostinato as reverb``) and on dm-reverb
(``import reverb``), embedded (server in this process) or networked (server in its own process):
a workload receives a context (``harness.Ctx``) that gives it the module as ``ctx.reverb``, the
sizes, the repeat count, and ``ctx.serve(tables)``, which starts a server with those tables and
hands out clients. Everything inside the timed regions is user code, as users write it.

Steps are what a gym loop produces: rows of pre-generated arrays (views, ``obs[i]``, not
``obs[i].copy()``) and numpy scalars for ``action`` / ``reward``. The step dicts are built before
timing. Workload ids, sizes and exact code are documented in ``benchmarks/README.md``.

This module imports only numpy and the standard library, so it runs in either interpreter.
"""

from __future__ import annotations

import gc
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

W1_DATA_BYTES = 8 * 4 + 4 + 4  # obs f32[8] + action i32 + reward f32
W2_STEP_BYTES = 64 * 4 + 4 + 4  # obs f32[64] + action i32 + reward f32
W3_SHAPE = (84, 84, 4)
W3_FRAME_BYTES = 84 * 84 * 4
SEQ = 10  # W2 item length
BATCH = 256  # num_samples / batch_size of the sampling workloads
TABLE_MAX_SIZE = 1_000_000


@dataclass(frozen=True)
class Sizes:
    """How much each workload does. ``QUICK`` is for smoke tests, not for measurements."""

    w1_steps: int = 20_000
    w2_steps: int = 20_000
    w3_steps: int = 5_000
    fill_items: int = 100_000
    sample_total: int = 20_000
    w5_batches: int = 100  # W5: at least this many batches and w5_min_s, at most w5_max_s
    w5_min_s: float = 1.0
    w5_max_s: float = 3.0
    w6_seconds: float = 10.0
    w6_step_pool: int = 20_000
    mem_items: int = 1_000_000
    mem_checkpoints: int = 5  # MEM: RSS also read after each fifth of the items
    mem3_items: int = 5_000
    settle_s: float = 1.5
    scale_w1_total: int = 40_000
    scale_w4_total: int = 20_000
    w9_steps: int = 1_500  # vector steps (each one step of every environment)


FULL = Sizes()
QUICK = replace(
    FULL,
    w1_steps=2_000,
    w2_steps=2_000,
    w3_steps=300,
    fill_items=5_000,
    sample_total=2_048,
    w5_batches=10,
    w5_min_s=0.1,
    w5_max_s=0.5,
    w6_seconds=1.0,
    w6_step_pool=2_000,
    mem_items=20_000,
    mem3_items=300,
    settle_s=0.2,
    scale_w1_total=4_000,
    scale_w4_total=2_048,
    w9_steps=200,
)


# ---------------------------------------------------------------------------------------------
# Step data (generated before timing) and tables
# ---------------------------------------------------------------------------------------------


def w1_steps(n: int, seed: int, obs_dim: int = 8) -> list[dict]:
    """W1 steps {obs f32[obs_dim], action int32, reward f32}: views and numpy scalars."""
    rng = np.random.default_rng(seed)
    obs = rng.standard_normal((n, obs_dim), dtype=np.float32)
    action = rng.integers(0, 16, size=n, dtype=np.int32)
    reward = rng.standard_normal(n, dtype=np.float32)
    return [{"obs": obs[i], "action": action[i], "reward": reward[i]} for i in range(n)]


def w2_steps(n: int, seed: int) -> list[dict]:
    """W2 steps: {obs f32[64], action int32, reward f32}, views and numpy scalars."""
    return w1_steps(n, seed, obs_dim=64)


def w3_steps(n: int, seed: int) -> list[dict]:
    """W3 steps: {obs uint8[84,84,4]} of random bytes (incompressible), views."""
    frames = np.random.default_rng(seed).integers(0, 256, size=(n, *W3_SHAPE), dtype=np.uint8)
    return [{"obs": frames[i]} for i in range(n)]


def table_spec(kind: str, name: str, max_size: int = TABLE_MAX_SIZE) -> dict:
    """A JSON-able table description (networked servers build tables in another process)."""
    return {"kind": kind, "name": name, "max_size": max_size}


def build_table(reverb, spec: dict):
    """``uniform``: Uniform/Fifo/MinSize(1); ``prioritized``: Prioritized(0.6)/Fifo/MinSize(1);
    ``ratio``: Uniform/Fifo/SampleToInsertRatio(1.0, 100, 100) (W6)."""
    kind = spec["kind"]
    if kind == "ratio":
        limiter = reverb.rate_limiters.SampleToInsertRatio(
            samples_per_insert=1.0, min_size_to_sample=100, error_buffer=100
        )
    else:
        limiter = reverb.rate_limiters.MinSize(1)
    sampler = (
        reverb.selectors.Prioritized(0.6) if kind == "prioritized" else reverb.selectors.Uniform()
    )
    if kind not in ("uniform", "prioritized", "ratio"):
        raise ValueError(f"unknown table kind {kind!r}")
    return reverb.Table(
        name=spec["name"],
        sampler=sampler,
        remover=reverb.selectors.Fifo(),
        max_size=int(spec.get("max_size", TABLE_MAX_SIZE)),
        rate_limiter=limiter,
    )


# ---------------------------------------------------------------------------------------------
# User code: the loops that are timed (return the number of items created)
# ---------------------------------------------------------------------------------------------


def write_w1(w, table: str, steps: list[dict]) -> int:
    """W1: one item per step, the last step with squeezed columns (``history[c][-1]``)."""
    for step in steps:
        w.append(step)
        w.create_item(
            table,
            1.0,
            {
                "obs": w.history["obs"][-1],
                "action": w.history["action"][-1],
                "reward": w.history["reward"][-1],
            },
        )
    return len(steps)


def write_w1t(w, table: str, steps: list[dict]) -> int:
    """W1t: one item per step, a one-step trajectory (``history[c][-1:]``)."""
    for step in steps:
        w.append(step)
        w.create_item(
            table,
            1.0,
            {
                "obs": w.history["obs"][-1:],
                "action": w.history["action"][-1:],
                "reward": w.history["reward"][-1:],
            },
        )
    return len(steps)


def write_w2(w, table: str, steps: list[dict]) -> int:
    """W2: from the 10th step on, one item of the last 10 steps of all three columns."""
    n = 0
    for i, step in enumerate(steps):
        w.append(step)
        if i + 1 >= SEQ:
            w.create_item(
                table,
                1.0,
                {
                    "obs": w.history["obs"][-10:],
                    "action": w.history["action"][-10:],
                    "reward": w.history["reward"][-10:],
                },
            )
            n += 1
    return n


def write_partial(w, table: str, steps: list[dict]) -> int:
    """WP: Acme's adders' way of writing (``acme.adders.reverb``): each step in two appends, the
    observation first (``partial_step=True``), then action, reward and discount; from the 5th
    step on, one item of the last 5 steps of every column. Steps are W2's (``obs`` f32[64]
    views, ``action`` int32, ``reward`` f32); the discount is a float32 1.0."""
    n = 0
    one = np.float32(1.0)
    for i, step in enumerate(steps):
        w.append({"observation": step["obs"]}, partial_step=True)
        w.append({"action": step["action"], "reward": step["reward"], "discount": one})
        if i + 1 >= 5:
            h = w.history
            w.create_item(
                table,
                1.0,
                {
                    "observation": h["observation"][-5:],
                    "action": h["action"][-5:],
                    "reward": h["reward"][-5:],
                    "discount": h["discount"][-5:],
                },
            )
            n += 1
    return n


def structured_configs(reverb, table: str) -> list:
    """WS's configs: an n-step transition (the step before the newest and the newest
    observation) and a sequence of 5 steps ending before the newest (``[-6:-1]``), as Reverb's
    structured writer examples write them."""
    sw = reverb.structured_writer
    step = {"obs": None, "action": None, "reward": None}
    return [
        sw.create_config(
            sw.pattern_from_transform(
                step,
                lambda s: {
                    "obs": s["obs"][-2],
                    "action": s["action"][-2],
                    "reward": s["reward"][-2],
                    "next_obs": s["obs"][-1],
                },
            ),
            table=table,
        ),
        sw.create_config(
            sw.pattern_from_transform(
                step, lambda s: {"obs": s["obs"][-6:-1], "reward": s["reward"][-6:-1]}
            ),
            table=table,
        ),
    ]


def write_structured(w, steps: list[dict]) -> int:
    """WS: W2's steps through a structured writer made with :func:`structured_configs` (it
    creates the items: two per step once the history is long enough)."""
    for step in steps:
        w.append(step)
    return len(steps)


def write_w3(w, table: str, steps: list[dict]) -> int:
    """W3: one item per frame (``history["obs"][-1]``)."""
    for step in steps:
        w.append(step)
        w.create_item(table, 1.0, {"obs": w.history["obs"][-1]})
    return len(steps)


def sample_loop(client, table: str, total: int, **kw) -> int:
    """W4 (``kw={}``) and W4f (``kw={"emit_timesteps": False}``): 256 per call until ``total``."""
    n = 0
    while n < total:
        for _ in client.sample(table, num_samples=BATCH, **kw):
            pass
        n += BATCH
    return n


def sample_batch_loop(client, table: str, total: int) -> int:
    """W4b (Ostinato only): ``client.sample_batch`` of 256 until ``total``."""
    n = 0
    while n < total:
        n += len(client.sample_batch(table, batch_size=BATCH).info.key)
    return n


def fill_w1(ctx, client, table: str, n: int, seed: int, trajectory: bool) -> None:
    """Untimed: ``n`` W1 (``trajectory=False``) or W1t items through one writer."""
    t0 = time.perf_counter()
    write = write_w1t if trajectory else write_w1
    with client.trajectory_writer(num_keep_alive_refs=1) as w:
        for lo in range(0, n, 10_000):
            write(w, table, w1_steps(min(10_000, n - lo), seed + lo))
        w.flush()
    ctx.log(
        f"  filled {n:,} {'W1t' if trajectory else 'W1'} items into {table!r} in "
        f"{time.perf_counter() - t0:.1f} s"
    )


def fill_obs_sequences(client, table: str, n: int, seed: int, seq: int = SEQ) -> None:
    """W7/W8 tables: ``n`` items of the last ``seq`` steps of {obs f32[64]} (obs only)."""
    obs = np.random.default_rng(seed).standard_normal((n + seq - 1, 64), dtype=np.float32)
    with client.trajectory_writer(num_keep_alive_refs=seq) as w:
        for i in range(n + seq - 1):
            w.append({"obs": obs[i]})
            if i + 1 >= seq:
                w.create_item(table, 1.0, {"obs": w.history["obs"][-seq:]})
        w.flush()


# ---------------------------------------------------------------------------------------------
# Workloads: each takes a ctx and returns {"unit", "values", "params"[, "extra"]}
# ---------------------------------------------------------------------------------------------


def _insert(
    ctx,
    wid: str,
    steps: list[dict],
    write,
    keep: int,
    data_bytes: int,
    max_size: int = TABLE_MAX_SIZE,
) -> list:
    """One server, a fresh table per repeat; times append + create_item + the final flush().

    With ``max_size`` below the number of items, each table is first filled to ``max_size``
    (untimed, the same steps): the timed items then each evict the oldest (a full replay
    buffer, its steady state)."""
    specs = [table_spec("uniform", f"{wid.lower()}_{r}", max_size) for r in range(ctx.repeat)]
    runs = []
    with ctx.serve(specs) as dep:
        client = dep.client()
        for r, spec in enumerate(specs):
            if max_size < len(steps):
                with client.trajectory_writer(num_keep_alive_refs=keep) as w:
                    write(w, spec["name"], steps[:max_size])
            gc.collect()
            with client.trajectory_writer(num_keep_alive_refs=keep) as w:
                t0 = time.perf_counter()
                n = write(w, spec["name"], steps)
                w.flush()
                dt = time.perf_counter() - t0
            runs.append((n, dt))
            ctx.log(
                f"  {wid} run {r + 1}/{ctx.repeat}: {n / dt:,.0f} items/s, "
                f"{data_bytes / dt / 1e6:,.1f} MB/s ({dt:.2f} s)"
            )
    return runs


def run_w1(ctx, trajectory: bool = False) -> dict:
    steps = w1_steps(ctx.sizes.w1_steps, seed=1)
    wid = "W1t" if trajectory else "W1"
    runs = _insert(
        ctx, wid, steps, write_w1t if trajectory else write_w1, 1, len(steps) * W1_DATA_BYTES
    )
    return {
        "unit": "items/s",
        "values": [n / dt for n, dt in runs],
        "params": {
            "steps": len(steps),
            "num_keep_alive_refs": 1,
            "item": "history[c][-1:]" if trajectory else "history[c][-1]",
        },
    }


def run_w1_full(ctx) -> dict:
    """W1F: W1 into a full table (``max_size`` a quarter of the steps, Uniform/Fifo, filled
    first): every item evicts the oldest, as in a replay buffer once it has filled."""
    steps = w1_steps(ctx.sizes.w1_steps, seed=1)
    size = len(steps) // 4
    runs = _insert(ctx, "W1F", steps, write_w1, 1, len(steps) * W1_DATA_BYTES, max_size=size)
    return {
        "unit": "items/s",
        "values": [n / dt for n, dt in runs],
        "params": {"steps": len(steps), "max_size": size, "item": "history[c][-1]"},
    }


def run_w2(ctx) -> dict:
    steps = w2_steps(ctx.sizes.w2_steps, seed=2)
    total = len(steps) * W2_STEP_BYTES
    runs = _insert(ctx, "W2", steps, write_w2, SEQ, total)
    return {
        "unit": "items/s",
        "values": [n / dt for n, dt in runs],
        "params": {"steps": len(steps), "seq_len": SEQ, "step_bytes_total": total},
        "extra": {"W2_MBps": {"unit": "MB/s", "values": [total / dt / 1e6 for _, dt in runs]}},
    }


def run_wp(ctx) -> dict:
    """WP: W2's steps written as Acme's adders write them (:func:`write_partial`)."""
    steps = w2_steps(ctx.sizes.w2_steps, seed=2)
    total = len(steps) * (W2_STEP_BYTES + 4)  # and the float32 discount
    runs = _insert(ctx, "WP", steps, write_partial, 5, total)
    return {
        "unit": "steps/s",
        "values": [len(steps) / dt for _, dt in runs],
        "params": {"steps": len(steps), "seq_len": 5, "appends_per_step": 2},
        "extra": {"WP_items": {"unit": "items/s", "values": [n / dt for n, dt in runs]}},
    }


def run_w3(ctx) -> dict:
    steps = w3_steps(ctx.sizes.w3_steps, seed=3)
    total = len(steps) * W3_FRAME_BYTES
    runs = _insert(ctx, "W3", steps, write_w3, 1, total)
    return {
        "unit": "MB/s",
        "values": [total / dt / 1e6 for _, dt in runs],
        "params": {"steps": len(steps), "obs": "uint8[84,84,4]", "step_bytes_total": total},
        "extra": {"W3_items": {"unit": "items/s", "values": [n / dt for n, dt in runs]}},
    }


def run_w3_full(ctx) -> dict:
    """W3F: W3 into a full table (``max_size`` a quarter of the steps, Uniform/Fifo, filled
    first): every frame evicts the oldest, as in a replay buffer once it has filled. Unlike
    W3 (a table's first fill, where a server must take fresh memory for every frame it
    keeps), memory freed by the evicted frames can serve the new ones."""
    steps = w3_steps(ctx.sizes.w3_steps, seed=3)
    size = len(steps) // 4
    total = len(steps) * W3_FRAME_BYTES
    runs = _insert(ctx, "W3F", steps, write_w3, 1, total, max_size=size)
    return {
        "unit": "MB/s",
        "values": [total / dt / 1e6 for _, dt in runs],
        "params": {"steps": len(steps), "max_size": size, "obs": "uint8[84,84,4]"},
    }


class _Filled:
    """A server with one table of ``fill_items`` W1/W1t items (untimed), settled."""

    def __init__(self, ctx, wid: str, kind: str, trajectory: bool, seed: int):
        self.table = wid.lower()
        self.dep = ctx.serve([table_spec(kind, self.table)])
        try:
            self.client = self.dep.client()
            fill_w1(ctx, self.client, self.table, ctx.sizes.fill_items, seed, trajectory)
            ctx.settle()
        except BaseException:
            self.dep.stop()
            raise

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.dep.stop()


def _in_threads(n: int, fn: Callable[[int], Any]) -> tuple[float, list]:
    """Runs fn(0..n-1) in n threads started together; returns (wall time until all have
    ended, their results)."""
    barrier = threading.Barrier(n + 1)
    errors: list[str] = []
    results: list = [None] * n

    def body(k):
        try:
            barrier.wait()
            results[k] = fn(k)
        except BaseException as e:  # noqa: BLE001
            errors.append(f"thread {k}: {e!r}")
            traceback.print_exc()

    threads = [threading.Thread(target=body, args=(k,), daemon=True) for k in range(n)]
    for t in threads:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    dt = time.perf_counter() - t0
    if errors:
        raise RuntimeError("; ".join(errors))
    return dt, results


def run_w4(ctx, timesteps: bool = True, threads: int = 1) -> dict:
    """W4 family: ``client.sample(table, num_samples=256)`` on 100k items until 20k samples.

    timesteps=True: W1t items, default ``emit_timesteps=True`` (yields a 1-element list).
    timesteps=False: W1 items, ``emit_timesteps=False`` (dm-reverb 0.14 cannot split squeezed
    columns into timesteps). threads=2: two threads share the client, 10k samples each.
    """
    wid = ("W4" if timesteps else "W4f") + (f"x{threads}" if threads > 1 else "")
    kw = {} if timesteps else {"emit_timesteps": False}
    total = ctx.sizes.sample_total
    with _Filled(ctx, wid, "uniform", trajectory=timesteps, seed=4) as f:
        client, table = f.client, f.table
        sample_loop(client, table, BATCH, **kw)  # warm-up, untimed
        per = total // threads

        def one(_k: int) -> int:
            return sample_loop(client, table, per, **kw)

        values = []
        for r in range(ctx.repeat):
            if threads == 1:  # in this (the main) thread, as a user's loop runs
                t0 = time.perf_counter()
                n = sample_loop(client, table, total, **kw)
                dt = time.perf_counter() - t0
            else:
                dt, counts = _in_threads(threads, one)
                n = sum(counts)
            values.append(n / dt)
            ctx.log(f"  {wid} run {r + 1}/{ctx.repeat}: {n / dt:,.0f} items/s ({dt:.2f} s)")
        first = next(iter(client.sample(table, num_samples=1, **kw)))
        params = {
            "items": ctx.sizes.fill_items,
            "samples": total,
            "num_samples": BATCH,
            "threads": threads,
            "emit_timesteps": timesteps,
            "item": "history[c][-1:]" if timesteps else "history[c][-1]",
            "yielded": (f"list[{len(first)}]" if isinstance(first, list) else type(first).__name__),
        }
        if not timesteps:  # record what the default emit_timesteps=True does on these items
            try:
                s = next(iter(client.sample(table, num_samples=1)))
                params["emit_timesteps_true_on_squeezed"] = f"yields {type(s).__name__}"
            except Exception as e:  # noqa: BLE001 - dm-reverb 0.14: TypeError: len() of unsized
                params["emit_timesteps_true_on_squeezed"] = f"raises {type(e).__name__}: {e}"
    return {"unit": "items/s", "values": values, "params": params}


def _rates(ctx, wid: str, loop: Callable[[], int]) -> list[float]:
    """``ctx.repeat`` timed runs of ``loop`` (which returns the items it did), as items/s."""
    values = []
    for r in range(ctx.repeat):
        t0 = time.perf_counter()
        n = loop()
        dt = time.perf_counter() - t0
        values.append(n / dt)
        ctx.log(f"  {wid} run {r + 1}/{ctx.repeat}: {n / dt:,.0f} items/s ({dt:.2f} s)")
    return values


def run_w4b(ctx) -> dict:
    """W4b (Ostinato only): ``client.sample_batch(table, batch_size=256)``."""
    with _Filled(ctx, "W4b", "uniform", trajectory=ctx.sample_style == "timesteps", seed=4) as f:
        sample_batch_loop(f.client, f.table, BATCH)  # warm-up, untimed
        values = _rates(
            ctx, "W4b", lambda: sample_batch_loop(f.client, f.table, ctx.sizes.sample_total)
        )
    return {
        "unit": "items/s",
        "values": values,
        "params": {
            "items": ctx.sizes.fill_items,
            "samples": ctx.sizes.sample_total,
            "batch_size": BATCH,
            "sample_style": ctx.sample_style,
        },
    }


def _batches_per_s(ctx, wid: str, step: Callable[[], None]) -> list[float]:
    """Runs step() once untimed, then per repeat until w5_batches (and >= w5_min_s) or
    w5_max_s; returns batches/s per repeat."""
    s = ctx.sizes
    step()
    values = []
    for r in range(ctx.repeat):
        batches, t0 = 0, time.perf_counter()
        while True:
            step()
            batches += 1
            el = time.perf_counter() - t0
            if (batches >= s.w5_batches and el >= s.w5_min_s) or el >= s.w5_max_s:
                break
        values.append(batches / el)
        ctx.log(
            f"  {wid} run {r + 1}/{ctx.repeat}: {batches / el:,.1f} batches/s "
            f"({batches} batches, {el:.2f} s)"
        )
    return values


def run_w5(ctx) -> dict:
    """W5: sample 256 + ``mutate_priorities`` of their keys, Prioritized(0.6)/Fifo."""
    rng = np.random.default_rng(5)
    timesteps = ctx.sample_style == "timesteps"
    with _Filled(ctx, "W5", "prioritized", trajectory=timesteps, seed=5) as f:
        client, table = f.client, f.table

        def step():
            if timesteps:
                keys = [s[0].info.key for s in client.sample(table, num_samples=256)]
            else:
                keys = [
                    s.info.key for s in client.sample(table, num_samples=256, emit_timesteps=False)
                ]
            prios = rng.uniform(0.01, 10.0, size=len(keys))
            client.mutate_priorities(table, updates={k: float(p) for k, p in zip(keys, prios)})

        values = _batches_per_s(ctx, "W5", step)
    return {
        "unit": "batches/s",
        "values": values,
        "params": {
            "items": ctx.sizes.fill_items,
            "batch": BATCH,
            "priority_exponent": 0.6,
            "sample_style": ctx.sample_style,
        },
    }


def run_w5b(ctx) -> dict:
    """W5b (Ostinato only): ``sample_batch`` + ``update_priorities``."""
    rng = np.random.default_rng(5)
    with _Filled(
        ctx, "W5b", "prioritized", trajectory=ctx.sample_style == "timesteps", seed=5
    ) as f:
        client, table = f.client, f.table

        def step():
            keys = client.sample_batch(table, batch_size=256).info.key
            client.update_priorities(table, keys, rng.uniform(0.01, 10.0, size=len(keys)))

        values = _batches_per_s(ctx, "W5b", step)
    return {
        "unit": "batches/s",
        "values": values,
        "params": {
            "items": ctx.sizes.fill_items,
            "batch": BATCH,
            "priority_exponent": 0.6,
            "sample_style": ctx.sample_style,
        },
    }


# ---- W6: 2 writers + 1 sampler ----------------------------------------------------------------

W6_WRITERS = 2
W6_PENDING = 5  # each writer: flush(block_until_num_items=5) after every item
W6_FLUSH_TIMEOUT_MS = 500  # only so that a writer notices the end while the limiter blocks it


def _w6_once(ctx, dep, table: str, seed: int) -> tuple[float, float, float]:
    reverb = ctx.reverb
    traj = ctx.sample_style == "timesteps"
    write = write_w1t if traj else write_w1
    kw = {} if traj else {"emit_timesteps": False}
    clients = [dep.client() for _ in range(W6_WRITERS + 1)]
    pools = [w1_steps(ctx.sizes.w6_step_pool, seed=seed + k) for k in range(W6_WRITERS)]
    inserts, samples = [0] * W6_WRITERS, [0]
    stop, sampler_done = threading.Event(), threading.Event()
    failures: list[str] = []
    ready = threading.Barrier(W6_WRITERS + 2)

    def writer(k):
        try:
            w = clients[k].trajectory_writer(num_keep_alive_refs=1)
            pool, i = pools[k], 0
            ready.wait()
            while not sampler_done.is_set():
                write(w, table, [pool[i % len(pool)]])
                i += 1
                inserts[k] += 1
                while True:
                    try:
                        w.flush(block_until_num_items=W6_PENDING, timeout_ms=W6_FLUSH_TIMEOUT_MS)
                        break
                    except reverb.errors.DeadlineExceededError:
                        if sampler_done.is_set():
                            break
            w.close()
        except BaseException as e:  # noqa: BLE001
            failures.append(f"writer {k}: {e!r}")
            traceback.print_exc()
            ready.abort()

    def sampler():
        try:
            ready.wait()
            while not stop.is_set():
                for _ in clients[-1].sample(table, num_samples=BATCH, **kw):
                    samples[0] += 1
        except BaseException as e:  # noqa: BLE001
            failures.append(f"sampler: {e!r}")
            traceback.print_exc()
            ready.abort()
        finally:
            sampler_done.set()

    threads = [
        threading.Thread(target=writer, args=(k,), daemon=True) for k in range(W6_WRITERS)
    ] + [threading.Thread(target=sampler, daemon=True)]
    for t in threads:
        t.start()
    try:
        ready.wait()
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < ctx.sizes.w6_seconds and not failures:
            time.sleep(0.05)
        ins, smp, dt = sum(inserts), samples[0], time.perf_counter() - t0
    finally:
        stop.set()
    for t in threads:
        t.join(timeout=60)
    if any(t.is_alive() for t in threads):
        failures.append("W6 threads did not finish within 60 s after the run")
    if failures:
        raise RuntimeError("; ".join(failures))
    return ins / dt, smp / dt, dt


def run_w6(ctx) -> dict:
    """W6: 2 writer threads (own client each, W1 items, flush(block_until_num_items=5) after
    each) and 1 sampler thread (own client, sample 256 in a loop) on a SampleToInsertRatio(1.0,
    100, 100) table for w6_seconds; counters read at the end of the window."""
    specs = [table_spec("ratio", f"w6_{r}") for r in range(ctx.repeat)]
    ins, smp = [], []
    with ctx.serve(specs) as dep:
        for r, spec in enumerate(specs):
            gc.collect()
            i, s, dt = _w6_once(ctx, dep, spec["name"], seed=60 + 10 * r)
            ins.append(i)
            smp.append(s)
            ctx.log(
                f"  W6 run {r + 1}/{ctx.repeat}: {i:,.0f} inserts/s, {s:,.0f} samples/s "
                f"({dt:.1f} s)"
            )
    return {
        "unit": "inserts/s",
        "values": ins,
        "params": {
            "writers": W6_WRITERS,
            "samplers": 1,
            "seconds": ctx.sizes.w6_seconds,
            "flush_block_until_num_items": W6_PENDING,
            "sample_num_samples": BATCH,
            "rate_limiter": "SampleToInsertRatio(1.0, 100, 100)",
            "sample_style": ctx.sample_style,
        },
        "extra": {"W6_samples": {"unit": "samples/s", "values": smp}},
    }


# ---- memory (each run in a fresh process; see harness.run_mem) -------------------------------


def mem_child(reverb, kind: str, n: int, checkpoints: int, rss: Callable[[], int]) -> dict:
    """Inside a fresh process: resident bytes added by ``n`` stored items (after a warm-up).

    kind ``MEM``: W1 items; result = bytes per item beyond the 40 data bytes, also read after
    each 1/checkpoints of the items. kind ``MEM3``: W3 frames; result = resident bytes / data.
    """
    warm = 1_000 if kind == "MEM" else 20
    if kind == "MEM":
        steps, write, data = w1_steps(n + warm, seed=7), write_w1, W1_DATA_BYTES
    else:
        steps, write, data = w3_steps(n + warm, seed=8), write_w3, W3_FRAME_BYTES
    server = reverb.Server(tables=[build_table(reverb, table_spec("uniform", "mem", n + warm))])
    client = server.localhost_client()
    curve = []
    try:
        with client.trajectory_writer(num_keep_alive_refs=1) as w:
            write(w, "mem", steps[:warm])
            w.flush()
            before = rss()
            t0 = time.perf_counter()
            done = 0
            for c in range(1, checkpoints + 1):
                hi = n * c // checkpoints
                write(w, "mem", steps[warm + done : warm + hi])
                w.flush()
                done = hi
                if c < checkpoints:
                    curve.append((done, (rss() - before) / done - data))
            dt = time.perf_counter() - t0
            after = rss()
        size = int(client.server_info()["mem"].current_size)
    finally:
        server.stop()
    per_item = (after - before) / n
    curve.append((n, per_item - data))
    value = per_item - data if kind == "MEM" else per_item / data
    return {
        "value": value,
        "rss_before": before,
        "rss_after": after,
        "items": n,
        "table_size": size,
        "rss_per_item": per_item,
        "data_bytes_per_item": data,
        "overhead_curve": curve,
        "insert_seconds": dt,
    }


# ---------------------------------------------------------------------------------------------
# W9: vectorised environments
# ---------------------------------------------------------------------------------------------
W9_ENVS = 16
W9_KEYS = ("step_type", "obs", "action", "reward")


def w9_steps(n: int, envs: int, seed: int) -> dict[str, np.ndarray]:
    """W9's steps, time first, environment second: W1's columns plus TF-Agents' ``step_type``
    (0 FIRST, 1 MID, 2 LAST), with episodes of 50-300 steps ending at different times."""
    rng = np.random.default_rng(seed)
    step_type = np.ones((n, envs), np.int32)
    for e in range(envs):
        t = int(rng.integers(0, 50))  # staggered: environments did not start together
        step_type[: t + 1, e] = 1
        step_type[0, e] = 0
        while t < n:
            step_type[t, e] = 0
            end = t + int(rng.integers(50, 300))
            if end < n:
                step_type[end, e] = 2
            t = end + 1
    return {
        "step_type": step_type,
        "obs": rng.standard_normal((n, envs, 8), dtype=np.float32),
        "action": rng.integers(0, 16, size=(n, envs), dtype=np.int32),
        "reward": rng.standard_normal((n, envs), dtype=np.float32),
    }


def write_w9_observer(observer, cols: dict[str, np.ndarray]) -> None:
    """Ostinato: the batched observer takes each vector step (views of the columns)."""
    st, obs, action, reward = (cols[k] for k in W9_KEYS)
    for t in range(len(st)):
        observer({"step_type": st[t], "obs": obs[t], "action": action[t], "reward": reward[t]})
    observer.flush()


def write_w9_writers(writers: list, table: str, length: int, steps: list[list[dict]]) -> int:
    """dm-reverb: one writer per environment, as TF-Agents' ReverbAddTrajectoryObserver
    drives it (append; an item of the newest ``length`` steps once there are that many; at an
    episode's last step ``end_episode()``). Returns the number of items."""
    cached = [0] * len(writers)
    items = 0
    for row in steps:
        for e, (w, step) in enumerate(zip(writers, row)):
            w.append(step)
            c = cached[e] = cached[e] + 1
            if c >= length:
                h = w.history
                w.create_item(table, 1.0, {k: h[k][-length:] for k in W9_KEYS})
                items += 1
            if step["step_type"] == 2:
                w.end_episode()
                cached[e] = 0
    for w in writers:
        w.flush()
    return items


class _W9Writing:
    """W9's steps and how each side writes them: Ostinato through the batched observer, dm-reverb
    with one writer per environment (per-environment step dicts built here, untimed)."""

    def __init__(self, ctx, length: int):
        self.ctx, self.length = ctx, length
        self.cols = w9_steps(ctx.sizes.w9_steps, W9_ENVS, seed=9)
        self.ostinato = ctx.reverb.__name__.split(".")[0] == "ostinato"
        self.rows = None
        if not self.ostinato:
            self.rows = [
                [{k: self.cols[k][t, e] for k in W9_KEYS} for e in range(W9_ENVS)]
                for t in range(ctx.sizes.w9_steps)
            ]
        self.how = "BatchedTrajectoryObserver" if self.ostinato else "one trajectory_writer per env"

    def write(self, client, table: str) -> float:
        """Writes every step into ``table``; returns the seconds the writing took."""
        if self.ostinato:
            observer = self.ctx.reverb.observers.BatchedTrajectoryObserver(
                client, table, self.length, num_envs=W9_ENVS
            )
            t0 = time.perf_counter()
            write_w9_observer(observer, self.cols)
            dt = time.perf_counter() - t0
            observer.close()
            return dt
        assert self.rows is not None
        writers = [client.trajectory_writer(num_keep_alive_refs=self.length) for _ in self.rows[0]]
        t0 = time.perf_counter()
        write_w9_writers(writers, table, self.length, self.rows)
        dt = time.perf_counter() - t0
        for w in writers:
            w.close()
        return dt


def run_w9(ctx, length: int) -> dict:
    """W9: 16 vectorised environments, items of ``length`` steps (every window, stride 1)."""
    writing = _W9Writing(ctx, length)
    n_steps = ctx.sizes.w9_steps * W9_ENVS
    wid = "W9" if length == 1 else f"W9s{length}"
    specs = [table_spec("uniform", f"{wid.lower()}_{r}") for r in range(ctx.repeat)]
    runs = []
    with ctx.serve(specs) as dep:
        client = dep.client()
        for r, spec in enumerate(specs):
            gc.collect()
            dt = writing.write(client, spec["name"])
            runs.append(dt)
            ctx.log(f"  {wid} run {r + 1}/{ctx.repeat}: {n_steps / dt:,.0f} steps/s ({dt:.2f} s)")
    return {
        "unit": "steps/s",
        "values": [n_steps / dt for dt in runs],
        "params": {
            "envs": W9_ENVS,
            "vector_steps": ctx.sizes.w9_steps,
            "sequence_length": length,
            "how": writing.how,
        },
    }


def run_w9r(ctx) -> dict:
    """W9r: ``client.sample(table, 256, emit_timesteps=False)`` from a table that W9s's writing
    filled (10-step items of 16 vectorised environments): what a learner pays for the way a
    vectorised writer's items are stored (session 39 stored them in a way that made this
    2.6× slower in the table, and reverted it)."""
    writing = _W9Writing(ctx, SEQ)
    total = ctx.sizes.sample_total
    with ctx.serve([table_spec("uniform", "w9r")]) as dep:
        client = dep.client()
        writing.write(client, "w9r")
        sample_loop(client, "w9r", BATCH, emit_timesteps=False)  # warm-up, untimed
        values = _rates(ctx, "W9r", lambda: sample_loop(client, "w9r", total, emit_timesteps=False))
    return {
        "unit": "items/s",
        "values": values,
        "params": {
            "envs": W9_ENVS,
            "vector_steps": ctx.sizes.w9_steps,
            "sequence_length": SEQ,
            "samples": total,
            "num_samples": BATCH,
            "emit_timesteps": False,
            "written_by": writing.how,
        },
    }


# ---------------------------------------------------------------------------------------------
# Registry
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    title: str
    run: Callable[[Any], dict] | None  # None: run by the harness/script (MEM, SCALE)
    ostinato_only: bool = False
    baseline: str | None = None  # the Reverb workload an Ostinato-only one is compared with


WORKLOADS: dict[str, Workload] = {
    "W1": Workload("insert_small `[-1]`", run_w1),
    "W1t": Workload("insert_small `[-1:]`", lambda ctx: run_w1(ctx, trajectory=True)),
    "W1F": Workload("insert_small `[-1]` into a full table (each item evicts)", run_w1_full),
    "W2": Workload("insert_sequences, 3 columns", run_w2),
    "WP": Workload("Acme's adders: each step in 2 appends, 5-step items", run_wp),
    "W3": Workload("insert_large uint8[84,84,4]", run_w3),
    "W3F": Workload("insert_large into a full table (each frame evicts)", run_w3_full),
    "W4": Workload("sample_uniform, timesteps", run_w4),
    "W4f": Workload(
        "sample_uniform, emit_timesteps=False", lambda ctx: run_w4(ctx, timesteps=False)
    ),
    "W4x2": Workload("sample_uniform, timesteps, 2 threads", lambda ctx: run_w4(ctx, threads=2)),
    "W4fx2": Workload(
        "sample_uniform, emit_timesteps=False, 2 threads",
        lambda ctx: run_w4(ctx, timesteps=False, threads=2),
    ),
    "W4b": Workload("sample_uniform, `sample_batch`", run_w4b, True, "W4"),
    "W5": Workload("sample_prioritized + mutate_priorities", run_w5),
    "W5b": Workload(
        "sample_prioritized, `sample_batch` + `update_priorities`", run_w5b, True, "W5"
    ),
    "W6": Workload("concurrent (2 writers + 1 sampler), inserts", run_w6),
    "W9": Workload("16 vector envs, 1-step items, steps", lambda ctx: run_w9(ctx, 1)),
    "W9s": Workload("16 vector envs, 10-step items, steps", lambda ctx: run_w9(ctx, SEQ)),
    "W9r": Workload("sample 256 from W9s's items, emit_timesteps=False", run_w9r),
    "MEM": Workload("memory beyond data per W1 item", None),
    "MEM3": Workload("memory per W3 frame / frame bytes", None),
    "SCALE": Workload("W1 and W4 from 1-8 client processes", None),
}
EXTRA_TITLES = {
    "W2_MBps": "insert_sequences, step data",
    "W3_items": "insert_large, items",
    "W6_samples": "concurrent (2 writers + 1 sampler), samples",
}
