"""Replay shards as Ray actors (`ostinato.ray`) on a local Ray cluster of several processes."""

from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import pytest

# "ray.actor", not "ray": without Ray installed, "ray" would find this directory (tests/ray).
pytest.importorskip("ray.actor")
import ostinato as reverb
import ray
from _helpers import wait_until
from ostinato import errors
from ostinato import server_cli as cli
from ostinato.ray import ShardGroup, start_shards

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(os.path.abspath(reverb.__file__)))

CONFIG = {
    "tables": [
        {
            "table_name": "t",
            "sampler": {"uniform": True},
            "remover": {"fifo": True},
            "max_size": 10_000,
            "rate_limiter": {
                "samples_per_insert": 1.0,
                "min_size_to_sample": 1,
                "min_diff": -1e300,
                "max_diff": 1e300,
            },
        }
    ]
}


def make_tables():
    """The tables of the kill/restore test: 'replay' for the learner, 'audit' (a queue) to
    read every item back at the end."""
    return [
        reverb.Table(
            "replay",
            reverb.selectors.Uniform(),
            reverb.selectors.Fifo(),
            100_000,
            reverb.rate_limiters.MinSize(1),
        ),
        reverb.Table.queue("audit", 100_000),
    ]


@pytest.fixture(scope="module")
def ray_cluster():
    # Workers import this module (the remote functions below), the shared test helpers it
    # imports (tests/_helpers.py) and this tree's ostinato.
    path = os.pathsep.join(
        p for p in (HERE, os.path.dirname(HERE), SRC, os.environ.get("PYTHONPATH")) if p
    )
    ray.init(
        num_cpus=4,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": path}},
    )
    yield
    ray.shutdown()


def _gone(pids, timeout=15.0):
    import psutil

    deadline = time.monotonic() + timeout
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        alive = [
            p
            for p in alive
            if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
        ]
        time.sleep(0.1)
    return not alive


# -- arguments (no cluster needed) ---------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"num_shards": 0}, r"num_shards \(0\)"),
        ({"strategy": "ANYWHERE"}, r"strategy \('ANYWHERE'\)"),
        ({"ports": [9000]}, r"one port per shard"),
        ({"ports": [9000, 9000]}, r"must not repeat"),
        ({"ports": [0, 9000]}, r"0 is not a port"),
        ({"checkpoint_every_seconds": 5}, r"need a checkpoint_dir"),
        ({"detached": True}, r"needs a name"),
    ],
)
def test_bad_arguments_are_named(kwargs, match):
    args = {"num_shards": 2, **kwargs}
    with pytest.raises(ValueError, match=match):
        start_shards(CONFIG, **args)


def test_tables_must_be_a_factory_or_a_config():
    with pytest.raises(TypeError, match="not Table objects"):
        start_shards(make_tables(), 2)
    with pytest.raises(ValueError, match=r"max_size"):
        start_shards({"tables": [{**CONFIG["tables"][0], "max_size": "many"}]}, 2)
    with pytest.raises(ValueError, match=r"port \(8000\)"):
        start_shards({**CONFIG, "port": 8000}, 2)
    with pytest.raises(TypeError, match="must return a non-empty list"):
        start_shards(lambda: [], 2)


# -- on a local cluster ----------------------------------------------------------------------------
@ray.remote(num_cpus=0)
def _insert_through(group: ShardGroup, first: int, n: int) -> int:
    """A writer in another process: builds its own client from the pickled handle."""
    client = group.client(first_shard=first)
    with client.trajectory_writer(1) as w:
        for i in range(n):
            w.append({"x": np.int64(first * 1000 + i)})
            w.create_item("t", 1.0, {"x": w.history["x"][-1]})
    return os.getpid()


