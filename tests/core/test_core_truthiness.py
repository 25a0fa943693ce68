"""Configuration objects are truthy whatever they hold (issue: selectors were falsy).

Wrappers around Reverb write ``sampler or reverb.selectors.Fifo()``; a falsy selector silently
turned a Uniform or Prioritized table into a FIFO one.
"""

import numpy as np
import pytest

import ostinato as reverb

SELECTORS = [
    reverb.selectors.Uniform,
    lambda: reverb.selectors.Prioritized(0.8),
    reverb.selectors.Fifo,
    reverb.selectors.Lifo,
    reverb.selectors.MinHeap,
    reverb.selectors.MaxHeap,
]

LIMITERS = [
    lambda: reverb.rate_limiters.MinSize(1),
    lambda: reverb.rate_limiters.SampleToInsertRatio(1.0, 1, 2.0),
    lambda: reverb.rate_limiters.Queue(5),
    lambda: reverb.rate_limiters.Stack(5),
]


@pytest.mark.parametrize("make", SELECTORS)
def test_selectors_are_truthy_empty_and_full(make, make_server):
    sel = make()
    assert bool(sel) is True
    table = reverb.Table(
        "t",
        sampler=sel,
        remover=reverb.selectors.Fifo(),
        max_size=10,
        rate_limiter=reverb.rate_limiters.MinSize(1),
    )
    assert bool(table) is True  # an empty table is truthy too
    server = make_server(table)
    client = server.localhost_client()
    client.insert([np.zeros(2)], priorities={"t": 1.0})
    assert bool(sel) is True
    assert bool(table) is True and table.size == 1


@pytest.mark.parametrize("make", LIMITERS)
def test_rate_limiters_are_truthy(make):
    assert bool(make()) is True


def _table(sampler=None, remover=None):
    """A wrapper in the style users write around Reverb."""
    return reverb.Table(
        "t",
        sampler=sampler or reverb.selectors.Fifo(),
        remover=remover or reverb.selectors.Fifo(),
        max_size=100,
        rate_limiter=reverb.rate_limiters.MinSize(1),
    )


def test_default_idiom_keeps_a_prioritized_sampler(make_server):
    server = make_server(_table(sampler=reverb.selectors.Prioritized(1.0)))
    client = server.localhost_client()
    with pytest.raises(ValueError):
        client.insert([np.zeros(1)], priorities={"t": -1.0})
    client.insert([np.zeros(1)], priorities={"t": 0.0})
    client.insert([np.ones(1)], priorities={"t": 1.0})
    # Priority 0 is never sampled by a Prioritized sampler (a FIFO one would return it first).
    for _ in range(20):
        [s] = next(client.sample("t", num_samples=1))
        assert s.data[0][0] == 1.0


def test_default_idiom_keeps_a_uniform_sampler(make_server):
    server = make_server(_table(sampler=reverb.selectors.Uniform()))
    client = server.localhost_client()
    for i in range(10):
        client.insert([np.full(1, i)], priorities={"t": 1.0})
    seen = {int(next(client.sample("t", num_samples=1))[0].data[0][0]) for _ in range(200)}
    assert len(seen) > 1  # FIFO would give item 0 every time
