"""Statistical tests of the samplers, through the table and the client.

Seeds are fixed where the code lets us (selectors take a generator; the table's generator is
pinned), and every tolerance is wide enough that a correct sampler fails with probability
below about 1e-6 even without the seed, yet narrow enough that a sampler using the wrong
distribution (uniform instead of prioritized, the wrong exponent, stale priorities, a
zero-priority item that gets picked) fails.
"""

from __future__ import annotations

import collections
import contextlib
import math

import numpy as np
import pytest

import ostinato as reverb
from ostinato.core import Prioritized, Uniform

Z = 5.0  # standard deviations allowed for a frequency; two-sided p ~ 6e-7


def _seed(table, seed: int) -> None:
    if hasattr(table, "_rng"):
        table._rng = np.random.default_rng(seed)


@contextlib.contextmanager
def _serve(*tables):
    server = reverb.Server(list(tables))
    try:
        yield server, server.localhost_client()
    finally:
        server.stop()


def _chi2_critical(df: int, z: float = Z) -> float:
    """Upper quantile of chi-square(df) at the normal quantile z (Wilson-Hilferty)."""
    a = 2.0 / (9.0 * df)
    return df * (1.0 - a + z * math.sqrt(a)) ** 3


def _assert_matches(counts: dict, expected: dict, n: int) -> None:
    """Counts follow the expected probabilities: chi-square test plus a per-cell bound."""
    assert sum(counts.values()) == n
    extra = set(counts) - {k for k, p in expected.items() if p > 0}
    assert not extra, f"sampled items with probability 0: {extra}"
    chi2 = 0.0
    df = -1
    for k, p in expected.items():
        if p == 0:
            continue
        df += 1
        c = counts.get(k, 0)
        chi2 += (c - n * p) ** 2 / (n * p)
        sd = math.sqrt(p * (1 - p) / n)
        assert abs(c / n - p) <= Z * sd + 1e-12, (
            f"item {k}: frequency {c / n:.4f}, expected {p:.4f}"
        )
    if df > 0:
        assert chi2 <= _chi2_critical(df), f"chi-square {chi2:.1f} over {df} degrees of freedom"


def _sample_counts(client, table: str, total: int, batch: int = 10_000):
    """Samples ``total`` items in batches; returns (counts by column value, SampleInfo list)."""
    counts: collections.Counter = collections.Counter()
    infos = []
    left = total
    while left:
        s = client.sample_batch(table, min(batch, left), timeout=5)
        values = np.asarray(s.data[0]).reshape(len(s.info.key), -1)[:, 0]
        counts.update(values.tolist())
        infos.append(s.info)
        left -= len(s.info.key)
    return counts, infos


def _weights(priorities, exponent):
    w = [0.0 if p == 0 else p**exponent for p in priorities]
    total = sum(w)
    return [x / total for x in w]


# -- selectors alone, fully deterministic -------------------------------------------------------


@pytest.mark.parametrize("exponent", [0.0, 0.6, 1.0, 2.0])
def test_prioritized_selector_distribution(exponent):
    rng = np.random.default_rng(11)
    prios = [0.0, 0.25, 1.0, 2.0, 4.0, 8.0, 3.0]
    sel = Prioritized(exponent)
    for slot, p in enumerate(prios):
        sel.insert(slot, p)
    n = 200_000
    slots, probs = sel.sample_many(n, rng)
    expected = dict(enumerate(_weights(prios, exponent)))
    _assert_matches(collections.Counter(slots.tolist()), expected, n)
    assert np.allclose(probs, [expected[s] for s in slots.tolist()], rtol=1e-12)
    # The scalar path draws from the same distribution.
    m = 20_000
    scalar = collections.Counter(sel.sample(rng)[0] for _ in range(m))
    _assert_matches(scalar, expected, m)