def test_shards_serve_a_sharded_client_and_shut_down_cleanly(ray_cluster, tmp_path):
    group = start_shards(CONFIG, 2, num_cpus=0.25, name="ost-basic", checkpoint_dir=tmp_path)
    try:
        assert len(group.addresses) == 2 and len(set(group.addresses)) == 2
        pids = ray.get([_insert_through.remote(group, s, 50) for s in range(2)], timeout=60)
        assert os.getpid() not in pids
        client = group.client()
        assert sorted(client.server_address.split(",")) == sorted(group.addresses)
        info = client.server_info(timeout=10)["t"]
        assert info.current_size == 100  # both writers' items, one writer stream per shard
        for addr in group.addresses:  # each shard got one writer's items
            assert reverb.Client(addr).server_info(timeout=10)["t"].current_size == 50
        batch = client.sample_batch("t", 32, timeout=10)
        assert len(batch.info.key) == 32
        keys = np.unique(batch.info.key)  # routed to the shard each key came from
        assert client.update_priorities("t", keys, np.full(len(keys), 2.0)) == len(keys)
        # Another driver or task finds the group by name.
        found = ShardGroup.lookup("ost-basic")
        assert found.addresses == group.addresses
        shard_pids = [i.pid for i in group.info()]
    except BaseException:
        group.shutdown()
        raise
    paths = group.shutdown(checkpoint=True, timeout=30)
    assert [os.path.basename(os.path.dirname(p)) for p in paths] == ["shard-000", "shard-001"]
    assert group.shutdown() == []  # idempotent
    assert _gone(shard_pids), "shard actor processes still running after shutdown"
    with pytest.raises(errors.UnavailableError):
        reverb.Client(group.addresses[0], unavailable_timeout=0.5).server_info()
    with pytest.raises(LookupError, match="ost-basic"):
        ShardGroup.lookup("ost-basic")


def test_a_shard_that_cannot_start_fails_start_shards_quickly(ray_cluster, tmp_path):
    # A checkpoint written for other table settings: the shard's restore refuses it.
    other = dict(CONFIG["tables"][0], max_size=5)
    with reverb.Server(
        cli.tables_from_config({"tables": [other]}),
        checkpointer=reverb.checkpointers.DefaultCheckpointer(str(tmp_path / "shard-000")),
    ) as server:
        server.checkpoint()
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="max_size"):
        start_shards(CONFIG, 1, num_cpus=0.25, checkpoint_dir=tmp_path, timeout=60)
    assert time.monotonic() - t0 < 30


def test_shards_that_do_not_fit_the_cluster_time_out_with_a_hint(ray_cluster):
    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match="lower num_cpus"):
        start_shards(CONFIG, 2, num_cpus=100, timeout=2)
    assert time.monotonic() - t0 < 20
    states = [pg["state"] for pg in ray.util.placement_group_table().values()]
    assert "PENDING" not in states  # the unplaceable group was removed


# -- a shard killed and restored mid-run ----------------------------------------------------------
@ray.remote(num_cpus=0)
def _writer(group: ShardGroup, wid: int, seconds: float, per_flush: int) -> list:
    """Writes items with unique ids until ``seconds`` have passed; returns, per flush, the time
    the flush returned (every item before it was confirmed by then) and the items' ids."""
    client = group.client(first_shard=wid % group.num_shards)
    out = []
    seq = 0
    with client.trajectory_writer(1) as w:
        end = time.time() + seconds
        while time.time() < end:
            ids = []
            for _ in range(per_flush):
                iid = wid * 1_000_000 + seq
                seq += 1
                w.append({"id": np.int64(iid), "obs": np.full(4, iid % 1000, np.float32)})
                for table in ("replay", "audit"):
                    w.create_item(
                        table, 1.0, {"id": w.history["id"][-1], "obs": w.history["obs"][-1]}
                    )
                ids.append(iid)
            w.flush(timeout_ms=60_000)
            out.append((time.time(), ids))
            time.sleep(0.01)
    return out


