"""Client-side sharding over several servers."""

import numpy as np
import pytest

import ostinato as reverb


def _table(name="t"):
    return reverb.Table(
        name,
        reverb.selectors.Uniform(),
        reverb.selectors.Fifo(),
        1000,
        reverb.rate_limiters.MinSize(1),
    )


@pytest.mark.parametrize("in_process", [None, False])
def test_sharded_client_spreads_and_merges(make_server, in_process):
    servers = [make_server(_table()) for _ in range(3)]
    addresses = [f"localhost:{s.port}" for s in servers]
    client = reverb.Client(addresses, in_process=in_process)
    assert reverb.Client(",".join(addresses)).server_address == ",".join(addresses)
    for i in range(30):
        client.insert(np.int64(i), {"t": 1.0})
    for _ in range(3):  # writers are spread over the shards too
        with client.trajectory_writer(1) as w:
            for i in range(10):
                w.append({"x": np.int64(i)})
                w.create_item("t", 1.0, {"x": w.history["x"][-1:]})
    sizes = [s.tables_by_name["t"].size for s in servers]
    assert sum(sizes) == 60 and all(n > 0 for n in sizes), sizes
    info = client.server_info()["t"]
    assert info.current_size == 60
    assert info.rate_limiter_info.insert_stats.completed == 60


def test_sharded_priority_updates_reach_the_right_shard(make_server):
    servers = [
        make_server(
            reverb.Table(
                "p",
                reverb.selectors.Prioritized(1.0),
                reverb.selectors.Fifo(),
                100,
                reverb.rate_limiters.MinSize(1),
            )
        )
        for _ in range(2)
    ]
    client = reverb.Client([f"localhost:{s.port}" for s in servers])
    for i in range(20):
        client.insert(np.int64(i), {"p": 1.0})
    keys = set()
    for _ in range(20):
        keys.update(client.sample_batch("p", 16).info.key.tolist())
    assert len(keys) == 20
    keys = np.array(sorted(keys), dtype=np.uint64)
    assert client.update_priorities("p", keys, np.full(20, 2.0)) == 20
    for s in servers:
        assert {
            s.tables_by_name["p"].get(k)["priority"] for k in s.tables_by_name["p"].keys().tolist()
        } == {2.0}
    with pytest.raises(ValueError, match="negative"):
        client.update_priorities("p", keys, np.full(20, -1.0))
    # A bad priority in mutate_priorities changes nothing, its deletes included.
    with pytest.raises(ValueError, match="negative"):
        client.mutate_priorities("p", updates={int(keys[0]): -1.0}, deletes=[int(keys[1])])
    assert client.server_info()["p"].current_size == 20
    assert client.delete("p", keys[:5]) == 5
    assert client.server_info()["p"].current_size == 15
    client.reset("p")
    assert client.server_info()["p"].current_size == 0


def test_sampling_leaves_out_a_shard_that_went_away(make_server):
    servers = [make_server(_table()) for _ in range(2)]
    client = reverb.Client(
        [f"localhost:{s.port}" for s in servers], in_process=False, unavailable_timeout=0.5
    )
    for _ in range(2):
        with client.trajectory_writer(1) as w:  # one writer per shard
            for i in range(10):
                w.append({"x": np.int64(i)})
                w.create_item("t", 1.0, {"x": w.history["x"][-1:]})
    servers[0].stop()
    import time

    got = 0
    t0 = time.monotonic()
    for _ in range(20):  # the first call may wait for the dead shard; later ones do not
        got += len(client.sample_batch("t", 4, timeout=5).info.key)
    assert got == 80
    assert time.monotonic() - t0 < 15


def test_calls_to_every_shard_are_made_concurrently_over_the_network(make_server, tmp_path):
    servers = [
        make_server(
            _table(), checkpointer=reverb.checkpointers.DefaultCheckpointer(str(tmp_path / str(i)))
        )
        for i in range(4)
    ]
    client = reverb.Client([f"localhost:{s.port}" for s in servers], in_process=False)
    client.insert(np.int64(1), {"t": 1.0})
    assert client.server_info()["t"].current_size == 1
    client.reset("t")
    assert client.server_info()["t"].current_size == 0
    assert len(client.checkpoint().split(",")) == 4
