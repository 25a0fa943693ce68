"""TF-Agents' observer test vectors (adapters.md §2.3), against a real server.

TF-Agents' own tests count writer calls on a mock; here the writer is real (its calls are
counted on the way through) and the items that reach the table are counted and read back.
"""

from __future__ import annotations

import numpy as np
import pytest
from _observer_helpers import (
    FIRST,
    LAST,
    MID,
    CountingClient,
    Trajectory,
    counting_trajectories,
    drain,
    observations,
)

import ostinato as reverb
from ostinato import observers


def _traj(**kw):
    return lambda c: observers.TrajectoryObserver(c, "a", **kw)


def _seq(**kw):
    return lambda c: observers.TrajectorySequenceObserver(c, "a", **kw)


def _episode(**kw):
    return lambda c: observers.EpisodeObserver(c, "a", **kw)


VECTORS = [
    # (name, make, k, driver steps, appends, items)
    ("traj L=2", _traj(sequence_length=2), 3, 4, 5, 3),
    ("traj L=2 stride 2", _traj(sequence_length=2, stride_length=2), 3, 4, 5, 2),
    ("episode max 8 prio 3", _episode(max_sequence_length=8, priority=3), 3, 8, 10, 2),
    (
        "traj L=4 s1 pad+tile",
        _traj(
            sequence_length=4, stride_length=1, pad_end_of_episodes=True, tile_end_of_episodes=True
        ),
        5,
        11,
        19,
        12,
    ),
    (
        "traj L=4 s2 pad+tile",
        _traj(
            sequence_length=4, stride_length=2, pad_end_of_episodes=True, tile_end_of_episodes=True
        ),
        5,
        11,
        19,
        6,
    ),
    (
        "traj L=4 s3 pad+tile",
        _traj(
            sequence_length=4, stride_length=3, pad_end_of_episodes=True, tile_end_of_episodes=True
        ),
        5,
        11,
        19,
        4,
    ),
    (
        "traj L=4 s4 pad+tile",
        _traj(
            sequence_length=4, stride_length=4, pad_end_of_episodes=True, tile_end_of_episodes=True
        ),
        5,
        11,
        19,
        4,
    ),
    ("sequence L=2 s2", _seq(sequence_length=2, stride_length=2), 3, 4, 5, 2),
]


@pytest.mark.parametrize("as_dict", [False, True], ids=["trajectory", "dict"])
@pytest.mark.parametrize("name,make,k,steps,appends,items", VECTORS, ids=[v[0] for v in VECTORS])
def test_observer_writes(queue_server, name, make, k, steps, appends, items, as_dict):
    client = CountingClient(queue_server.localhost_client())
    with make(client) as observer:
        for t in counting_trajectories(k, steps, as_dict=as_dict):
            observer(t)
    assert client.counts == {"trajectory_writer": 1, "append": appends, "create_item": items}
    assert len(drain(client)) == items  # every created item reached the table


RESETS = [
    # (kwargs, write_cached_steps, appends, items, appends by reset, items by reset)
    (dict(), False, 13, 2, 0, 0),
    (dict(pad_end_of_episodes=True, tile_end_of_episodes=True), True, 19, 4, 3, 1),
    (dict(pad_end_of_episodes=True), True, 13, 2, 3, 1),
]


@pytest.mark.parametrize(
    "kwargs,write,appends,items,more_appends,more_items",
    RESETS,
    ids=["no-pad-reset-False", "pad-tile-reset-True", "pad-reset-True"],
)
def test_observer_resets(queue_server, kwargs, write, appends, items, more_appends, more_items):
    client = CountingClient(queue_server.localhost_client())
    observer = observers.TrajectoryObserver(client, "a", 4, stride_length=4, **kwargs)
    for t in counting_trajectories(5, 11):
        observer(t)
    assert (client.counts["append"], client.counts["create_item"]) == (appends, items)
    observer.reset(write_cached_steps=write)
    assert (client.counts["append"], client.counts["create_item"]) == (
        appends + more_appends,
        items + more_items,
    )
    observer.close()
    assert len(drain(client)) == items + more_items


def test_multiple_tables_get_every_item(queue_server):
    client = CountingClient(queue_server.localhost_client())
    with observers.TrajectorySequenceObserver(client, ["a", "b"], 3, stride_length=3) as o:
        for t in counting_trajectories(3, 6):
            o(t)
    assert client.counts["create_item"] == 2 * 2
    a, b = drain(client, "a"), drain(client, "b")
    assert observations(a) == observations(b) == [[0, 1, 2], [3, 10, 11]]
    assert client.counts["trajectory_writer"] == 1  # one writer: the data is stored once


def test_trajectory_observer_real_server_counts(queue_server):
    client = queue_server.localhost_client()
    observer = observers.TrajectoryObserver(client, "a", 2)
    for t in counting_trajectories(6, 5):
        observer(t)
    observer.flush()
    assert observer._cached_steps == 5 == observer.cached_steps
    assert client.server_info()["a"].current_size == 4


