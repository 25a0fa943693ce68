"""Client API tests, after Reverb's client_test.py, on an embedded server."""

import pickle
import threading

import numpy as np
import pytest

import ostinato as reverb
from ostinato import errors

TABLES = """
import numpy as np
import ostinato as reverb
TABLES = [
    reverb.Table("dist", reverb.selectors.Prioritized(1), reverb.selectors.Fifo(), 1000,
                 reverb.rate_limiters.MinSize(3), signature=reverb.TensorSpec([], np.int64)),
    reverb.Table.queue("nested", 10, signature={"a": reverb.TensorSpec([3], np.int64),
                                                "b": reverb.TensorSpec([3, 2, 2], np.float32)}),
    reverb.Table.queue("queue", 10),
]
"""

UNIFORM = """
import ostinato as reverb
TABLES = [reverb.Table("u", reverb.selectors.Uniform(), reverb.selectors.Fifo(), 1000,
                       reverb.rate_limiters.MinSize(1))]
"""


@pytest.fixture()
def env(serve):
    """(None, client) for the standard tables, embedded and over the network."""
    return None, serve(TABLES)


def _sample_keys(client, table, n):
    return [s[0].info.key for s in client.sample(table, n)]


def test_sample_sets_table_size(env):
    _, client = env
    for i in range(1, 11):
        client.insert(np.int64(i), {"dist": 1.0})
        if i >= 3:
            info = next(client.sample("dist", 1))[0].info
            assert info.table_size == i


def test_sample_sets_probability(env):
    _, client = env
    for i in range(1, 11):
        client.insert(np.int64(i), {"dist": 1.0})
        if i >= 3:
            info = next(client.sample("dist", 1))[0].info
            assert info.probability == pytest.approx(1.0 / i, 0.01)


def test_sample_sets_priority(env):
    _, client = env
    priorities = {}
    for i in range(1, 4):
        client.insert(np.int64(i), {"dist": float(i)})
    for s in client.sample("dist", 50, emit_timesteps=False):
        priorities[s.info.key] = s.info.priority
    assert sorted(set(priorities.values())) <= [1.0, 2.0, 3.0]
    client.mutate_priorities("dist", updates={k: 10.0 + v for k, v in priorities.items()})
    for s in client.sample("dist", 20, emit_timesteps=False):
        assert s.info.priority == 10.0 + priorities[s.info.key]


def test_insert_raises_if_priorities_empty(env):
    _, client = env
    with pytest.raises(ValueError):
        client.insert([1], {})


def test_insert_unknown_table_raises_value_error(env):
    _, client = env
    with pytest.raises(ValueError, match="nope"):
        client.insert([1], {"nope": 1.0})


def test_insert_nan_priority(env):
    _, client = env
    with pytest.raises(ValueError, match="nan"):
        client.insert(np.int64(1), {"dist": float("nan")})


def test_insert_frequencies(env):
    _, client = env
    client.insert(np.int64(1), {"dist": 1.0})
    client.insert(np.int64(2), {"dist": 0.1})
    client.insert(np.int64(3), {"dist": 0.0})
    counts = {1: 0, 2: 0, 3: 0}
    for s in client.sample("dist", 10000):
        counts[int(s[0].data[0])] += 1
    assert counts[1] / 10000 == pytest.approx(1 / 1.1, abs=0.05)
    assert counts[2] / 10000 == pytest.approx(0.1 / 1.1, abs=0.05)
    assert counts[3] == 0


@pytest.mark.parametrize("bad", [0, -1])
def test_writer_validation(env, bad):
    _, client = env
    with pytest.raises(ValueError):
        client.writer(bad)
    with pytest.raises(ValueError):
        client.writer(2, chunk_length=bad)
    with pytest.raises(ValueError):
        client.writer(2, max_in_flight_items=bad)
    with pytest.raises(ValueError):
        client.trajectory_writer(bad)


def test_writer_chunk_length_gt_max_sequence_length(env):
    _, client = env
    client.writer(2, chunk_length=2).close()
    with pytest.raises(ValueError):
        client.writer(2, chunk_length=3)


def test_legacy_writer_items_sampled_uniformly(serve):
    client = serve(UNIFORM)
    with client.writer(2) as w:
        w.append(np.int64(0))
        w.create_item("u", 1, 1.0)
        w.append(np.int64(1))
        w.create_item("u", 2, 1.0)
        w.append_sequence(np.array([2, 3], np.int64))
        w.create_item("u", 1, 1.0)
        w.create_item("u", 2, 1.0)
    counts = {}
    for s in client.sample("u", 4000, emit_timesteps=False):
        k = tuple(s.data[0].tolist())
        counts[k] = counts.get(k, 0) + 1
    assert set(counts) == {(0,), (0, 1), (3,), (2, 3)}
    for v in counts.values():
        assert v / 4000 == pytest.approx(0.25, abs=0.05)


