"""ostinato.rlds.push_rlds_to_reverb / push_rlds_to_table into Ostinato tables."""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from rlds_fixtures import COMPLETE, SINGLE, TRUNCATED, episodes, steps  # noqa: E402

import ostinato as reverb  # noqa: E402
from ostinato import observers, rlds  # noqa: E402

F, M, L = 0, 1, 2


def multiple():
    return episodes(steps(*COMPLETE), steps(*SINGLE), steps(*TRUNCATED))


def drain(client, table="t"):
    """Every item left in a queue table, oldest first, as lists per field."""
    out = []
    for _ in range(client.server_info()[table].current_size):
        batch = client.sample_batch(table, 1)
        out.append(tuple(np.asarray(x[0]).tolist() for x in tf.nest.flatten(batch.data)))
    return out


def queue(signature=None):
    return reverb.Table.queue("t", 1000, signature=signature)


def window(a, b):
    """The item for two consecutive trajectories: each field stacked over time."""
    return tuple([x, y] for x, y in zip(a, b))


TRAJ = {  # (step_type, observation, action, next_step_type, reward, discount)
    "c0": (F, [1.0, 2.0], [11.0], M, 1.0, 1.0),
    "c1": (M, [3.0, 4.0], [21.0], L, 2.0, 1.0),
    "c2": (L, [5.0, 6.0], [31.0], F, 3.0, 0.0),
    "t2": (L, [5.0, 6.0], [31.0], F, 3.0, 0.5),
}


@pytest.mark.parametrize("networked", [False, True], ids=["embedded", "networked"])
def test_push_into_table_gives_tf_agents_items(make_server, networked):
    data = multiple()
    server = make_server(queue(rlds.create_trajectory_data_signature(data)))
    client = reverb.Client(f"localhost:{server.port}", in_process=not networked)
    try:
        n = rlds.push_rlds_to_table(data, client, "t", progress=False)
        assert n == 7  # one trajectory per RLDS step, as TF-Agents counts
        # Windows of 2 within episodes; the one-step episode gives none (no padding).
        assert drain(client) == [
            window(TRAJ["c0"], TRAJ["c1"]),
            window(TRAJ["c1"], TRAJ["c2"]),
            window(TRAJ["c0"], TRAJ["c1"]),
            window(TRAJ["c1"], TRAJ["t2"]),
        ]
    finally:
        client.close()


def test_push_through_an_episode_observer(make_server):
    data = multiple()
    server = make_server(queue())
    client = server.localhost_client()
    with observers.EpisodeObserver(client, "t", 10) as observer:
        assert rlds.push_rlds_to_reverb(data, observer, progress=False) == 7
    items = drain(client)
    assert [len(item[0]) for item in items] == [3, 1, 3]
    assert items[1][0] == [L] and items[1][3] == [L]  # the one-step episode: LAST -> LAST


def test_signature_mismatch_is_tf_agents_value_error(make_server):
    other = episodes(steps(*COMPLETE, obs=[[1.0], [2.0], [3.0]]))
    server = make_server(queue(rlds.create_trajectory_data_signature(other)))
    observer = observers.TrajectoryObserver(server.localhost_client(), "t", 2)
    with pytest.raises(ValueError, match="Replay buffer table signature spec should match RLDS"):
        rlds.push_rlds_to_reverb(multiple(), observer, progress=False)


def test_policy_info_fn_with_its_signature(make_server):
    data = multiple()

    def fn(cur, nxt):
        return {"next_reward": nxt["reward"]}

    sig = rlds.create_trajectory_data_signature(data)
    sig = sig._replace(policy_info={"next_reward": tf.TensorSpec([None], tf.float32)})
    server = make_server(queue(sig))
    client = server.localhost_client()
    assert rlds.push_rlds_to_table(data, client, "t", policy_info_fn=fn, progress=False) == 7
    items = drain(client)
    assert [item[3] for item in items] == [[2.0, 3.0], [3.0, 1.0], [2.0, 3.0], [3.0, 0.0]]


@pytest.mark.parametrize("networked", [False, True], ids=["embedded", "networked"])
def test_rejected_episode_leaves_nothing_in_the_table(make_server, networked):
    # Episode 1 has a terminal step that is not last: its first two steps would make an item.
    bad = steps([True, False, False], [False] * 3, [False, False, True])
    data = episodes(steps(*COMPLETE), bad, steps(*TRUNCATED))
    server = make_server(queue())
    client = reverb.Client(f"localhost:{server.port}", in_process=not networked)
    with pytest.raises(tf.errors.InvalidArgumentError) as err:
        rlds.push_rlds_to_table(data, client, "t", progress=False)
    message = err.value.message
    assert "Terminal step must be the last step of an episode." in message
    assert "(episode 1, step 2)" in message and "nothing of this episode was written" in message
    assert drain(client) == [window(TRAJ["c0"], TRAJ["c1"]), window(TRAJ["c1"], TRAJ["c2"])]
    client.close()


def test_missing_table_is_named(make_server):
    server = make_server(queue())
    with pytest.raises(reverb.errors.TableNotFoundError, match="'nope'"):
        rlds.push_rlds_to_table(multiple(), server.localhost_client(), "nope", progress=False)


