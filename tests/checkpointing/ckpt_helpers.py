"""Shared helpers for checkpoint tests (imported by module name; tests/ is on sys.path)."""

from __future__ import annotations

import numpy as np

import ostinato as reverb
from ostinato import checkpointers
from ostinato.core import items as items_lib

SELECTORS = {
    "fifo": lambda: reverb.selectors.Fifo(),
    "lifo": lambda: reverb.selectors.Lifo(),
    "uniform": lambda: reverb.selectors.Uniform(),
    "prioritized": lambda: reverb.selectors.Prioritized(0.8),
    "minheap": lambda: reverb.selectors.MinHeap(),
    "maxheap": lambda: reverb.selectors.MaxHeap(),
}
LIMITERS = {
    "minsize": lambda: reverb.rate_limiters.MinSize(1),
    "ratio": lambda: reverb.rate_limiters.SampleToInsertRatio(2.0, 3, 100.0),
    "queue": lambda: reverb.rate_limiters.Queue(200),
    "stack": lambda: reverb.rate_limiters.Stack(200),
}


def fill(client, table: str, n: int, seed: int = 0, *, max_items: int | None = None) -> None:
    rng = np.random.default_rng(seed)
    with client.trajectory_writer(num_keep_alive_refs=3) as w:
        for i in range(n):
            w.append({"obs": rng.standard_normal(4).astype(np.float32), "step": np.int64(i)})
            if i >= 2:
                w.create_item(
                    table,
                    float(1 + (i * 7) % 5),
                    {"obs": w.history["obs"][-3:], "step": w.history["step"][-3:]},
                )
        w.flush()


def state(table) -> list[tuple]:
    """Everything observable about a table's items, in insertion order."""
    out = []
    for k in table.keys().tolist():
        it = table.get(k)
        cols = []
        for col in items_lib.columns(it["trajectory"]):
            cols.append(np.concatenate([c.data[o : o + n] for c, o, n in col]).tolist())
        out.append((k, it["priority"], it["times_sampled"], it["squeeze"], cols))
    return out


def counters(table) -> tuple:
    i = table.info
    r = i.rate_limiter_info
    return (
        i.current_size,
        i.num_episodes,
        i.num_deleted_episodes,
        i.num_unique_samples,
        r.insert_stats.completed,
        r.sample_stats.completed,
        r.delete_count,
    )


def ckpt(path, **kw) -> checkpointers.DefaultCheckpointer:
    return checkpointers.DefaultCheckpointer(str(path), **kw)
