"""Compares ostinato.rlds with TF-Agents' rlds_to_reverb on the same small RLDS datasets.

Run with a TF-Agents python, through ``python -m ostinato.as_reverb`` (TF-Agents imports
``reverb``)::

    /opt/tfa-venv/bin/python -m ostinato.as_reverb tests/rlds/tfa_compare.py

Prints one JSON line per case (``{"case": ..., "ok": ..., "detail": ...}``) and a final
``{"summary": ...}`` line.
"""

from __future__ import annotations

import json

import numpy as np
import tensorflow as tf
from tf_agents.replay_buffers import rlds_to_reverb as tfa
from tf_agents.specs import tensor_spec

from ostinato import rlds as ours

OBS = [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]
ACT = [[11.0], [21.0], [31.0]]


def steps(first, last, terminal, **extra):
    n = len(first)
    data = dict(
        observation=OBS[:n],
        action=ACT[:n],
        reward=[1.0, 2.0, 3.0][:n],
        discount=[1.0, 1.0, 0.5][:n],
        is_first=first,
        is_last=last,
        is_terminal=terminal,
        **extra,
    )
    return tf.data.Dataset.from_tensor_slices(data)


COMPLETE = ([True, False, False], [False, False, True], [False, False, True])
TRUNCATED = ([True, False, False], [False, False, True], [False, False, False])
SINGLE = ([True], [True], [False])
SINGLE_TERMINAL = ([True], [True], [True])


def episodes(*step_sets):
    return tf.data.Dataset.from_tensor_slices({"steps": list(step_sets)})


def nested_obs_steps():
    n = 3
    return tf.data.Dataset.from_tensor_slices(
        dict(
            observation={"a": OBS, "b": [[1], [2], [3]]},
            action=ACT,
            reward=[1.0, 2.0, 3.0],
            discount=[1.0, 1.0, 1.0],
            is_first=COMPLETE[0],
            is_last=COMPLETE[1],
            is_terminal=COMPLETE[2],
            extra=list(range(n)),
        )
    )


VALID = {
    "complete": lambda: episodes(steps(*COMPLETE)),
    "truncated": lambda: episodes(steps(*TRUNCATED)),
    "single_step": lambda: episodes(steps(*SINGLE)),
    "single_terminal": lambda: episodes(steps(*SINGLE_TERMINAL)),
    "extra_param": lambda: episodes(steps(*SINGLE, extra_param=[True])),
    "multiple": lambda: episodes(steps(*COMPLETE), steps(*SINGLE), steps(*TRUNCATED)),
    "many": lambda: episodes(
        *[steps(*c) for c in (SINGLE, COMPLETE, SINGLE_TERMINAL, TRUNCATED, COMPLETE)]
    ),
    "nested_observation": lambda: episodes(nested_obs_steps()),
    "first_first_unchecked": lambda: episodes(
        steps([True, True, False], [False, False, True], [False, False, False])
    ),
    "episode_metadata": lambda: tf.data.Dataset.from_tensor_slices(
        {"steps": [steps(*COMPLETE), steps(*SINGLE)], "id": [7, 8]}
    ),
    "empty": lambda: episodes(steps(*COMPLETE)).take(0),
}

INVALID = {
    "incorrect_ending": lambda: episodes(steps([True, False, True], [False] * 3, [False] * 3)),
    "incorrect_termination": lambda: episodes(
        steps([True, False, False], [False] * 3, [False, False, True])
    ),
    "incorrect_beginning": lambda: episodes(
        steps([True, False, False], [False, True, False], [False, True, False])
    ),
    "unended_last_episode": lambda: episodes(
        steps(*COMPLETE), steps([True, False], [False, False], [False, False])
    ),
}

EAGER = {
    "no_steps": lambda: tf.data.Dataset.from_tensors({"random": True}),
    "incorrect_step_spec": lambda: tf.data.Dataset.from_tensors(
        {
            "steps": tf.data.Dataset.from_tensors(
                {"random1": [True, True], "random2": [False, False]}
            )
        }
    ),
    "missing_is_last": lambda: tf.data.Dataset.from_tensor_slices(
        {
            "steps": [
                tf.data.Dataset.from_tensor_slices(
                    dict(
                        observation=OBS,
                        action=ACT,
                        reward=[1.0, 2.0, 3.0],
                        discount=[1.0] * 3,
                        is_first=COMPLETE[0],
                        is_terminal=COMPLETE[2],
                    )
                )
            ]
        }
    ),
}


def policy_fn(cur, nxt):
    return {"action": cur["action"], "next_reward": nxt["reward"]}


def to_lists(traj):
    return tf.nest.map_structure(lambda x: np.asarray(x).tolist(), tuple(traj))


def spec_tuple(spec):
    out = []
    for s in tf.nest.flatten(spec):
        item = [str(s.shape), s.dtype.name, s.name, type(s).__name__]
        if hasattr(s, "minimum"):
            item += [np.asarray(s.minimum).tolist(), np.asarray(s.maximum).tolist()]
        out.append(item)
    return out


