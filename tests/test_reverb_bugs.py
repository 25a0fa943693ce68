"""Reverb's known bugs (reference §4.2/§4.3) that apply to us, and the behaviour we give instead."""

import threading

import numpy as np
import pytest

import ostinato as reverb
from ostinato import errors


def _prioritized(name="p"):
    return reverb.Table(
        name,
        reverb.selectors.Prioritized(1.0),
        reverb.selectors.Fifo(),
        100,
        reverb.rate_limiters.MinSize(1),
    )


def test_negative_priority_is_rejected_and_table_keeps_working(make_server):
    """§4.2.1: a negative priority killed the table worker; every later call hung."""
    client = make_server(_prioritized()).localhost_client()
    with pytest.raises(ValueError, match="negative"):
        client.insert(np.int64(1), {"p": -1.0})
    with client.trajectory_writer(1) as w:
        w.append({"x": np.int64(1)})
        with pytest.raises(ValueError, match="negative"):
            w.create_item("p", -0.5, {"x": w.history["x"][-1]})
        w.create_item("p", 0.5, {"x": w.history["x"][-1]})
    assert client.server_info()["p"].current_size == 1
    assert next(client.sample("p", 1, timeout=1))[0].data[0] == 1


@pytest.mark.parametrize("in_process", [True, False])
def test_too_large_priority_from_a_writer_is_rejected(make_server, in_process):
    """A writer's items get the whole priority check a Prioritized table makes (an infinite
    priority once slipped through the writers' path and made every item equally likely)."""
    server = make_server(_prioritized())
    client = reverb.Client(f"localhost:{server.port}", in_process=in_process)
    # In process the item is refused by create_item; over gRPC the server refuses it and the
    # writer raises at its flush (and again when it is closed: its stream has failed).
    with pytest.raises(ValueError, match="too large"):
        with client.trajectory_writer(1) as w:
            w.append({"x": np.int64(1)})
            w.create_item("p", float("inf"), {"x": w.history["x"][-1]})
            w.flush(timeout_ms=5000)
    with client.trajectory_writer(1) as w:
        w.append({"x": np.int64(2)})
        w.create_item("p", 2.0, {"x": w.history["x"][-1]})
        w.flush(timeout_ms=5000)
    assert client.server_info()["p"].current_size == 1


def test_update_is_validated_before_anything_changes(make_server):
    """§4.2.9: an invalid update was half applied (item and selector disagreed)."""
    client = make_server(_prioritized()).localhost_client()
    for i in range(3):
        client.insert(np.int64(i), {"p": 1.0})
    keys = sorted(set(client.sample_batch("p", 300).info.key.tolist()))
    with pytest.raises(ValueError, match="negative"):
        client.mutate_priorities("p", updates={keys[0]: 5.0, keys[1]: -1.0})
    with pytest.raises(ValueError, match="NaN"):
        client.update_priorities("p", keys, [1.0, float("nan"), 1.0])
    batch = client.sample_batch("p", 300)
    assert set(batch.info.priority.tolist()) == {1.0}


@pytest.mark.parametrize(
    "make",
    [
        lambda: reverb.rate_limiters.RateLimiter(1.0, 0, 0, 1),
        lambda: reverb.rate_limiters.RateLimiter(0.0, 1, 0, 1),
        lambda: reverb.rate_limiters.RateLimiter(-1.0, 1, 0, 1),
        lambda: reverb.rate_limiters.MinSize(0),
    ],
)
def test_bad_limiter_raises_instead_of_aborting(make):
    """§4.2.5: these aborted the whole process."""
    with pytest.raises(ValueError):
        make()


def test_rate_limiter_shared_by_two_tables_is_refused():
    lim = reverb.rate_limiters.MinSize(1)
    reverb.Table("a", reverb.selectors.Uniform(), reverb.selectors.Fifo(), 10, lim)
    with pytest.raises(ValueError, match="already used by table 'a'"):
        reverb.Table("b", reverb.selectors.Uniform(), reverb.selectors.Fifo(), 10, lim)


def test_can_sample_zero_raises_instead_of_aborting():
    t = reverb.Table.queue("q", 3)
    with pytest.raises(ValueError):
        t.can_sample(0)
    with pytest.raises(ValueError):
        t.can_insert(0)


