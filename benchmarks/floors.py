#!/usr/bin/env python3
"""How close the embedded workloads are to what pure Python cannot avoid.

For each workload this measures, in one process, µs per item of

* **Ostinato**: the workload itself (``workloads.py``'s user code on an embedded server);
* **floor**: the interpreter work any pure-Python implementation of the same API must do for
  that user code -- the user's own loop (run against a do-nothing writer or client), plus the
  least the implementation has to touch per item:

  - inserts (W1, W1t, W2): one store of each step value into a preallocated numpy buffer, and
    one record per item put in a dict (its key) -- nothing else (no history objects, no
    validation, no selectors, no rate limiter);
  - ``client.sample`` (W4, W4f): for each item the objects the API hands back (a
    ``SampleInfo``, a ``ReplaySample``, a data list with one view per column, and the list of
    steps for W4), made from arrays already stacked; W5 adds the user's dict of new
    priorities.

The ratio Ostinato / floor says how much of the time is Ostinato's own work. Each round times
Ostinato and then the floor, back to back, so that both see the same machine speed; the
table gives the medians of the rounds and the median of the per-round ratios (on a shared
machine whose speed drifts, the ratio of two medians taken minutes apart is not reliable)::

    python benchmarks/floors.py --repeat 5
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import workloads as wl  # noqa: E402

import ostinato as reverb  # noqa: E402
from ostinato.replay_sample import ReplaySample, SampleInfo  # noqa: E402

N = 20_000
BATCH = 256


class _History:
    def __getitem__(self, key):
        return self


class _NullWriter:
    """A writer that does nothing: what remains is the user's loop."""

    def __init__(self) -> None:
        self._h = {"obs": _History(), "action": _History(), "reward": _History()}

    @property
    def history(self):
        return self._h

    def append(self, step):
        pass

    def create_item(self, table, priority, trajectory):
        pass


def _least_insert(steps: list[dict], keep: int, items_per_step: float) -> None:
    """One numpy store per step value and one dict entry per item."""
    bufs = {
        k: np.empty((len(steps), *np.shape(v)), np.asarray(v).dtype) for k, v in steps[0].items()
    }
    table: dict[int, tuple] = {}
    for i, step in enumerate(steps):
        for k, v in step.items():
            bufs[k][i] = v
        if items_per_step and i + 1 >= keep:
            table[i] = (i, keep)


def _once(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _rounds(ours, floor_parts: list, repeat: int, n: int) -> tuple[float, float, float]:
    """µs per item of Ostinato and of the floor (medians of ``repeat`` rounds, each timing
    ``ours`` and then every function of ``floor_parts``), and the median per-round ratio."""
    t_ours, t_floor = [], []
    for _ in range(repeat):
        t_ours.append(_once(ours))
        t_floor.append(sum(_once(f) for f in floor_parts))
    ratio = statistics.median(a / b for a, b in zip(t_ours, t_floor))
    return statistics.median(t_ours) / n * 1e6, statistics.median(t_floor) / n * 1e6, ratio


def _server():
    table = reverb.Table(
        "t",
        reverb.selectors.Uniform(),
        reverb.selectors.Fifo(),
        2_000_000,
        reverb.rate_limiters.MinSize(1),
    )
    server = reverb.Server([table])
    return server, server.localhost_client()


def insert_rows(repeat: int) -> list[tuple[str, float, float, float]]:
    rows = []
    for wid, steps, write, keep, items in (
        ("W1", wl.w1_steps(N, 0), wl.write_w1, 1, N),
        ("W1t", wl.w1_steps(N, 0), wl.write_w1t, 1, N),
        ("W2", wl.w2_steps(N, 0), wl.write_w2, wl.SEQ, N - wl.SEQ + 1),
    ):
        server, client = _server()
        try:

            def ours(steps=steps, write=write, keep=keep, client=client):
                with client.trajectory_writer(keep) as w:
                    write(w, "t", steps)
                client.reset("t")

            ours()

            def user(steps=steps, write=write):
                write(_NullWriter(), "t", steps)

            def least(steps=steps, keep=keep):
                _least_insert(steps, keep, 1)

            rows.append((wid, *_rounds(ours, [user, least], repeat, items)))
        finally:
            server.stop()
    return rows


def sample_rows(repeat: int) -> list[tuple[str, float, float, float]]:
    server, client = _server()
    calls = 80
    # The floor: the objects handed back, from stacked columns (obs (n, 8), action, reward).
    obs = np.zeros((BATCH, 8), np.float32)
    act = np.zeros(BATCH, np.int32)
    rew = np.zeros(BATCH, np.float32)
    keys = list(range(BATCH))
    frng = np.random.default_rng(0)

    def objects(steps: bool, user_dict: bool = False):
        for _ in range(calls):
            out = []
            for i in range(BATCH):
                s = ReplaySample(
                    SampleInfo(keys[i], 0.5, 100, 1.0, 1), [obs[i], act[i, ...], rew[i, ...]]
                )
                out.append([s] if steps else s)
            for _s in out:  # the user's loop
                pass
            if user_dict:
                ks = [s[0].info.key for s in out]
                prios = frng.uniform(0.01, 10, BATCH)
                {k: float(p) for k, p in zip(ks, prios)}

    n = calls * BATCH
    try:
        with client.trajectory_writer(1) as w:
            wl.write_w1t(w, "t", wl.w1_steps(100_000, 0))

        def w4():
            for _ in range(calls):
                for _s in client.sample("t", BATCH):
                    pass

        def w4f():
            for _ in range(calls):
                for _s in client.sample("t", BATCH, emit_timesteps=False):
                    pass

        rng = np.random.default_rng(0)

        def w5():
            for _ in range(calls):
                keys = [s[0].info.key for s in client.sample("t", num_samples=BATCH)]
                prios = rng.uniform(0.01, 10, BATCH)
                client.mutate_priorities("t", updates={k: float(p) for k, p in zip(keys, prios)})

        w4()
        return [
            ("W4", *_rounds(w4, [lambda: objects(True)], repeat, n)),
            ("W4f", *_rounds(w4f, [lambda: objects(False)], repeat, n)),
            ("W5", *_rounds(w5, [lambda: objects(True, True)], repeat, n)),
        ]
    finally:
        server.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    rows = insert_rows(args.repeat) + sample_rows(args.repeat)
    print(
        "| workload | Ostinato, µs per item | pure-Python floor, µs per item "
        "| Ostinato / floor (median of the rounds' ratios) |"
    )
    print("|---|---:|---:|---:|")
    for wid, ours, floor, ratio in rows:
        print(f"| {wid} | {ours:.2f} | {floor:.2f} | {ratio:.1f}× |")


if __name__ == "__main__":
    main()