def run_valid(name, make):
    results = []
    for fn_name, fn in (("none", None), ("policy_fn", policy_fn)):
        a = [to_lists(t) for t in tfa.convert_rlds_to_trajectories(make(), fn)]
        b = [to_lists(t) for t in ours.convert_rlds_to_trajectories(make(), fn)]
        results.append(
            {
                "case": f"{name}/{fn_name}",
                "ok": a == b,
                "n": len(a),
                "detail": None if a == b else {"tfa": a, "ours": b},
            }
        )
    for fn_name, fn in (("none", None), ("policy_fn", policy_fn)):
        ea = spec_tuple(tfa.convert_rlds_to_trajectories(make(), fn).element_spec)
        eb = spec_tuple(ours.convert_rlds_to_trajectories(make(), fn).element_spec)
        results.append(
            {
                "case": f"{name}/element_spec_{fn_name}",
                "ok": ea == eb,
                "detail": None if ea == eb else [ea, eb],
            }
        )
    sa = spec_tuple(tfa.create_trajectory_data_spec(make()))
    sb = spec_tuple(ours.create_trajectory_data_spec(make()))
    eq = tfa.create_trajectory_data_spec(make()) == tuple(ours.create_trajectory_data_spec(make()))
    results.append({"case": f"{name}/spec", "ok": sa == sb and eq, "detail": [sa, sb]})
    ga = spec_tuple(tensor_spec.add_outer_dim(tfa.create_trajectory_data_spec(make())))
    gb = spec_tuple(ours.create_trajectory_data_signature(make()))
    results.append({"case": f"{name}/signature", "ok": ga == gb, "detail": [ga, gb]})
    return results


def error_of(fn):
    try:
        list(fn())
    except (ValueError, tf.errors.InvalidArgumentError) as e:
        return type(e).__name__, getattr(e, "message", str(e))
    return None, None


def run_invalid(name, make, eager):
    out = []
    cases = [("convert", lambda mod: lambda: mod.convert_rlds_to_trajectories(make()))]
    if eager:
        cases.append(("spec", lambda mod: lambda: [mod.create_trajectory_data_spec(make())]))
    for what, call in cases:
        ta, ma = error_of(call(tfa))
        tb, mb = error_of(call(ours))
        # Same error type; TF-Agents' message is contained in ours (ours adds where).
        core = ma.split("assertion failed: [")[-1].split("]")[0] if ma else None
        same = ma == mb if ta == "ValueError" else core in mb
        ok = ta == tb and ta is not None and same
        out.append(
            {
                "case": f"{name}/{what}",
                "ok": ok,
                "detail": {"tfa": [ta, core], "ours": [tb, mb[-200:] if mb else mb]},
            }
        )
    return out


def drain(client):
    out = []
    for _ in range(client.server_info()["t"].current_size):
        batch = client.sample_batch("t", 1)
        out.append([np.asarray(x[0]).tolist() for x in tf.nest.flatten(batch.data)])
    return out


def run_push(name, make):
    """TF-Agents' push through TF-Agents' observer vs ours through Ostinato's: same items."""
    from tf_agents.replay_buffers import reverb_utils

    import ostinato as reverb
    from ostinato import observers

    results = []
    configs = {
        "traj2": (
            lambda c: reverb_utils.ReverbAddTrajectoryObserver(c, "t", 2),
            lambda c: observers.TrajectoryObserver(c, "t", 2),
        ),
        "traj3_pad": (
            lambda c: reverb_utils.ReverbAddTrajectoryObserver(c, "t", 3, pad_end_of_episodes=True),
            lambda c: observers.TrajectoryObserver(c, "t", 3, pad_end_of_episodes=True),
        ),
        "episode": (
            lambda c: reverb_utils.ReverbAddEpisodeObserver(c, "t", 10),
            lambda c: observers.EpisodeObserver(c, "t", 10),
        ),
    }
    signature = tensor_spec.add_outer_dim(tfa.create_trajectory_data_spec(make()))
    for config, (theirs, mine) in configs.items():
        got = []
        for push, observer in ((tfa.push_rlds_to_reverb, theirs), (ours.push_rlds_to_reverb, mine)):
            server = reverb.Server([reverb.Table.queue("t", 1000, signature=signature)])
            client = reverb.Client(f"localhost:{server.port}")
            obs = observer(client)
            count = push(make(), obs)
            obs.flush()
            got.append((count, drain(client)))
            server.stop()
        ok = got[0] == got[1]
        results.append(
            {
                "case": f"{name}/push_{config}",
                "ok": ok,
                "n": got[0][0],
                "items": len(got[0][1]),
                "detail": None if ok else got,
            }
        )
    return results


def run_types():
    """Ours gives TF-Agents' own Trajectory class where tf-agents is installed."""
    from tf_agents.trajectories import trajectory as tfa_trajectory

    cls = tfa_trajectory.Trajectory
    make = VALID["multiple"]
    results = [
        {"case": "types/spec", "ok": isinstance(ours.create_trajectory_data_spec(make()), cls)},
        {
            "case": "types/signature",
            "ok": isinstance(ours.create_trajectory_data_signature(make()), cls),
        },
        {
            "case": "types/convert",
            "ok": all(isinstance(t, cls) for t in ours.convert_rlds_to_trajectories(make())),
        },
    ]
    for name, fn in (("push_columns", None), ("push_elements", policy_fn)):
        seen = []
        ours.push_rlds_to_reverb(make(), seen.append, fn, progress=False)
        results.append(
            {
                "case": f"types/{name}",
                "ok": len(seen) == 7 and all(isinstance(t, cls) for t in seen),
            }
        )
    return results


def main():
    results = run_types()
    for name in ("complete", "truncated", "single_step", "multiple", "many"):
        results += run_push(name, VALID[name])
    for name, make in VALID.items():
        results += run_valid(name, make)
    for name, make in INVALID.items():
        results += run_invalid(name, make, eager=False)
    for name, make in EAGER.items():
        results += run_invalid(name, make, eager=True)
    for r in results:
        print(json.dumps(r, default=str))
    bad = [r["case"] for r in results if not r["ok"]]
    print(json.dumps({"summary": {"cases": len(results), "failed": bad}}))


if __name__ == "__main__":
    main()