def test_abandoned_sample_generator_loses_no_queue_item(make_server):
    """§4.2.6: Client.sample prefetched one item, which was lost when the generator was dropped."""
    client = make_server(reverb.Table.queue("q", 10)).localhost_client()
    for i in range(3):
        client.insert(np.int64(i), {"q": 1.0})
    gen = client.sample("q", 3)
    assert next(gen)[0].data[0] == 0
    del gen
    assert client.server_info()["q"].current_size == 2
    assert [s[0].data[0] for s in client.sample("q", 2)] == [1, 2]


def test_partial_batch_is_returned_not_dropped(make_server):
    """§4.2.7: a sample request that timed out with some samples taken lost them."""
    client = make_server(reverb.Table.queue("q", 10)).localhost_client()
    for i in range(3):
        client.insert(np.int64(i), {"q": 1.0})
    batch = client.sample_batch("q", 8, timeout=0.1)
    assert batch.info.key.shape == (3,)
    assert batch.data[0][:, 0].tolist() == [0, 1, 2]


def test_stop_does_not_fake_confirmations(make_server):
    """§4.2.8: closing a table reported queued inserts as written; we report the failure."""
    server = make_server(reverb.Table.queue("q", 1))
    client = server.localhost_client()
    w = client.trajectory_writer(1)
    for i in range(3):
        w.append({"x": np.int64(i)})
        w.create_item("q", 1.0, {"x": w.history["x"][-1]})
    w.flush(block_until_num_items=2, timeout_ms=3000)  # 1 stored, 2 wait for room
    assert w.num_pending_items == 2
    server.stop()
    with pytest.raises(errors.ReverbError, match="could not deliver|closed|stopped"):
        w.flush(timeout_ms=3000)
    w.close()


def test_key_collision_does_not_turn_insert_into_update(make_server):
    """§4.2.10: an item whose random key collided silently updated the existing item."""
    table = _prioritized()
    make_server(table)
    from ostinato.core.chunks import Chunk

    c = Chunk(1, np.zeros((1, 1)), 0)
    table.insert(42, 1.0, (c, 0, 1), (False,), assign=False)
    table.insert(42, 2.0, (c, 0, 1), (False,), assign=False)
    assert len(table) == 2
    assert sorted(table.get(k)["priority"] for k in table.keys().tolist()) == [1.0, 2.0]


def test_non_contiguous_picks_within_one_chunk(make_server):
    """§4.2.2: picks like history[[0, 2]] from one chunk returned steps [0, 1]."""
    client = make_server(reverb.Table.queue("q", 10)).localhost_client()
    w = client.trajectory_writer(4, max_chunk_length=4)
    for i in range(4):
        w.append({"x": np.int64(i)})
    h = w.history["x"]
    w.create_item("q", 1.0, {"x": h[[0, 2]]})
    w.create_item("q", 1.0, {"x": h[[1, 0]]})
    w.create_item("q", 1.0, {"x": h[[3, 2, 1, 0]]})
    w.flush()
    got = [s.data[0].tolist() for s in client.sample("q", 3, emit_timesteps=False)]
    assert got == [[0, 2], [1, 0], [3, 2, 1, 0]]


def test_timeout_messages_say_what_was_waited_for(make_server):
    client = make_server(
        reverb.Table(
            "t",
            reverb.selectors.Uniform(),
            reverb.selectors.Fifo(),
            10,
            reverb.rate_limiters.MinSize(5),
        )
    ).localhost_client()
    with pytest.raises(
        errors.RateLimiterTimeout, match=r"table 't'.*sample.*table size 0.*min_size_to_sample 5"
    ):
        client.sample_batch("t", 1, timeout=0.01)


def test_blocked_insert_wakes_when_sampled(make_server):
    client = make_server(reverb.Table.queue("q", 1)).localhost_client()
    client.insert(np.int64(0), {"q": 1.0})
    done = threading.Event()

    def insert():
        client.insert(np.int64(1), {"q": 1.0}, timeout=5)
        done.set()

    t = threading.Thread(target=insert)
    t.start()
    assert not done.wait(0.1)
    next(client.sample("q"))
    assert done.wait(2)
    t.join()
