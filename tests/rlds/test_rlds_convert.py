"""ostinato.rlds: specs, signature and conversion with TF-Agents' semantics."""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from rlds_fixtures import COMPLETE, SINGLE, TRUNCATED, episodes, steps  # noqa: E402

from ostinato import rlds  # noqa: E402
from ostinato.rlds import StepType, Trajectory  # noqa: E402

F, M, L = int(StepType.FIRST), int(StepType.MID), int(StepType.LAST)

EXPECT_COMPLETE = [
    (F, [1.0, 2.0], [11.0], (), M, 1.0, 1.0),
    (M, [3.0, 4.0], [21.0], (), L, 2.0, 1.0),
    (L, [5.0, 6.0], [31.0], (), F, 3.0, 0.0),  # terminal: the zero lands on the boundary
]
EXPECT_TRUNCATED = EXPECT_COMPLETE[:2] + [(L, [5.0, 6.0], [31.0], (), F, 3.0, 0.5)]
EXPECT_SINGLE = [(L, [1.0, 2.0], [11.0], (), L, 1.0, 1.0)]  # FIRST->FIRST is LAST->LAST


def as_lists(dataset):
    return [
        tuple(tf.nest.map_structure(lambda x: np.asarray(x).tolist(), tuple(t)))
        for t in dataset.as_numpy_iterator()
    ]


def test_trajectory_is_tf_agents_layout():
    assert Trajectory._fields == (
        "step_type",
        "observation",
        "action",
        "policy_info",
        "next_step_type",
        "reward",
        "discount",
    )
    t = Trajectory(np.int32(L), 0, 0, (), np.int32(F), 0.0, 1.0)
    assert t.is_boundary() and not t.is_first() and not t.is_last() and not t.is_mid()
    assert Trajectory(M, 0, 0, (), M, 0.0, 1.0).is_mid()
    assert t.replace(step_type=F).is_first()


def test_spec_and_signature():
    data = episodes(steps(*COMPLETE))
    spec = rlds.create_trajectory_data_spec(data)
    assert isinstance(spec, Trajectory)
    assert spec.step_type == tf.TensorSpec((), tf.int32, "step_type")
    assert spec.next_step_type == tf.TensorSpec((), tf.int32, "step_type")
    assert spec.observation == tf.TensorSpec((2,), tf.float32)
    assert spec.action == tf.TensorSpec((1,), tf.float32)
    assert spec.reward == tf.TensorSpec((), tf.float32)
    assert spec.policy_info == ()
    assert (spec.discount.shape, spec.discount.dtype, spec.discount.name) == (
        (),
        tf.float32,
        "discount",
    )
    assert float(spec.discount.minimum) == 0.0 and float(spec.discount.maximum) == 1.0
    sig = rlds.create_trajectory_data_signature(data)
    assert sig.observation == tf.TensorSpec((None, 2), tf.float32)
    assert sig.step_type == tf.TensorSpec((None,), tf.int32, "step_type")
    assert sig.discount.shape == (None,) and float(sig.discount.maximum) == 1.0
    assert sig.policy_info == ()


@pytest.mark.parametrize(
    "make, expected",
    [
        (lambda: episodes(steps(*COMPLETE)), EXPECT_COMPLETE),
        (lambda: episodes(steps(*TRUNCATED)), EXPECT_TRUNCATED),
        (lambda: episodes(steps(*SINGLE)), EXPECT_SINGLE),
        (lambda: episodes(steps(*SINGLE, extra_param=[True])), EXPECT_SINGLE),
        (
            lambda: episodes(steps(*COMPLETE), steps(*SINGLE), steps(*TRUNCATED)),
            EXPECT_COMPLETE + EXPECT_SINGLE + EXPECT_TRUNCATED,
        ),
        # Beyond TF-Agents: a dataset of steps (episodes already flattened).
        (lambda: steps(*COMPLETE).concatenate(steps(*SINGLE)), EXPECT_COMPLETE + EXPECT_SINGLE),
    ],
    ids=["complete", "truncated", "single", "extra_param", "multiple", "flat_steps"],
)
def test_conversion_matches_hand_computed(make, expected):
    got = as_lists(rlds.convert_rlds_to_trajectories(make()))
    assert got == [tuple(e) for e in expected]


