"""How fresh a reader's batches are: the share of recent items against uniform sampling's.

A training loop writes one item, then takes one batch (TF-Agents' DQN tutorial does exactly
this). Uniform sampling at the moment the batch is taken gives the newest ``NEWEST`` of ``n``
items a share of ``min(1, NEWEST / n)``. A reader that draws items long before they are
consumed gives them less: with items drawn ``L`` writes early, about ``(NEWEST - L) / n``.
:func:`freshness` returns observed / uniform, summed over the loop.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

import ostinato as reverb

#: What "recent" means: the newest this many items.
NEWEST = 100
#: Items in the table before the loop starts (so that uniform's share is below 1 throughout).
PREFILL = 200
#: Loop iterations; the first ``WARMUP`` are not counted (what a pipeline prefetched when it
#: started was drawn from the prefilled table).
ITERATIONS = 400
WARMUP = 20
BATCH = 64
#: A reader passes when observed / uniform is within this of 1 (Reverb itself: 0.95-0.99 on
#: TF-Agents' pipeline; the bug this guards against gave 0.54-0.67).
TOLERANCE = 0.1


def uniform_table(name: str = "fresh") -> reverb.Table:
    """The DQN tutorial's table: uniform, FIFO removal, ``MinSize(1)``, a 2-step signature."""
    return reverb.Table(
        name,
        sampler=reverb.selectors.Uniform(),
        remover=reverb.selectors.Fifo(),
        max_size=100_000,
        rate_limiter=reverb.rate_limiters.MinSize(1),
        signature={"step": reverb.TensorSpec([2], np.int64)},
    )


class ItemWriter:
    """Writes 2-step items ``[i - 1, i]`` (item ``i`` is the ``i``-th written), one per call."""

    def __init__(self, client: reverb.Client, table: str):
        self.table = table
        self.writer = client.trajectory_writer(num_keep_alive_refs=2)
        self.writer.append({"step": np.int64(-1)})
        self.count = 0

    def __call__(self) -> None:
        self.writer.append({"step": np.int64(self.count)})
        self.writer.create_item(self.table, 1.0, {"step": self.writer.history["step"][-2:]})
        self.writer.flush()
        self.count += 1

    def close(self) -> None:
        self.writer.close()


def freshness(write: ItemWriter, take: Callable[[], np.ndarray]) -> float:
    """Observed / uniform share of the newest ``NEWEST`` items over the loop.

    Args:
      write: writes one item per call (``write.count`` items written so far).
      take: returns the item ids (``[batch]`` int array: each row's last step) of one batch.
    """
    for _ in range(PREFILL):
        write()
    observed = uniform = 0.0
    for i in range(ITERATIONS):
        write()
        ids = np.asarray(take()).reshape(-1)
        if i < WARMUP:
            continue
        n = write.count
        observed += float(np.mean(ids >= n - NEWEST))
        uniform += min(1.0, NEWEST / n)
    return observed / uniform