def test_episode_observer_real_server_counts(queue_server):
    client = queue_server.localhost_client()
    observer = observers.EpisodeObserver(client, "a", 8, priority=3)
    for t in counting_trajectories(3, 10):
        observer(t)
    observer.flush()
    assert observer.cached_steps == 1
    items = drain(client)
    assert len(items) == 3
    assert [float(s.info.priority) for s in items] == [3.0] * 3
    assert observations(items) == [[0, 1, 2, 3], [10, 11, 12, 13], [20, 21, 22, 23]]
    assert [np.asarray(s.data[0]).tolist() for s in items] == [[FIRST, MID, MID, LAST]] * 3


def test_episode_overflow_raises(queue_server):
    observer = observers.EpisodeObserver(queue_server.localhost_client(), "a", 2)
    trajs = counting_trajectories(3, 4)
    observer(trajs[0])
    observer(trajs[1])
    with pytest.raises(ValueError, match="exceeds `max_sequence_length`"):
        observer(trajs[2])
    # The rest of the overflowed episode is dropped; the next episode is written.
    for t in trajs[3:]:
        observer(t)
    assert observer.cached_steps == 1


def test_episode_overflow_bypass(queue_server, caplog):
    client = CountingClient(queue_server.localhost_client())
    with observers.EpisodeObserver(client, "a", 4, bypass_partial_episodes=True) as o:
        for t in counting_trajectories(3, 6):  # episodes of 4 steps: written
            o(t)
        for t in counting_trajectories(4, 6):  # episodes of 5 steps: bypassed
            o(t)
    assert client.counts["create_item"] == 1
    assert "bypassed" in caplog.text
    assert observations(drain(client)) == [[0, 1, 2, 3]]


def test_padding_and_tiling_contents(queue_server):
    client = queue_server.localhost_client()
    with observers.TrajectoryObserver(
        client, "a", 4, pad_end_of_episodes=True, tile_end_of_episodes=True
    ) as o:
        for t in counting_trajectories(2, 2):  # F M B: three steps, then the boundary
            o(t)
        o(
            Trajectory(
                np.int32(LAST),
                np.int32(2),
                np.int32(0),
                (),
                np.int32(FIRST),
                np.float32(0),
                np.float32(1),
            )
        )
    items = drain(client)
    # Windows of 4 ending in padding: F M B P, M B P P, B P P P.
    assert observations(items) == [[0, 1, 2, 0], [1, 2, 0, 0], [2, 0, 0, 0]]
    step_types = [np.asarray(s.data[0]).tolist() for s in items]
    assert step_types == [
        [FIRST, MID, LAST, LAST],
        [MID, LAST, LAST, LAST],
        [LAST, LAST, LAST, LAST],
    ]
    next_types = [np.asarray(s.data[3]).tolist() for s in items]
    assert next_types[-1] == [FIRST] * 4
    discounts = [np.asarray(s.data[5]).tolist() for s in items]
    assert discounts[-1] == [1.0, 0.0, 0.0, 0.0]  # padding is zeros, as in TF-Agents
    assert np.asarray(items[0].data[0]).dtype == np.int32


def test_pad_without_tile_writes_one_padded_window(queue_server):
    client = queue_server.localhost_client()
    with observers.TrajectoryObserver(client, "a", 4, pad_end_of_episodes=True) as o:
        for t in counting_trajectories(1, 3):  # episodes F B (two steps each)
            o(t)
    # Each complete two-step episode is padded to 4 steps once.
    assert observations(drain(client)) == [[0, 1, 0, 0], [10, 11, 0, 0]]


def test_dicts_and_trajectories_write_the_same(queue_server):
    client = queue_server.localhost_client()
    for as_dict, table in ((False, "a"), (True, "b")):
        with observers.TrajectoryObserver(
            client, table, 3, stride_length=2, pad_end_of_episodes=True
        ) as o:
            for t in counting_trajectories(4, 9, as_dict=as_dict):
                o(t)
    a, b = drain(client, "a"), drain(client, "b")
    assert len(a) == len(b) > 0
    # Dict columns come in sorted key order: action, discount, next_step_type, observation,
    # reward, step_type; trajectories in field order.
    order = [2, 5, 3, 1, 4, 0]
    for x, y in zip(a, b):
        for i, j in enumerate(order):
            np.testing.assert_array_equal(np.asarray(x.data[j]), np.asarray(y.data[i]))


def test_networked_client(make_server):
    server = make_server(reverb.Table.queue("a", 100))
    client = reverb.Client(f"localhost:{server.port}", in_process=False)
    with observers.EpisodeObserver(client, "a", 10) as o:
        for t in counting_trajectories(3, 7):
            o(t)
    assert observations(drain(client)) == [[0, 1, 2, 3], [10, 11, 12, 13]]
    client.close()