def test_legacy_writer_errors(env):
    _, client = env
    w = client.writer(3)
    w.append(np.int64(1))
    with pytest.raises(ValueError, match="larger than number of buffered"):
        w.create_item("dist", 2, 1.0)
    with pytest.raises(ValueError):
        w.create_item("dist", 0, 1.0)
    with pytest.raises(ValueError, match="inconsistent"):
        w.append([np.int64(1), np.int64(2)])
    w.close()
    with pytest.raises(ValueError, match="already been called"):
        w.close()
    with pytest.raises(ValueError, match="closed Writer"):
        with w:
            pass


def test_write_and_sample_different_shapes_and_dtypes(env):
    _, client = env
    data = [
        np.ones((1, 1), np.int32),
        np.ones((3, 3), np.float32),
        np.ones((10, 2), np.float64),
        np.array(["a", "b"], dtype=object),
    ]
    for d in data:
        client.insert(d, {"queue": 1.0})
    for d in data:
        got = next(client.sample("queue", 1, emit_timesteps=False)).data[0]
        assert got.shape == (1, *d.shape)
        assert got.dtype == d.dtype
        expected = d if d.dtype != object else np.array([x.encode() for x in d], dtype=object)
        np.testing.assert_array_equal(got[0], expected)  # strings come back as bytes (Reverb)


def test_mutate_priorities_update(env):
    _, client = env
    for i in range(3):
        client.insert(np.int64(i), {"dist": 1.0})
    batch = client.sample_batch("dist", 2000)
    keys = sorted(set(batch.info.key.tolist()))
    assert len(keys) == 3
    client.mutate_priorities("dist", updates={keys[0]: 0.5})
    batch = client.sample_batch("dist", 20000)
    frac = np.mean(batch.info.key == keys[0])
    assert frac == pytest.approx(0.2, abs=0.03)


def test_mutate_priorities_delete(env):
    _, client = env
    for i in range(4):
        client.insert(np.int64(i), {"dist": 1.0})
    keys = sorted(set(client.sample_batch("dist", 500).info.key.tolist()))
    client.mutate_priorities("dist", deletes=[keys[0]])
    left = set(client.sample_batch("dist", 500).info.key.tolist())
    assert left == set(keys[1:])


def test_reset(env):
    _, client = env
    for i in range(3):
        client.insert(np.int64(i), {"dist": 1.0})
    keys1 = set(client.sample_batch("dist", 300).info.key.tolist())
    client.reset("dist")
    assert client.server_info()["dist"].current_size == 0
    for i in range(3):
        client.insert(np.int64(i), {"dist": 1.0})
    keys2 = set(client.sample_batch("dist", 300).info.key.tolist())
    assert len(keys1) == len(keys2) == 3 and not keys1 & keys2


def test_server_info(env):
    _, client = env
    for i in range(3):
        client.insert(np.int64(i), {"dist": 1.0})
    next(client.sample("dist", 1))
    info = client.server_info()
    assert set(info) == {"dist", "nested", "queue"}
    d = info["dist"]
    assert d.current_size == 3
    assert d.num_unique_samples == 1
    assert d.max_size == 1000
    assert d.sampler_options.prioritized.priority_exponent == 1
    assert d.remover_options.WhichOneof("distribution") == "fifo"
    assert d.signature == reverb.TensorSpec([], np.int64)
    assert d.rate_limiter_info.insert_stats.completed == 3
    assert d.rate_limiter_info.sample_stats.completed == 1
    q = info["queue"]
    assert q.current_size == 0 and q.signature is None
    assert q.sampler_options.fifo and q.remover_options.fifo
    assert q.max_times_sampled == 1


def test_sample_trajectory_with_signature(env):
    _, client = env
    with client.trajectory_writer(3) as w:
        for i in range(3):
            w.append({"a": np.int64(i), "b": np.ones((2, 2), np.float32)})
        w.create_item("nested", 1.0, {"a": w.history["a"][:], "b": w.history["b"][:]})
    s = next(client.sample("nested", 1, emit_timesteps=False, unpack_as_table_signature=True))
    assert set(s.data) == {"a", "b"}
    np.testing.assert_array_equal(s.data["a"], [0, 1, 2])
    assert s.data["a"].dtype == np.int64
    assert s.data["b"].shape == (3, 2, 2) and s.data["b"].dtype == np.float32
    assert isinstance(s.info.key, int) and isinstance(s.info.probability, float)
    assert isinstance(s.info.table_size, int) and isinstance(s.info.times_sampled, int)


def test_sample_trajectory_without_signature_is_flat(env):
    _, client = env
    with client.trajectory_writer(3) as w:
        for i in range(3):
            w.append({"a": np.int64(i), "b": np.ones((2, 2), np.float32)})
        w.create_item("queue", 1.0, {"a": w.history["a"][:], "b": w.history["b"][:]})
    s = next(client.sample("queue", 1, emit_timesteps=False, unpack_as_table_signature=True))
    assert isinstance(s.data, list) and len(s.data) == 2
    np.testing.assert_array_equal(s.data[0], [0, 1, 2])


