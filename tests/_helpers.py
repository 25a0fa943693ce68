"""Helpers shared by the test suites (importable from every test: ``tests/`` is on the path,
as for :mod:`server_process`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_until(
    predicate: Callable[[], Any],
    timeout: float = 10.0,
    what: str | Callable[[], str] = "the condition",
    interval: float = 0.02,
) -> Any:
    """Polls ``predicate`` until it returns a truthy value, which is returned; fails the test
    (``AssertionError``) once ``timeout`` seconds have passed.

    Use it, not a fixed ``time.sleep``, to wait for another thread or process to reach a
    state. ``what`` names the condition in the failure message; a callable is called only
    then, so the message can show the state at the deadline rather than when the wait began.
    """
    end = time.monotonic() + timeout
    while True:
        v = predicate()
        if v:
            return v
        if time.monotonic() > end:
            desc = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout}s waiting for {desc}")
        time.sleep(interval)


def uniform_table(name: str = "t", max_size: int = 100) -> Any:
    """A plain table: Uniform sampler, Fifo remover, ``MinSize(1)``."""
    import ostinato as reverb

    return reverb.Table(
        name,
        reverb.selectors.Uniform(),
        reverb.selectors.Fifo(),
        max_size,
        reverb.rate_limiters.MinSize(1),
    )


def gathered_both_ways(batch: Any, unsqueeze: bool = False) -> list[Any] | None:
    """A sampled batch's columns as batch assembly gathers them from the items' locations
    (``ostinato.core.locations``), checked equal, array by array, to what it reads chunk by
    chunk when the batch carries no locations; None when the batch cannot be assembled as
    one array per column (items of different lengths), whichever way."""
    import numpy as np

    from ostinato.core import assemble
    from ostinato.core.items import SampleBatch

    plain = SampleBatch(
        batch.keys,
        batch.probabilities,
        batch.table_sizes,
        batch.priorities,
        batch.times_sampled,
        batch.trajectories,
        batch.squeeze,
    )
    fast = assemble.gather(batch, unsqueeze)
    slow = assemble.gather(plain, unsqueeze)
    if slow is None:
        assert fast is None
        return None
    assert fast is not None
    for a, b in zip(fast, slow):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)
    return list(fast)


def check_chunk_refs(server: Any) -> None:
    """Each chunk counts as many references as the server's stored items hold (a chunk
    released too early would lose rows that items still use)."""
    import collections

    from ostinato.core import items as items_lib

    held: collections.Counter[Any] = collections.Counter()
    for t in server.tables_by_name.values():
        s = t._slots
        for slot in s.key_to_slot.values():
            held.update(items_lib.chunk_refs(s.traj[slot]))
    assert {c.key: c.refs for c in held} == {c.key: n for c, n in held.items()}