def test_policy_info_fn_gets_current_and_next_steps():
    def fn(cur, nxt):
        return {"action": cur["action"], "next_obs": nxt["observation"]}

    got = list(
        rlds.convert_rlds_to_trajectories(episodes(steps(*COMPLETE)), fn).as_numpy_iterator()
    )
    assert [t.policy_info["action"].tolist() for t in got] == [[11.0], [21.0], [31.0]]
    # The last step's next step is the padding step: zeros.
    assert [t.policy_info["next_obs"].tolist() for t in got] == [[3.0, 4.0], [5.0, 6.0], [0.0, 0.0]]


def test_empty_data_is_empty():
    assert as_lists(rlds.convert_rlds_to_trajectories(episodes(steps(*COMPLETE)).take(0))) == []


@pytest.mark.parametrize(
    "fn",
    [
        rlds.create_trajectory_data_spec,
        rlds.create_trajectory_data_signature,
        rlds.convert_rlds_to_trajectories,
    ],
)
def test_value_error_without_steps(fn):
    with pytest.raises(ValueError, match="No dataset representing RLDS steps exist"):
        fn(tf.data.Dataset.from_tensors({"random": True}))
    bad_steps = tf.data.Dataset.from_tensors(
        {"steps": tf.data.Dataset.from_tensors({"random1": [True], "random2": [False]})}
    )
    with pytest.raises(ValueError, match=r"Invalid RLDS step spec.*found \['random1'"):
        fn(bad_steps)


def test_missing_is_last_is_a_value_error():
    data = episodes(
        tf.data.Dataset.from_tensor_slices(
            dict(
                observation=[[1.0]],
                action=[[1.0]],
                reward=[1.0],
                discount=[1.0],
                is_first=[True],
                is_terminal=[False],
            )
        )
    )
    with pytest.raises(ValueError, match=r"Invalid RLDS step spec.*'is_last'"):
        rlds.convert_rlds_to_trajectories(data)


@pytest.mark.parametrize(
    "make, message, where",
    [
        (
            lambda: episodes(steps([True, False, True], [False] * 3, [False] * 3)),
            "Mid step should not be followed by a first step.",
            "(episode 0, step 1)",
        ),
        (
            lambda: episodes(steps([True, False, False], [False] * 3, [False, False, True])),
            "Terminal step must be the last step of an episode.",
            "(episode 0, step 2)",
        ),
        (
            lambda: episodes(
                steps([True, False, False], [False, True, False], [False, True, False])
            ),
            "Last step of an episode must be followed by a first step.",
            "(episode 0, step 2)",
        ),
        # TF-Agents: "Last step of an episode must be followed by a first step." (on episode 0's
        # last pair); here on episode 1's first pair, so that episode 0 is complete.
        (
            lambda: episodes(
                steps(*COMPLETE), steps([False, False, False], [False, False, True], [False] * 3)
            ),
            "The episode does not start with is_first",
            "(episode 1, step 0)",
        ),
        # Beyond TF-Agents: the data must start with is_first.
        (
            lambda: episodes(steps([False, False, False], [False, False, True], [False] * 3)),
            "The episode does not start with is_first",
            "(episode 0, step 0)",
        ),
        (
            lambda: episodes(steps(*COMPLETE), steps([True, False], [False, False], [False] * 2)),
            "Mid step should not be followed by a first step.",
            "(episode 1, step 1)",
        ),
    ],
    ids=[
        "ending",
        "termination",
        "beginning",
        "second_episode_start",
        "data_start",
        "unended_last",
    ],
)
def test_malformed_episodes_name_episode_and_step(make, message, where):
    with pytest.raises(tf.errors.InvalidArgumentError) as err:
        list(rlds.convert_rlds_to_trajectories(make()))
    assert message in err.value.message and where in err.value.message