def test_uniform_selector_distribution_ignores_priorities():
    rng = np.random.default_rng(12)
    sel = Uniform()
    for slot in range(30):
        sel.insert(slot * 3, float(slot))  # priorities 0..29 must not matter
    sel.delete(0)
    sel.delete(30)
    n = 300_000
    slots, probs = sel.sample_many(n, rng)
    live = [s * 3 for s in range(30) if s * 3 not in (0, 30)]
    _assert_matches(collections.Counter(slots.tolist()), {s: 1 / 28 for s in live}, n)
    assert np.all(probs == 1 / 28)


# -- through a server ------------------------------------------------------------------------------


def test_uniform_table_is_uniform():
    n_items = 20
    table = reverb.Table(
        "u",
        reverb.selectors.Uniform(),
        reverb.selectors.Fifo(),
        1000,
        reverb.rate_limiters.MinSize(1),
    )
    _seed(table, 1)
    with _serve(table) as (_, client):
        for i in range(n_items):
            client.insert(np.int64(i), {"u": float(i)})  # wildly different priorities, incl. 0
        n = 100_000
        counts, infos = _sample_counts(client, "u", n)
        _assert_matches(counts, {i: 1 / n_items for i in range(n_items)}, n)
        for info in infos:
            assert np.all(info.probability == pytest.approx(1 / n_items))
            assert np.all(info.table_size == n_items)


@pytest.mark.parametrize("exponent", [0.6, 1.0])
def test_prioritized_table_follows_priorities_and_updates(exponent):
    prios = [1.0, 2.0, 4.0, 8.0, 0.0, 0.5]
    table = reverb.Table(
        "p",
        reverb.selectors.Prioritized(exponent),
        reverb.selectors.Fifo(),
        1000,
        reverb.rate_limiters.MinSize(1),
    )
    _seed(table, 2)
    with _serve(table) as (_, client):
        for i, p in enumerate(prios):
            client.insert(np.int64(i), {"p": p})
        expected = dict(enumerate(_weights(prios, exponent)))
        n = 60_000
        counts, infos = _sample_counts(client, "p", n)
        assert counts[4] == 0  # priority 0: never
        _assert_matches(counts, expected, n)
        keys = np.concatenate([info.key for info in infos])
        reported_prio = np.concatenate([info.priority for info in infos])
        reported_prob = np.concatenate([info.probability for info in infos])
        index = np.array([prios.index(p) for p in reported_prio.tolist()])
        assert np.allclose(
            reported_prob,
            np.array([expected[i] for i in range(len(prios))])[index],
            rtol=1e-9,
            atol=0,
        )
        key_of = dict(zip(index.tolist(), keys.tolist()))
        assert len(key_of) == 5
        assert len(set(zip(index.tolist(), keys.tolist()))) == 5  # one key per item

        # New priorities: reversed order, and the zero-priority item stays unreachable.
        new = {0: 8.0, 1: 4.0, 2: 0.0, 3: 1.0, 5: 2.0}
        keys = [key_of[i] for i in new]
        assert client.update_priorities("p", keys, list(new.values())) == 5
        now = [new.get(i, 0.0) for i in range(len(prios))]
        expected = dict(enumerate(_weights(now, exponent)))
        counts, infos = _sample_counts(client, "p", n)
        assert counts[2] == 0 and counts[4] == 0
        _assert_matches(counts, expected, n)
        index_of_key = {k: i for i, k in key_of.items()}
        keys = np.concatenate([info.key for info in infos])
        index = np.array([index_of_key[k] for k in keys.tolist()])
        assert np.array_equal(
            np.concatenate([info.priority for info in infos]), np.array(now)[index]
        )
        assert np.allclose(
            np.concatenate([info.probability for info in infos]),
            np.array([expected[i] for i in range(len(prios))])[index],
            rtol=1e-9,
            atol=0,
        )


def test_prioritized_table_all_zero_priorities_is_uniform():
    table = reverb.Table(
        "z",
        reverb.selectors.Prioritized(0.8),
        reverb.selectors.Fifo(),
        100,
        reverb.rate_limiters.MinSize(1),
    )
    _seed(table, 3)
    with _serve(table) as (_, client):
        for i in range(4):
            client.insert(np.int64(i), {"z": 0.0})
        n = 20_000
        counts, infos = _sample_counts(client, "z", n)
        _assert_matches(counts, {i: 0.25 for i in range(4)}, n)
        assert all(np.allclose(info.probability, 0.25) for info in infos)


