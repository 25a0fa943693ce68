"""ostinato.rlds: Minari datasets into tables (no TensorFlow), on datasets made here."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

minari = pytest.importorskip("minari")
pytest.importorskip("jax")  # Minari's DataCollector needs it

from minari_fixtures import collect, counting_episode, drain, episode  # noqa: E402

import ostinato as reverb  # noqa: E402
from ostinato import observers, rlds  # noqa: E402
from ostinato.rlds import MalformedEpisodeError, StepType  # noqa: E402

F, M, L = int(StepType.FIRST), int(StepType.MID), int(StepType.LAST)
FIELDS = ("step_type", "observation", "action", "next_step_type", "reward", "discount")


@pytest.fixture(scope="module")
def datasets_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("minari")
    old = os.environ.get("MINARI_DATASETS_PATH")
    os.environ["MINARI_DATASETS_PATH"] = str(path)
    yield path
    if old is None:
        del os.environ["MINARI_DATASETS_PATH"]
    else:
        os.environ["MINARI_DATASETS_PATH"] = old


@pytest.fixture(scope="module")
def cartpole(datasets_path):
    """4 random CartPole episodes (terminated) and what TrajectoryObserver wrote online."""
    return collect("cartpole/random-v0", "CartPole-v1", 4, seed=3)


@pytest.fixture(scope="module")
def pendulum(datasets_path):
    """3 random Pendulum episodes of 12 steps (truncated), continuous actions."""
    return collect("pendulum/random-v0", "Pendulum-v1", 3, seed=5, max_episode_steps=12)


def table(dataset=None, name="t"):
    signature = None if dataset is None else rlds.create_minari_trajectory_signature(dataset)
    return reverb.Table.queue(name, 100_000, signature=signature)


def client_for(server, networked):
    return reverb.Client(f"localhost:{server.port}", in_process=not networked)


def trajectories(client, name="t"):
    """The items of a queue table as Trajectory (a signature that came over gRPC is a plain
    tuple; its order is the Trajectory's)."""
    return [i if hasattr(i, "_fields") else rlds.Trajectory(*i) for i in drain(client, name)]


def as_fields(item):
    """A Trajectory item as a dict of the observer's gymnasium fields."""
    return {f: np.array(getattr(item, f)) for f in FIELDS}


@pytest.mark.parametrize("networked", [False, True], ids=["embedded", "networked"])
@pytest.mark.parametrize("which", ["cartpole", "pendulum"])
def test_items_are_what_the_observer_wrote_while_collecting(make_server, request, networked, which):
    dataset, online = request.getfixturevalue(which)
    server = make_server(table(dataset))
    client = client_for(server, networked)
    try:
        n = rlds.push_minari_to_table(dataset, client, "t", progress=False)
        assert n == dataset.total_steps + dataset.total_episodes  # n + 1 per episode
        items = trajectories(client, "t")
    finally:
        client.close()
    assert isinstance(items[0], rlds.Trajectory) and items[0].policy_info == ()
    assert len(items) == len(online) == dataset.total_steps
    for ours, theirs in zip(items, online):
        ours = as_fields(ours)
        if ours["step_type"][1] == L:
            # The boundary's discount: TF-Agents' RLDS rule gives 0.0 after a termination,
            # the gymnasium observer 1.0 (the transition before it has 0.0 in both).
            terminated = ours["discount"][0] == 0.0
            assert ours["discount"][1] == (0.0 if terminated else 1.0)
            ours["discount"][1] = theirs["discount"][1]
        for field in FIELDS:
            np.testing.assert_array_equal(ours[field], theirs[field], err_msg=field)
            assert ours[field].dtype == theirs[field].dtype, field


def test_terminal_and_truncated_episode_ends(make_server, cartpole, pendulum):
    for (dataset, _), terminal in ((cartpole, True), (pendulum, False)):
        server = make_server(table(dataset))
        client = server.localhost_client()
        rlds.push_minari_to_table(dataset, client, "t", progress=False)
        items = [as_fields(i) for i in trajectories(client, "t")]
        ends = [i for i in items if i["next_step_type"][0] == L]
        assert len(ends) == dataset.total_episodes
        for i in ends:  # the episode's last transition and its boundary
            assert i["step_type"].tolist() == [M, L]
            assert i["discount"][0] == (0.0 if terminal else 1.0)
            assert i["reward"][1] == 0.0 and not i["action"][1].any()
        assert items[0]["step_type"].tolist() == [F, M]


def test_no_tensorflow_is_imported(cartpole):
    code = (
        "import sys, ostinato as reverb, minari\n"
        "from ostinato import rlds\n"
        "ds = minari.load_dataset('cartpole/random-v0')\n"
        "s = reverb.Server([reverb.Table.queue('t', 10**5, "
        "signature=rlds.create_minari_trajectory_signature(ds))])\n"
        "n = rlds.push_minari_to_table(ds, s.localhost_client(), 't', progress=False)\n"
        "print(n, any(m.split('.')[0] in ('tensorflow', 'tf_agents') for m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    dataset, _ = cartpole
    assert out.stdout.split() == [str(dataset.total_steps + dataset.total_episodes), "False"]


def test_spec_and_signature(cartpole):
    dataset, _ = cartpole
    spec = rlds.create_minari_trajectory_spec(dataset)
    assert spec.step_type == reverb.TensorSpec((), np.int32, "step_type")
    assert spec.observation == reverb.TensorSpec((4,), np.float32)
    assert spec.action == reverb.TensorSpec((), np.int64)
    assert spec.reward == reverb.TensorSpec((), np.float32)
    assert spec.discount == reverb.TensorSpec((), np.float32, "discount")
    assert spec.policy_info == ()
    sig = rlds.create_minari_trajectory_signature(dataset)
    assert sig.observation == reverb.TensorSpec((None, 4), np.float32)


def test_signature_mismatch_names_the_column(make_server, cartpole, pendulum):
    server = make_server(table(pendulum[0]))
    with pytest.raises(ValueError, match=r"observation: the table has \(\(None, 3\)"):
        rlds.push_minari_to_table(cartpole[0], server.localhost_client(), "t", progress=False)
    assert server.localhost_client().server_info()["t"].current_size == 0


def test_missing_table_is_named(make_server, cartpole):
    server = make_server(table(name="other"))
    with pytest.raises(reverb.errors.TableNotFoundError, match="nope"):
        rlds.push_minari_to_table(cartpole[0], server.localhost_client(), "nope", progress=False)


def test_longer_windows_several_tables_and_padding(make_server):
    episodes = [counting_episode(4, id=0), counting_episode(1, id=1, start=100)]
    server = make_server(table(episodes, name="a"), table(episodes, name="b"))
    client = server.localhost_client()
    n = rlds.push_minari_to_table(
        episodes,
        client,
        ["a", "b"],
        sequence_length=3,
        pad_end_of_episodes=True,
        tile_end_of_episodes=True,
        progress=False,
    )
    assert n == 5 + 2
    items = trajectories(client, "a")
    # TF-Agents' tiling: every window running into the padding (zeros, LAST -> FIRST).
    assert [i.observation[:, 0].tolist() for i in items] == [
        [0, 1, 2],
        [1, 2, 3],
        [2, 3, 4],
        [3, 4, 0],
        [4, 0, 0],
        [100, 101, 0],
        [101, 0, 0],
    ]
    assert items[3].step_type.tolist() == [M, L, L]
    assert items[3].next_step_type.tolist() == [L, F, F]
    in_b = trajectories(client, "b")  # the same items in b (the data stored once)
    assert [i.observation.tolist() for i in in_b] == [i.observation.tolist() for i in items]


def test_dict_observations_stay_nests(make_server):
    n = 3
    obs = {
        "pos": np.arange(n + 1, dtype=np.float32)[:, None],
        "flag": np.arange(n + 1, dtype=np.int64),
    }
    eps = [episode(obs, np.zeros((n, 2), np.float32), [1.0] * n, [0, 0, 1], [0, 0, 0])]
    spec = rlds.create_minari_trajectory_spec(eps)
    assert spec.observation == {
        "flag": reverb.TensorSpec((), np.int64),
        "pos": reverb.TensorSpec((1,), np.float32),
    }
    server = make_server(table(eps))
    client = server.localhost_client()
    assert rlds.push_minari_to_table(eps, client, "t", progress=False) == n + 1
    items = trajectories(client, "t")
    assert [i.observation["flag"].tolist() for i in items] == [[0, 1], [1, 2], [2, 3]]


def test_push_through_any_observer(cartpole):
    got = []
    dataset, _ = cartpole
    assert rlds.push_minari_to_reverb(dataset, got.append, progress=False) == len(got)
    assert [int(t.step_type) for t in got[:2]] == [F, M]
    assert isinstance(got[0], rlds.Trajectory)


MALFORMED = {
    "observations_short": (
        lambda: episode(
            np.zeros((3, 2), np.float32),
            np.zeros((3, 1), np.float32),
            [1, 1, 1],
            [0, 0, 1],
            [0, 0, 0],
            id=7,
        ),
        r"Minari episode 7: observations has 3 steps, but rewards has 3",
    ),
    "actions_long": (
        lambda: episode(
            np.zeros((4, 2), np.float32),
            np.zeros((4, 1), np.float32),
            [1, 1, 1],
            [0, 0, 1],
            [0, 0, 0],
            id=7,
        ),
        r"Minari episode 7: actions has 4 steps, but rewards has 3",
    ),
    "early_termination": (
        lambda: episode(
            np.zeros((4, 2), np.float32),
            np.zeros((3, 1), np.float32),
            [1, 1, 1],
            [0, 1, 0],
            [0, 0, 1],
            id=7,
        ),
        r"Minari episode 7, step 1: terminated before the episode's last step \(2\)",
    ),
    "early_truncation": (
        lambda: episode(
            np.zeros((4, 2), np.float32),
            np.zeros((3, 1), np.float32),
            [1, 1, 1],
            [0, 0, 1],
            [1, 0, 0],
            id=7,
        ),
        r"Minari episode 7, step 0: truncated before",
    ),
    "other_shape": (
        lambda: counting_episode(3, id=7, obs_dim=3),
        r"Minari episode 7: observation has shape \(3,\) and dtype float32, but earlier "
        r"episodes have \(2,\)",
    ),
    "other_dtype": (
        lambda: episode(
            np.zeros((4, 2), np.float64),
            np.zeros((3, 1), np.float32),
            [1, 1, 1],
            [0, 0, 1],
            [0, 0, 0],
            id=7,
        ),
        r"observation has shape \(2,\) and dtype float64",
    ),
    "missing_field": (
        lambda: episode(np.zeros((4, 2), np.float32), None, [1, 1, 1], [0, 0, 1], [0, 0, 0], id=7),
        r"Minari episode 7: no actions",
    ),
}


@pytest.mark.parametrize("networked", [False, True], ids=["embedded", "networked"])
@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_episode_names_it_and_leaves_nothing_of_it(make_server, case, networked):
    make_bad, message = MALFORMED[case]
    good = [counting_episode(3, id=0), counting_episode(2, id=1, start=100)]
    data = [*good, make_bad(), counting_episode(3, id=8, start=200)]
    server = make_server(table(good))
    client = client_for(server, networked)
    try:
        with pytest.raises(MalformedEpisodeError, match=message) as err:
            rlds.push_minari_to_table(data, client, "t", progress=False)
        assert (
            "nothing of this episode was written; 7 trajectories of 2 earlier episodes "
            "were" in str(err.value)
        )
        items = trajectories(client, "t")
    finally:
        client.close()
    # Episodes 0 and 1 whole (3 + 2 transitions), nothing of 7 or after it.
    assert [i.observation[:, 0].tolist() for i in items] == [
        [0, 1],
        [1, 2],
        [2, 3],
        [100, 101],
        [101, 102],
    ]


def test_load_minari_by_id_and_path_never_downloads(cartpole, datasets_path, tmp_path):
    dataset, _ = cartpole
    by_id = rlds.load_minari("cartpole/random-v0")
    assert by_id.total_steps == dataset.total_steps
    by_path = rlds.load_minari(str(datasets_path / "cartpole" / "random-v0"))
    assert by_path.total_episodes == dataset.total_episodes
    with pytest.raises(FileNotFoundError, match="never downloaded"):
        rlds.load_minari("D4RL/door/human-v2")
    with pytest.raises(FileNotFoundError, match="not a Minari dataset"):
        rlds.load_minari(str(tmp_path))


def test_observer_matches_on_online_items_only_with_observer_defaults(cartpole):
    # The online items came from TrajectoryObserver(2) with its defaults; the same observer
    # given the pushed trajectories writes the pushed items (a sanity check on the fixture).
    dataset, online = cartpole
    server = reverb.Server([table(dataset)])
    try:
        client = server.localhost_client()
        with observers.TrajectoryObserver(client, "t", 2) as observer:
            rlds.push_minari_to_reverb(dataset, observer, progress=False)
        assert client.server_info()["t"].current_size == len(online)
    finally:
        server.stop()