def test_sample_emit_timesteps(env):
    _, client = env
    with client.trajectory_writer(3) as w:
        for i in range(3):
            w.append({"a": np.int64(i), "b": np.full((2, 2), i, np.float32)})
        w.create_item("nested", 1.0, {"a": w.history["a"][:], "b": w.history["b"][:]})
    steps = next(client.sample("nested", 1, unpack_as_table_signature=True))
    assert len(steps) == 3
    for i, s in enumerate(steps):
        assert s.data["a"] == i and s.data["b"].shape == (2, 2)
        assert s.info == steps[0].info


def test_sample_trajectory_written_with_insert(env):
    _, client = env
    client.insert(np.ones((3, 3), np.int32), {"queue": 1.0})
    s = next(client.sample("queue", 1, emit_timesteps=False))
    assert s.data[0].shape == (1, 3, 3)


def test_sample_trajectory_written_with_legacy_writer(env):
    _, client = env
    with client.writer(3) as w:
        for i in range(3):
            w.append([np.int64(i), np.ones((2, 2), np.float64)])
        w.create_item("queue", 3, 1.0)
    s = next(client.sample("queue", 1, emit_timesteps=False))
    np.testing.assert_array_equal(s.data[0], [0, 1, 2])
    assert s.data[1].shape == (3, 2, 2) and s.data[1].dtype == np.float64


def test_sample_unknown_table(env):
    _, client = env
    with pytest.raises(RuntimeError, match="nope"):
        next(client.sample("nope", 1))


def test_sample_num_samples_zero(env):
    _, client = env
    gen = client.sample("queue", 0)
    with pytest.raises(ValueError, match=r"max_samples \(0\) must be -1 or >= 1"):
        next(gen)


def test_sample_timeout(env):
    _, client = env
    with pytest.raises(errors.RateLimiterTimeout, match="queue"):
        next(client.sample("queue", 1, timeout=0.05))


def test_server_info_timeout_unknown_address(mode):
    client = reverb.Client("localhost:1", unavailable_timeout=0.3)
    with pytest.raises(reverb.DeadlineExceededError):
        client.server_info(timeout=1)
    with pytest.raises(errors.UnavailableError, match="localhost:1"):
        client.reset("x")


def test_pickle(env):
    _, client = env
    clone = pickle.loads(pickle.dumps(client))
    assert clone.server_address == client.server_address
    clone.insert(np.int64(1), {"dist": 1.0})
    assert client.server_info()["dist"].current_size == 1


def test_sample_batch(env):
    _, client = env
    for i in range(20):
        client.insert(np.int64(i), {"dist": 1.0})
    b = client.sample_batch("dist", 64)
    assert b.data.shape == (64, 1) and b.data.dtype == np.int64
    assert b.info.key.dtype == np.uint64 and b.info.key.shape == (64,)
    assert b.info.probability.dtype == np.float64
    assert (b.info.table_size == 20).all()
    assert b.info.times_sampled.dtype == np.int32


def test_sample_batch_times_sampled_counts_duplicates(serve):
    client = serve("""
import ostinato as reverb
TABLES = [reverb.Table("f", reverb.selectors.Fifo(), reverb.selectors.Fifo(), 10,
                       reverb.rate_limiters.MinSize(1))]
""")
    client.insert(np.int64(1), {"f": 1.0})
    b = client.sample_batch("f", 5)
    assert b.info.times_sampled.tolist() == [1, 2, 3, 4, 5]
    assert client.server_info()["f"].num_unique_samples == 1


def test_update_priorities_and_delete_arrays(env):
    _, client = env
    for i in range(5):
        client.insert(np.int64(i), {"dist": 1.0})
    keys = np.array(sorted(set(client.sample_batch("dist", 500).info.key.tolist())), np.uint64)
    assert client.update_priorities("dist", keys, np.arange(1, 6, dtype=np.float64)) == 5
    assert client.update_priorities("dist", np.array([123], np.uint64), [1.0]) == 0
    assert client.delete("dist", keys[:2]) == 2
    assert client.server_info()["dist"].current_size == 3


def test_multithreaded_writers(serve):
    client = serve(UNIFORM.replace('"u"', '"t"'))

    def work(n):
        for _ in range(n):
            with client.writer(1) as w:
                w.append(np.zeros(3))
                w.create_item("t", 1, 1.0)

    threads = [threading.Thread(target=work, args=(100,)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert client.server_info()["t"].current_size == 800


def test_signature_mismatch_names_table_and_column(env):
    _, client = env
    with client.trajectory_writer(2) as w:
        w.append({"a": np.zeros(3, np.int64), "b": np.zeros((2, 2), np.float64)})
        with pytest.raises(
            ValueError,
            match=r"'nested'.*column 0 \(a\) to be a int64 \[3\] tensor but got a int64 \[1,3\]",
        ):
            w.create_item("nested", 1.0, {"a": w.history["a"][-1:], "b": w.history["b"][-1:]})
        with pytest.raises(
            ValueError,
            match=r"'nested'.*column 1 \(b\) to be a float \[3,2,2\] tensor but got a double",
        ):
            w.create_item("nested", 1.0, {"a": w.history["a"][-1], "b": w.history["b"][-1]})
        with pytest.raises(ValueError, match="nope"):
            w.create_item("nope", 1.0, {"a": w.history["a"][-1:]})
