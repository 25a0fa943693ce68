"""Shared setup and timing for the device-buffer benchmarks (flashbax README setup).

Every implementation is timed in its own process (``run.py`` starts them) so that the
500,000-row buffers (6 GiB each with float32 observations) never coexist.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

CAPACITY = 500_000
SAMPLE_BATCH = 256
ADD_BATCH = 128
OBS_SHAPE = (32, 32, 3)
ALPHA = 0.6
BETA = 0.4
FILL_CHUNK = 10_000

#: Benchmark lines, in table order: key -> description.
LINES = {
    "sample": "uniform sample, batch 256",
    "insert1": "insert 1 transition",
    "insert128": "insert batch of 128",
    "per_step": "prioritized sample 256 + update 256",
    "per_insert1": "prioritized insert 1 transition",
    "per_insert128": "prioritized insert batch of 128",
}


def parse_args(description: str) -> argparse.Namespace:
    """Common command line: ``--obs-dtype``, ``--repeats``, ``--lines``, ``--device``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--obs-dtype", choices=["uint8", "float32"], default="uint8")
    parser.add_argument("--repeats", type=int, default=7, help="timed repeats; median is kept")
    parser.add_argument("--lines", default=",".join(LINES), help="comma-separated line keys")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--capacity", type=int, default=CAPACITY)
    args = parser.parse_args()
    args.lines = [k for k in args.lines.split(",") if k]
    for key in args.lines:
        if key not in LINES:
            parser.error(f"unknown line {key!r}; choose from {list(LINES)}")
    return args


def host_data(rows: int, obs_dtype: str, seed: int = 0) -> dict[str, np.ndarray]:
    """Random transitions as numpy arrays: obs (rows, 32, 32, 3), action int32, reward f32."""
    rng = np.random.default_rng(seed)
    if obs_dtype == "uint8":
        obs = rng.integers(0, 256, size=(rows, *OBS_SHAPE), dtype=np.uint8)
    else:
        obs = rng.random(size=(rows, *OBS_SHAPE), dtype=np.float32)
    action = rng.integers(0, 18, size=(rows,), dtype=np.int32)
    reward = rng.random(size=(rows,), dtype=np.float32)
    return {"obs": obs, "action": action, "reward": reward}


def priorities(rows: int = SAMPLE_BATCH, seed: int = 1) -> np.ndarray:
    """Positive float32 priorities for the update half of a prioritized step."""
    return (np.random.default_rng(seed).random(rows, dtype=np.float32) + 0.01).astype(np.float32)


def time_per_call(
    fn: Callable[[], Any], calls: int, repeats: int, sync: Callable[[Any], Any] | None = None
) -> float:
    """Median over ``repeats`` of the mean wall time of ``calls`` calls, in milliseconds.

    ``sync`` is applied to every call's result (e.g. ``block_until_ready`` for jax, or a CUDA
    synchronise), so asynchronous dispatch is not mistaken for work done.
    """
    for _ in range(max(3, calls // 10)):  # warm-up, compilation
        out = fn()
        if sync is not None:
            sync(out)
    results = []
    for _ in range(repeats):
        gc.collect()
        start = time.perf_counter()
        for _ in range(calls):
            out = fn()
            if sync is not None:
                sync(out)
        results.append((time.perf_counter() - start) / calls * 1e3)
    return statistics.median(results)


CALLS = {
    "sample": 300,
    "insert1": 2000,
    "insert128": 500,
    "per_step": 300,
    "per_insert1": 2000,
    "per_insert128": 500,
}


def report(impl: str, args: argparse.Namespace, results: dict[str, float], **extra: Any) -> None:
    """Prints one JSON line per benchmark line on stdout (``run.py`` collects them)."""
    for key, ms in results.items():
        record = {
            "impl": impl,
            "line": key,
            "obs_dtype": args.obs_dtype,
            "device": args.device,
            "ms": ms,
            "repeats": args.repeats,
            "calls": CALLS[key],
            **extra,
        }
        print(json.dumps(record), flush=True)
    sys.stdout.flush()