def _drain_ids(address: str) -> list[int]:
    """Every item id in the shard's 'audit' queue (which empties it)."""
    client = reverb.Client(address, unavailable_timeout=10)
    expected = client.server_info(timeout=10)["audit"].current_size
    ids: list[int] = []
    while len(ids) < expected:
        batch = client.sample_batch("audit", 1000, timeout=5, unpack_as_table_signature=False)
        ids.extend(batch.data[0].tolist())
    return ids


@pytest.mark.slow
def test_a_killed_shard_restarts_from_its_checkpoint_and_clients_carry_on(ray_cluster, tmp_path):
    group = start_shards(
        make_tables, 2, num_cpus=0.25, checkpoint_dir=tmp_path, checkpoint_every_seconds=600
    )
    stop = threading.Event()
    try:
        before = group.info()
        writers = [_writer.remote(group, wid, 6.0, 10) for wid in range(2)]

        # The learner: samples through the sharded client and updates priorities, all along.
        learner = group.client(first_shard=0)
        samples: list[tuple[float, int]] = []
        updated = [0]
        learner_errors: list[str] = []

        def learn():
            while not stop.is_set():
                try:
                    b = learner.sample_batch("replay", 16, timeout=1)
                    samples.append((time.time(), len(b.info.key)))
                    updated[0] += learner.update_priorities(
                        "replay", b.info.key, np.full(len(b.info.key), 2.0)
                    )
                except (errors.UnavailableError, errors.DeadlineExceededError) as e:
                    learner_errors.append(type(e).__name__)
                time.sleep(0.01)

        thread = threading.Thread(target=learn, daemon=True)
        thread.start()
        wait_until(
            lambda: learner.server_info(timeout=10)["audit"].current_size >= 200,
            30,
            "the writers to get going",
            interval=0.05,
        )

        t_ckpt = time.time()  # everything confirmed before this must survive
        ckpt_path = ray.get(group.actors[0].checkpoint.remote(), timeout=30)
        time.sleep(0.5)  # items confirmed now, after the checkpoint, may be lost
        os.kill(before[0].pid, signal.SIGKILL)  # a crash: no final checkpoint
        t_kill = time.time()
        group.wait_ready(timeout=60)
        t_back = time.time()
        after = group.info()
        assert after[0].pid != before[0].pid and after[1].pid == before[1].pid
        assert after[0].address == before[0].address  # same port: clients just reconnect
        assert after[0].restored_from == ckpt_path
        assert not group.refresh_addresses()

        results = ray.get(writers, timeout=120)
        time.sleep(0.3)
        stop.set()
        thread.join(10)
        assert not thread.is_alive()
        present = [i for a in group.addresses for i in _drain_ids(a)]
    finally:
        stop.set()
        group.shutdown()

    assert len(present) == len(set(present)), "an item was stored twice"
    present_set = set(present)
    flushes = {wid: r for wid, r in enumerate(results)}
    written = {wid: [i for _, ids in r for i in ids] for wid, r in flushes.items()}
    # Writer 0's stream was on shard 0 (the killed one), writer 1's on shard 1.
    assert set(written[1]) <= present_set
    missing = [i for i in written[0] if i not in present_set]
    confirmed_before_ckpt = {i for t, ids in flushes[0] if t < t_ckpt for i in ids}
    assert not confirmed_before_ckpt & set(missing), "items confirmed before the checkpoint lost"
    # What was lost is one run of items the old server confirmed after its checkpoint.
    if missing:
        seqs = sorted(i % 1_000_000 for i in missing)
        assert seqs == list(range(seqs[0], seqs[-1] + 1))
        lost_flush_times = [t for t, ids in flushes[0] if set(ids) & set(missing)]
        assert min(lost_flush_times) >= t_ckpt
    # The writer on the killed shard carried on after the restart (reconnected, resent).
    assert max(t for t, _ in flushes[0]) > t_back
    assert any(i in present_set for t, ids in flushes[0] if t > t_back for i in ids)
    # The learner sampled before the kill and after the restart, through the same client.
    assert any(t < t_kill for t, _ in samples) and any(t > t_back for t, _ in samples)
    assert updated[0] > 0