def test_episode_not_starting_with_is_first(make_server):
    late = steps([False, False, False], [False, False, True], [False] * 3)
    data = episodes(steps(*COMPLETE), late)
    server = make_server(queue())
    client = server.localhost_client()
    with pytest.raises(
        tf.errors.InvalidArgumentError, match=r"does not start with is_first: \(episode 1, step 0\)"
    ):
        rlds.push_rlds_to_table(data, client, "t", progress=False)
    assert len(drain(client)) == 2  # episode 0 is whole and written; nothing of episode 1


def test_inconsistent_shapes_name_episode_and_step(make_server):
    a = steps(*COMPLETE)
    b = steps(*COMPLETE, obs=[[1.0, 2.0, 3.0]] * 3)
    data = a.concatenate(b)  # a dataset of steps; observation spec (None,)
    server = make_server(queue())
    client = server.localhost_client()
    with pytest.raises(ValueError, match=r"episode 1, step 0\): observation has shape \(3,\)"):
        rlds.push_rlds_to_table(data, client, "t", progress=False)
    assert len(drain(client)) == 2


def test_missing_is_first_is_a_value_error(make_server):
    data = episodes(
        tf.data.Dataset.from_tensor_slices(
            dict(
                observation=[[1.0]],
                action=[[1.0]],
                reward=[1.0],
                discount=[1.0],
                is_last=[True],
                is_terminal=[False],
            )
        )
    )
    server = make_server(queue())
    with pytest.raises(ValueError, match="Invalid RLDS step spec"):
        rlds.push_rlds_to_table(data, server.localhost_client(), "t", progress=False)


def test_progress_quiet_by_default_and_summary_when_asked(make_server, capsys):
    server = make_server(queue())
    client = server.localhost_client()
    rlds.push_rlds_to_table(multiple(), client, "t")  # stderr is not a terminal here
    assert capsys.readouterr().err == ""
    rlds.push_rlds_to_table(multiple(), client, "t", progress=True)
    err = capsys.readouterr().err
    assert "Pushed 7 steps (3 episodes)" in err and "steps/s" in err


def test_many_steps_across_read_batches(make_server):
    # 3 episodes of 150 steps: more than one of push's read batches (256 trajectories).
    n = 150
    flags = ([True] + [False] * (n - 1), [False] * (n - 1) + [True], [False] * n)

    def episode(k):
        return tf.data.Dataset.from_tensor_slices(
            dict(
                observation=np.arange(n, dtype=np.float32)[:, None] + 1000 * k,
                action=np.zeros((n, 1), np.float32),
                reward=np.ones(n, np.float32),
                discount=np.ones(n, np.float32),
                is_first=flags[0],
                is_last=flags[1],
                is_terminal=flags[2],
            )
        )

    data = episodes(*[episode(k) for k in range(3)])
    server = make_server(queue(rlds.create_trajectory_data_signature(data)))
    client = server.localhost_client()
    assert rlds.push_rlds_to_table(data, client, "t", progress=False) == 3 * n
    items = drain(client)
    assert len(items) == 3 * (n - 1)
    expected = [[[1000 * k + t], [1000 * k + t + 1]] for k in range(3) for t in range(n - 1)]
    assert [item[1] for item in items] == expected


def test_timeout_when_the_rate_limiter_blocks(make_server):
    # Inserts block once 20 items are ahead of samples (nobody samples): the wait times out.
    limiter = reverb.rate_limiters.SampleToInsertRatio(1.0, 1, 20.0)
    server = make_server(
        reverb.Table(
            "t", reverb.selectors.Fifo(), reverb.selectors.Fifo(), 10_000, rate_limiter=limiter
        )
    )
    n = 300
    flags = ([True] + [False] * (n - 1), [False] * (n - 1) + [True], [False] * n)
    data = episodes(
        tf.data.Dataset.from_tensor_slices(
            dict(
                observation=np.zeros((n, 2), np.float32),
                action=np.zeros((n, 1), np.float32),
                reward=np.zeros(n, np.float32),
                discount=np.ones(n, np.float32),
                is_first=flags[0],
                is_last=flags[1],
                is_terminal=flags[2],
            )
        )
    )
    with pytest.raises(reverb.errors.DeadlineExceededError):
        rlds.push_rlds_to_table(
            data, server.localhost_client(), "t", progress=False, timeout=0.3, max_pending_items=64
        )


def test_max_steps_per_second_paces_the_push(make_server):
    import time

    n = 400
    flags = ([True] + [False] * (n - 1), [False] * (n - 1) + [True], [False] * n)
    data = episodes(
        tf.data.Dataset.from_tensor_slices(
            dict(
                observation=np.zeros((n, 2), np.float32),
                action=np.zeros((n, 1), np.float32),
                reward=np.zeros(n, np.float32),
                discount=np.ones(n, np.float32),
                is_first=flags[0],
                is_last=flags[1],
                is_terminal=flags[2],
            )
        )
    )
    server = make_server(queue())
    start = time.perf_counter()
    assert (
        rlds.push_rlds_to_table(
            data, server.localhost_client(), "t", progress=False, max_steps_per_second=1000.0
        )
        == n
    )
    assert time.perf_counter() - start >= 0.3  # 400 steps at 1,000/s, less the first slice
    assert server.localhost_client().server_info()["t"].current_size == n - 1
    with pytest.raises(ValueError, match=r"max_steps_per_second \(0\)"):
        rlds.push_rlds_to_table(data, server.localhost_client(), "t", max_steps_per_second=0)