def test_prioritized_exponent_zero_ignores_magnitude_but_not_zero():
    table = reverb.Table(
        "e0",
        reverb.selectors.Prioritized(0.0),
        reverb.selectors.Fifo(),
        100,
        reverb.rate_limiters.MinSize(1),
    )
    _seed(table, 4)
    with _serve(table) as (_, client):
        for i, p in enumerate([1e-6, 1.0, 1e6, 0.0]):
            client.insert(np.int64(i), {"e0": p})
        n = 30_000
        counts, _ = _sample_counts(client, "e0", n)
        _assert_matches(counts, {0: 1 / 3, 1: 1 / 3, 2: 1 / 3, 3: 0.0}, n)


# -- Reverb's client_test cases --------------------------------------------------------------------


def _client_test_table():
    return reverb.Table(
        "table",
        reverb.selectors.Prioritized(1),
        reverb.selectors.Fifo(),
        1000,
        reverb.rate_limiters.MinSize(3),
        signature=reverb.TensorSpec((), np.int64),
    )


def test_client_insert_frequencies():
    table = _client_test_table()
    _seed(table, 5)
    with _serve(table) as (_, client):
        client.insert(1, {"table": 1.0})  # sampled 90% of the time
        client.insert(2, {"table": 0.1})  # 10%
        client.insert(3, {"table": 0.0})  # never
        freqs: collections.Counter = collections.Counter()
        for sample in client.sample("table", 10_000):
            freqs[int(sample[0].data[0])] += 1
        assert sum(freqs.values()) == 10_000
        assert freqs[1] / 10_000 == pytest.approx(0.9, abs=0.05)
        assert freqs[2] / 10_000 == pytest.approx(0.1, abs=0.05)
        assert freqs[3] == 0


def test_client_mutate_priorities_update():
    table = _client_test_table()
    _seed(table, 6)
    with _serve(table) as (_, client):
        for _ in range(3):
            client.insert(0, {"table": 1.0})
        s = client.sample_batch("table", 10_000)
        before = collections.Counter(s.info.key.tolist())
        assert len(before) == 3
        for v in before.values():
            assert v / 10_000 == pytest.approx(1 / 3, abs=0.05)
        key = next(iter(before))
        client.mutate_priorities("table", updates={key: 0.5})
        s = client.sample_batch("table", 10_000)
        after = collections.Counter(s.info.key.tolist())
        assert len(after) == 3
        assert after[key] / 10_000 == pytest.approx(0.2, abs=0.05)
        for k, v in after.items():
            if k != key:
                assert v / 10_000 == pytest.approx(0.4, abs=0.05)


def test_client_sample_sets_probability_and_table_size():
    table = _client_test_table()
    with _serve(table) as (_, client):
        for i in range(1, 9):
            client.insert(i, {"table": 1.0})
            if i >= 3:
                info = next(client.sample("table", 1))[0].info
                assert info.table_size == i
                assert info.probability == pytest.approx(1 / i)
                assert info.priority == 1.0


def test_distribution_recovers_after_transient_huge_priority():
    table = reverb.Table(
        "p",
        reverb.selectors.Prioritized(1.0),
        reverb.selectors.Fifo(),
        100,
        reverb.rate_limiters.MinSize(1),
    )
    _seed(table, 7)
    with _serve(table) as (_, client):
        for i, p in enumerate([1.0, 1.0, 10.0]):
            client.insert(np.int64(i), {"p": p})
        key0 = int(table.keys()[0])
        client.update_priorities("p", [key0], [1e17])
        client.update_priorities("p", [key0], [1.0])
        n = 20_000
        counts, infos = _sample_counts(client, "p", n)
        _assert_matches(counts, {0: 1 / 12, 1: 1 / 12, 2: 10 / 12}, n)
        probs = np.concatenate([info.probability for info in infos])
        assert np.all(probs <= 1.0)
