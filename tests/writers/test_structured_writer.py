"""StructuredWriter, its configs and PatternDataset (Reverb's ``reverb.structured_writer``).

The patterns RLDS and Acme build (N-step transitions, overlapping windows with a period,
episode-end remainders, SARS pairs) must create exactly the items (data, dtype, priority,
table) that a hand-written TrajectoryWriter loop creates; random window patterns must match a
plain Python list model; configs that cannot work are refused when the writer is made, with a
message naming the config's position and field.

Verified against dm-reverb 0.14 (/opt/reverb-venv): 59 scenarios were run both ways (the same
script importing ``reverb`` or ``ostinato as reverb``, an embedded server with Queue tables,
every item sampled back and compared: data, order and priority) and all matched. They covered:
squeezed steps, windows ``[-3:]``, ``[-3:-1]``, ``[-3:0]``, strides ``[-5::2]``,
``[-6:-1:2]``, too little history (no item); ``step_index`` with ==, !=, <, <=, >, >=, and
``% m ==/!=``; ``steps_since_applied`` (not reset by a failed build, carried over episodes,
incremented once per step); ``Condition.data`` (==, !=, >=, % with C's sign rule for negative
values, bool columns, shape-[1] columns, a column no pattern reads, ``None`` -> false even when
inverted); steps where every read column is ``None`` (no config tried, not counted); ``None``
inside a window (no item); partial steps (Acme's add_first/add: items made as soon as the open
step holds what the pattern reads, once per step); ``is_end_episode`` items, empty episodes,
``end_episode(clear_buffers=False)`` (windows across episodes, ``step_index`` restarts, a second
``end_episode`` makes nothing new), an open partial step at ``end_episode``; several configs and
tables (round robin); TD-error priorities (slices, squeezed, column read twice -> last node,
stride, ints); constant and negative priorities; scalar and list steps. Validation messages were
compared case by case (Reverb's text, with the field's path added: ``flat[1].start``).

Deliberate differences, each a place where dm-reverb fails silently or crashes (tests below):
``x[:-2]`` (Reverb stored it as ``x[-2]``), ``% m`` followed by >=/</... (Reverb dropped the
modulo) and ``% 0 ==`` (Reverb made it ``==``) are refused; a TD-error column that is not in
the item (Reverb: priority 0) and weights outside [0, 1] are refused; unknown tables are refused
at construction (Reverb: at the first item); a pattern reading a column the step lacks raises at
the first append (Reverb: never an item); ``Condition.data`` on a float or non-scalar column
raises (Reverb: logged an error per step, never an item); ``infer_signature`` gives strided
slices their real length (Reverb: ``[-5::2]`` -> 2); PatternDataset does not require every
config to have the history of the longest config before it (Reverb: output depended on the
configs' order) and does not modify the configs.
"""

from __future__ import annotations

import collections
import pickle

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ostinato as reverb
from ostinato import structured_writer as sw
from ostinato.writers.structured_writer import StructuredWriter

C = sw.Condition
STEP = {"obs": None, "action": None, "reward": None, "discount": None}


def _episode(rng: np.random.Generator, length: int, base: int = 0) -> list[dict]:
    return [
        {
            "obs": rng.standard_normal(3).astype(np.float32) + base + t,
            "action": np.int32(base + t),
            "reward": np.float32(rng.standard_normal()),
            "discount": np.float32(0.9),
        }
        for t in range(length)
    ]


def _episodes(rng: np.random.Generator, lengths: list[int]) -> list[list[dict]]:
    return [_episode(rng, n, 100 * i) for i, n in enumerate(lengths)]


def _drain(client: reverb.Client, table: str) -> list[tuple[float, list[np.ndarray]]]:
    n = client.server_info()[table].current_size
    if not n:
        return []
    return [
        (float(s.info.priority), [np.asarray(c) for c in s.data])
        for s in client.sample(table, n, emit_timesteps=False)
    ]


def _assert_same_items(got: list, want: list) -> None:
    assert len(got) == len(want), (len(got), len(want))
    for i, ((gp, gcols), (wp, wcols)) in enumerate(zip(got, want)):
        assert gp == wp, (i, gp, wp)
        assert len(gcols) == len(wcols), i
        for g, w in zip(gcols, wcols):
            assert g.dtype == w.dtype and g.shape == w.shape, (i, g, w)
            np.testing.assert_array_equal(g, w)


@pytest.fixture()
def two_servers(make_server):
    """(structured client, reference client): identical Queue tables on two servers."""

    def tables():
        return [reverb.Table.queue("replay", 100_000), reverb.Table.queue("other", 100_000)]

    return (
        reverb.Client(f"localhost:{make_server(*tables()).port}"),
        reverb.Client(f"localhost:{make_server(*tables()).port}"),
    )


def _write_structured(client, configs, episodes, clear_buffers=True):
    with client.structured_writer(configs) as writer:
        for ep in episodes:
            for step in ep:
                writer.append(step)
            writer.end_episode(clear_buffers=clear_buffers)


# -- (a) RLDS/Acme patterns == hand-written trajectory-writer loops --------------------------------


@pytest.mark.parametrize("n", [1, 2, 3])
def test_n_step_transitions_match_trajectory_writer(two_servers, rng, n):
    """Acme's create_n_step_transition_config pattern, with a TD-error priority."""
    structured, reference = two_servers
    episodes = _episodes(rng, [7, 1, n, n + 1, 5])

    def transition(step):
        return {
            "obs": step["obs"][-(n + 1) : -n],
            "first_last_obs": step["obs"][-(n + 1) :: n],
            "reward": step["reward"][-(n + 1) : -1],
            "discount": step["discount"][-(n + 1) : -1],
            "action": step["action"][-(n + 1)],
        }

    priority = sw.td_error(0.9, STEP, lambda s: s["reward"])
    config = sw.create_config(
        sw.pattern_from_transform(STEP, transition),
        "replay",
        conditions=[C.step_index() >= n],
        priority=priority,
    )
    _write_structured(structured, [config], episodes)

    with reference.trajectory_writer(num_keep_alive_refs=n + 1) as w:
        for ep in episodes:
            for step in ep:
                w.append(step)
                if w.episode_steps > n:
                    h = w.history
                    rewards = np.abs(
                        np.array(
                            [s["reward"] for s in ep[: w.episode_steps]][-(n + 1) : -1], np.float64
                        )
                    )
                    prio = float(0.9 * rewards.max() + (1 - 0.9) * rewards.mean())
                    w.create_item(
                        "replay",
                        prio,
                        {
                            "obs": h["obs"][-(n + 1) : -n],
                            "first_last_obs": h["obs"][-(n + 1) :: n],
                            "reward": h["reward"][-(n + 1) : -1],
                            "discount": h["discount"][-(n + 1) : -1],
                            "action": h["action"][-(n + 1)],
                        },
                    )
            w.end_episode()
    want = _drain(reference, "replay")
    assert len(want) == sum(max(0, len(ep) - n) for ep in episodes)
    _assert_same_items(_drain(structured, "replay"), want)


def _sequence_configs(length: int, period: int, table: str = "replay") -> list[sw.Config]:
    """Acme's create_sequence_config with EndBehavior.TRUNCATE (overlapping windows)."""

    def last(k):
        return sw.pattern_from_transform(STEP, lambda s: {key: s[key][-k:] for key in s})

    target = (length - 1) % period
    configs = [
        sw.create_config(
            last(length),
            table,
            conditions=[C.step_index() >= length - 1, C.step_index() % period == target],
        )
    ]
    for x in range(period):
        if x != target:
            configs.append(
                sw.create_config(
                    last(length - (target - x) % period),
                    table,
                    conditions=[
                        C.is_end_episode(),
                        C.step_index() % period == x,
                        C.step_index() >= length,
                    ],
                )
            )
    for x in range(1, length):
        configs.append(
            sw.create_config(
                last(x), table, conditions=[C.is_end_episode(), C.step_index() == x - 1]
            )
        )
    return configs


@pytest.mark.parametrize("length,period", [(3, 1), (4, 2), (5, 3), (3, 3), (6, 4)])
def test_overlapping_windows_match_trajectory_writer(two_servers, rng, length, period):
    structured, reference = two_servers
    episodes = _episodes(rng, [1, 2, length, length + 1, 9, 12])
    _write_structured(structured, _sequence_configs(length, period), episodes)

    keys = sorted(STEP)
    with reference.trajectory_writer(num_keep_alive_refs=length) as w:
        for ep in episodes:
            last_end = None
            for t, step in enumerate(ep):
                w.append(step)
                if t >= length - 1 and (t - (length - 1)) % period == 0:
                    w.create_item("replay", 1.0, {k: w.history[k][-length:] for k in keys})
                    last_end = t
            end = len(ep) - 1
            if len(ep) < length:
                w.create_item("replay", 1.0, {k: w.history[k][:] for k in keys})
            elif end != last_end and end >= length:
                pad = ((length - 1) % period - end % period) % period
                w.create_item("replay", 1.0, {k: w.history[k][-(length - pad) :] for k in keys})
            w.end_episode()
    _assert_same_items(_drain(structured, "replay"), _drain(reference, "replay"))


def test_episode_end_items_match_trajectory_writer(two_servers, rng):
    """The newest (up to) 3 steps of each episode into one table, every step into another."""
    structured, reference = two_servers
    episodes = _episodes(rng, [5, 1, 2, 3, 0, 4])
    ref = sw.create_reference_step(STEP)
    configs = [
        sw.create_config(
            {"obs": ref["obs"][-3:], "reward": ref["reward"][-3:]},
            "other",
            conditions=[C.is_end_episode(), C.step_index() >= 2],
            priority=sw.constant_priority_fn(2.0),
        )
    ]
    configs += [
        sw.create_config(
            {"obs": ref["obs"][-k:], "reward": ref["reward"][-k:]},
            "other",
            conditions=[C.is_end_episode(), C.step_index() == k - 1],
            priority=sw.constant_priority_fn(2.0),
        )
        for k in (1, 2)
    ]
    configs.append(sw.create_config(ref["action"][-1], "replay"))
    _write_structured(structured, configs, episodes)

    with reference.trajectory_writer(num_keep_alive_refs=3) as w:
        for ep in episodes:
            for step in ep:
                w.append(step)
                w.create_item("replay", 1.0, w.history["action"][-1])
            if ep:
                k = min(3, len(ep))
                w.create_item(
                    "other", 2.0, {"obs": w.history["obs"][-k:], "reward": w.history["reward"][-k:]}
                )
            w.end_episode()
    for table in ("replay", "other"):
        _assert_same_items(_drain(structured, table), _drain(reference, table))


def test_rlds_sars_pairs_across_episodes_match_trajectory_writer(two_servers, rng):
    """RLDS's SARS pattern (x[-2], x[-1]); with clear_buffers=False pairs span episodes."""
    structured, reference = two_servers
    episodes = _episodes(rng, [3, 1, 4])

    def sars(step):
        return {
            "obs": step["obs"][-2],
            "action": step["action"][-2],
            "reward": step["reward"][-2],
            "next_obs": step["obs"][-1],
        }

    config = sw.create_config(sw.pattern_from_transform(STEP, sars), "replay")
    _write_structured(structured, [config], episodes, clear_buffers=False)
    with reference.trajectory_writer(num_keep_alive_refs=2) as w:
        appended = 0
        for ep in episodes:
            for step in ep:
                w.append(step)
                appended += 1
                if appended >= 2:
                    h = w.history
                    w.create_item(
                        "replay",
                        1.0,
                        {
                            "obs": h["obs"][-2],
                            "action": h["action"][-2],
                            "reward": h["reward"][-2],
                            "next_obs": h["obs"][-1],
                        },
                    )
            w.end_episode(clear_buffers=False)
    want = _drain(reference, "replay")
    assert len(want) == 7
    _assert_same_items(_drain(structured, "replay"), want)


# -- (c) random window patterns against a list model -----------------------------------------------

NODE = st.one_of(
    st.integers(-5, -1).map(lambda k: ("squeeze", k)),
    st.tuples(st.integers(-6, -1), st.integers(-5, 0), st.one_of(st.none(), st.integers(1, 3)))
    .filter(lambda t: t[1] == 0 or t[0] < t[1])
    .map(lambda t: ("slice", *t)),
)


def _age(node):
    return -node[1]


@settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    nodes=st.lists(st.tuples(st.sampled_from(["a", "b"]), NODE), min_size=1, max_size=3),
    mod=st.integers(1, 3),
    rem=st.integers(0, 2),
    at_end=st.booleans(),
    lengths=st.lists(st.integers(0, 9), min_size=1, max_size=3),
)
def test_random_window_patterns_match_list_model(make_server, nodes, mod, rem, at_end, lengths):
    rem %= mod
    server = getattr(test_random_window_patterns_match_list_model, "_server", None)
    if server is None or server.stopped:
        server = make_server(reverb.Table.queue("q", 100_000))
        test_random_window_patterns_match_list_model._server = server
    client = server.localhost_client()
    client.reset("q")
    ref = sw.create_reference_step({"a": None, "b": None})
    pattern = [
        ref[col][k[0]] if kind == "squeeze" else ref[col][slice(*k)] for col, (kind, *k) in nodes
    ]
    conditions = [C.step_index() % mod == rem] + ([C.is_end_episode()] if at_end else [])
    config = sw.create_config(pattern, "q", conditions=conditions)
    data = [
        [{"a": np.int64(1000 * e + t), "b": np.float32(-t)} for t in range(n)]
        for e, n in enumerate(lengths)
    ]
    _write_structured(client, [config], data)

    want = []
    age = max(_age(n) for _, n in nodes)
    for ep in data:
        steps = range(len(ep) - 1, len(ep)) if at_end else range(len(ep))
        for t in steps:
            if t < 0 or t + 1 < age or t % mod != rem:
                continue
            history = ep[: t + 1]
            cols = []
            for col, (kind, *k) in nodes:
                if kind == "squeeze":
                    cols.append(np.asarray(history[k[0]][col]))
                else:
                    start, stop, step = k
                    cols.append(np.stack([s[col] for s in history[start : stop or None : step]]))
            want.append((1.0, cols))
    _assert_same_items(_drain(client, "q"), want)


# -- (d) client.structured_writer embedded and over gRPC -------------------------------------------


@pytest.mark.parametrize("in_process", [None, False], ids=["embedded", "grpc"])
def test_client_structured_writer_embedded_and_grpc(make_server, in_process):
    server = make_server(
        reverb.Table.queue("q", 1000),
        reverb.Table(
            "sig",
            reverb.selectors.Fifo(),
            reverb.selectors.Fifo(),
            1000,
            reverb.rate_limiters.MinSize(1),
            signature={
                "pair": reverb.TensorSpec([2, 3], np.float32),
                "a": reverb.TensorSpec([], np.int64),
            },
        ),
    )
    client = reverb.Client(f"localhost:{server.port}", in_process=in_process)
    ref = sw.create_reference_step({"obs": None, "a": None})
    configs = [
        sw.create_config({"pair": ref["obs"][-2:], "a": ref["a"][-1]}, "q"),
        sw.create_config(
            {"pair": ref["obs"][-2:], "a": ref["a"][-1]}, "sig", conditions=[C.is_end_episode()]
        ),
    ]
    writer = client.structured_writer(configs)
    assert isinstance(writer, StructuredWriter)
    for t in range(4):
        writer.append({"obs": np.full(3, t, np.float32), "a": t})
    writer.end_episode()
    writer.flush()
    items = _drain(client, "q")
    assert [int(c[0]) for _, c in items] == [1, 2, 3]  # flat columns: "a", then "pair"
    np.testing.assert_array_equal(items[0][1][1], [[0] * 3, [1] * 3])
    sample = next(client.sample("sig", emit_timesteps=False, unpack_as_table_signature=True))
    np.testing.assert_array_equal(sample.data["pair"], [[2] * 3, [3] * 3])
    assert int(sample.data["a"]) == 3
    writer.close()
    client.close()


# -- (b) configs that cannot work are refused at construction --------------------------------------

R = sw.create_reference_step({"a": None, "b": None})
PN, CP = sw.PatternNode, sw.ConditionProto


@pytest.mark.parametrize(
    "configs,error,match",
    [
        ([], ValueError, r"^At least one config must be provided\.$"),
        ([sw.create_config([], "t")], ValueError, r"position 0: `flat` must not be empty"),
        (
            [sw.create_config([R["a"][-1]], "")],
            ValueError,
            r"position 0: `table` must not be empty",
        ),
        (
            [sw.create_config([R["a"][-1]], "nope")],
            reverb.errors.TableNotFoundError,
            r"position 0: `table` \('nope'\) is not a table of the server\. Available tables: t\.",
        ),
        (
            [sw.create_config([R["a"][-1], R["a"][0:]], "t")],
            ValueError,
            r"position 0: `flat\[1\]\.start` must be < 0 but got 0\.",
        ),
        (
            [sw.create_config([R["a"][-2:1]], "t")],
            ValueError,
            r"`flat\[0\]\.stop` must be <= 0 but got 1",
        ),
        (
            [sw.create_config([R["a"][1]], "t")],
            ValueError,
            r"`flat\[0\]\.stop` must be <= 0 but got 1",
        ),
        (
            [sw.create_config([R["a"][0]], "t")],
            ValueError,
            r"`flat\[0\]\.stop` must be < 0 when `start` isn't set but got 0",
        ),
        (
            [sw.create_config([R["a"][-1:-2]], "t")],
            ValueError,
            r"`flat\[0\]\.stop` \(-2\) must be > `flat\[0\]\.start` \(-1\)",
        ),
        (
            [sw.create_config([R["a"][-3::-1]], "t")],
            ValueError,
            r"`flat\[0\]\.step` must be > 0 but got -1",
        ),
        (
            [sw.create_config([R["a"][-3::0]], "t")],
            ValueError,
            r"`flat\[0\]\.step` must be > 0 but got 0",
        ),
        (
            [sw.create_config([PN(0, stop=-1, step=2)], "t")],
            ValueError,
            r"`flat\[0\]\.step` must only be set when `start` is set",
        ),
        (
            [sw.create_config([PN(0)], "t")],
            ValueError,
            r"`flat\[0\]`: At least one of `start` and `stop` must be specified",
        ),
        (
            [sw.create_config([PN(-1, stop=-1)], "t")],
            ValueError,
            r"`flat\[0\]\.flat_source_index` must be >= 0 but got -1",
        ),
        (
            [
                sw.create_config([R["a"][-1]], "t"),
                sw.create_config([R["a"][-1]], "t", conditions=[C.step_index() % -2 == 0]),
            ],
            ValueError,
            r"position 1: `conditions\[0\]\.mod_eq\.mod` must be > 0 but got -2",
        ),
        (
            [sw.create_config([R["a"][-1]], "t", conditions=[C.step_index() % 0 == 1])],
            ValueError,
            r"`conditions\[0\]\.mod_eq\.mod` must be > 0 but got 0",
        ),
        (
            [sw.create_config([R["a"][-1]], "t", conditions=[C.step_index() % 2 == -1])],
            ValueError,
            r"`conditions\[0\]\.mod_eq\.eq` must be >= 0 but got -1",
        ),
        (
            [sw.create_config([R["a"][-1]], "t", conditions=[CP(eq=1)])],
            ValueError,
            r"`conditions\[0\]`: Conditions must specify a value for `left`",
        ),
        (
            [sw.create_config([R["a"][-1]], "t", conditions=[CP(step_index=True)])],
            ValueError,
            r"`conditions\[0\]`: Conditions must specify a value for `cmp`",
        ),
        (
            [
                sw.create_config(
                    [R["a"][-1]],
                    "t",
                    conditions=[C.step_index() >= 0, CP(is_end_episode=True, eq=1, inverse=True)],
                )
            ],
            ValueError,
            r"`conditions\[1\]`: Condition must use `eq=1` when using `is_end_episode`",
        ),
        (
            [sw.create_config([R["a"][-1]], "t", conditions=[CP(flat_source_index=-1, eq=1)])],
            ValueError,
            r"`conditions\[0\]\.flat_source_index` must be >= 0 but got -1",
        ),
        (
            [sw.create_config([R["a"][-1]], "t", conditions=[C.step_index()])],
            TypeError,
            r"`conditions\[0\]` is an incomplete condition on `step_index`",
        ),
        (
            [
                sw.create_config(
                    [R["a"][-1]], "t", priority=sw.td_error(0.5, {"a": 0, "b": 0}, lambda s: s["b"])
                )
            ],
            ValueError,
            r"`priority\.td_error\.flat_source_index` \(1\) must be a column of the item",
        ),
        (
            [
                sw.create_config(
                    [R["b"][-1]], "t", priority=sw.td_error(1.5, {"a": 0, "b": 0}, lambda s: s["b"])
                )
            ],
            ValueError,
            r"`priority\.td_error\.max_priority_weight` must be in \[0, 1\] but got 1\.5",
        ),
        (
            [sw.create_config([R["a"][-1]], "t", priority=sw.constant_priority_fn(float("nan")))],
            ValueError,
            r"`priority\.constant_fn\.value` must not be NaN",
        ),
        ([sw.Config(flat=[R["a"][-1]], table="t")], ValueError, r"`priority` must be set"),
    ],
)
def test_invalid_configs_are_refused_at_construction(make_server, configs, error, match):
    client = make_server(reverb.Table.queue("t", 10)).localhost_client()
    with pytest.raises(error, match=match):
        client.structured_writer(configs)


def test_patterns_reverb_got_silently_wrong_are_refused_when_built():
    with pytest.raises(ValueError, match=r"negative start.*got x\[:-2\]"):
        R["a"][:-2]  # Reverb stored this as R["a"][-2], a single squeezed step
    with pytest.raises(ValueError, match=r"got x\[:\]"):
        R["a"][:]
    with pytest.raises(ValueError, match="Key must be int or slice"):
        R["a"][1.5]
    with pytest.raises(TypeError, match="Only == and != may follow %"):
        _ = C.step_index() % 3 >= 1  # Reverb dropped the modulo: step_index >= 1
    with pytest.raises(TypeError, match="compare with ints"):
        _ = C.step_index() == 1.5
    with pytest.raises(TypeError, match="must be a column of the reference step"):
        sw.create_config({"x": R["a"][-1], "y": None}, "t")


def test_reading_a_missing_column_raises_at_first_append(make_server):
    client = make_server(reverb.Table.queue("t", 10)).localhost_client()
    ref = sw.create_reference_step({"a": None, "b": None, "c": None})
    writer = client.structured_writer([sw.create_config([ref["a"][-1], ref["c"][-1]], "t")])
    with pytest.raises(
        ValueError,
        match=r"`flat\[1\]\.flat_source_index` \(2\) is out of range: "
        r"the appended step has 2 columns",
    ):
        writer.append({"a": 1, "b": 2})  # Reverb never created an item, without a word
    data = C.data({"a": None, "b": None, "c": None})
    writer = client.structured_writer(
        [sw.create_config([ref["a"][-1]], "t", conditions=[data["c"] == 1])]
    )
    with pytest.raises(ValueError, match=r"`conditions\[0\]\.flat_source_index` \(2\)"):
        writer.append({"a": 1, "b": 2})


@pytest.mark.parametrize("value", [np.float32(1), np.int32([1, 1])])
def test_data_condition_on_a_column_that_is_not_one_int_raises(make_server, value):
    client = make_server(reverb.Table.queue("t", 10)).localhost_client()
    data = C.data({"a": None, "c": None})
    config = sw.create_config([R["a"][-1]], "t", conditions=[data["c"] == 1])
    writer = client.structured_writer([config])
    with pytest.raises(
        ValueError,
        match=r"configs\[0\]\.conditions\[0\] \(Condition\.data\) reads "
        r"column 1 \(path \('c',\)\), which must hold one integer",
    ):
        writer.append({"a": 1, "c": value})  # Reverb logged an error and never created items


def test_append_errors(make_server):
    client = make_server(reverb.Table.queue("t", 10)).localhost_client()
    ref = sw.create_reference_step({"a": None, "b": None})
    writer = client.structured_writer([sw.create_config([ref["a"][-1]], "t")])
    writer.append({"a": 1, "b": 2})
    with pytest.raises(
        ValueError, match=r"Flattened data has an unexpected length, got 1 but wanted 2"
    ):
        writer.append({"a": 1})
    with pytest.raises(ValueError, match=r"wrong dtype provided for column \('a',\)"):
        writer.append({"a": 1.5, "b": 2})
    writer.append({"a": None, "b": 2}, partial_step=True)
    writer.append({"a": 3, "b": 7})  # b is read by no config, so it is not stored at all
    writer.append({"a": 4, "b": None}, partial_step=True)
    with pytest.raises(ValueError, match=r"already been set in the active step"):
        writer.append({"a": 5, "b": None})


# -- semantics -------------------------------------------------------------------------------------


def _run(client, configs, steps, table="t"):
    """Appends ``steps`` ('END', 'KEEP' = end_episode(clear_buffers=False), (step, 'P') =
    partial); returns the items' columns as Python lists."""
    client.reset(table)
    writer = client.structured_writer(configs)
    for s in steps:
        if s == "END":
            writer.end_episode()
        elif s == "KEEP":
            writer.end_episode(clear_buffers=False)
        elif isinstance(s, tuple):
            writer.append(s[0], partial_step=True)
        else:
            writer.append(s)
    writer.flush()
    return [[np.asarray(c).tolist() for c in cols] for _, cols in _drain(client, table)]


def _s(i, **over):
    step = {"a": np.int32(i), "b": np.int32(10 * i)}
    step.update(over)
    return step


@pytest.fixture()
def client(make_server):
    return make_server(reverb.Table.queue("t", 1000)).localhost_client()


def test_conditions(client):
    steps = [_s(i) for i in range(7)]
    one = [R["a"][-1]]
    assert _run(client, [sw.create_config(one, "t", [C.step_index() % 3 != 1])], steps) == [
        [0],
        [2],
        [3],
        [5],
        [6],
    ]
    assert _run(
        client, [sw.create_config(one, "t", [C.step_index() > 2, C.step_index() <= 4])], steps
    ) == [[3], [4]]
    assert _run(client, [sw.create_config(one, "t", [C.step_index() < 2])], steps) == [[0], [1]]
    # steps_since_applied: a config that cannot build yet keeps counting.
    assert _run(
        client, [sw.create_config([R["a"][-3:]], "t", [C.steps_since_applied() >= 2])], steps
    ) == [[[0, 1, 2]], [[2, 3, 4]], [[4, 5, 6]]]
    # It carries over episodes; end_episode does not count a step.
    assert _run(
        client,
        [sw.create_config(one, "t", [C.steps_since_applied() >= 3])],
        [_s(0), _s(1), "END", _s(0), _s(1), _s(2), "END"],
    ) == [[0]]
    # A step where every column the configs read is None is not a step for them.
    assert _run(
        client,
        [sw.create_config(one, "t", [C.steps_since_applied() >= 2])],
        [_s(0), _s(1), _s(2, a=None), _s(3), _s(4)],
    ) == [[1], [4]]
    data = C.data({"a": None, "b": None})
    assert _run(client, [sw.create_config(one, "t", [data["b"] % 20 == 0])], steps) == [
        [0],
        [2],
        [4],
        [6],
    ]
    # C's remainder for negative values (-2 % 4 == -2), as Reverb.
    assert _run(
        client,
        [sw.create_config(one, "t", [data["b"] % 4 == 2])],
        [_s(i, b=np.int32(i - 4)) for i in range(8)],
    ) == [[6]]
    # No value in the newest step: false, even inverted.
    assert _run(
        client, [sw.create_config(one, "t", [data["b"] != 0])], [_s(0), _s(1, b=None), _s(2)]
    ) == [[2]]


def test_partial_steps_and_step_is_open(client):
    """Acme's StructuredAdder: the observation opens a step, the action closes it."""
    writer = client.structured_writer([sw.create_config([R["a"][-1], R["b"][-1]], "t")])
    assert not writer.step_is_open
    writer.append({"a": 0, "b": None}, partial_step=True)
    assert writer.step_is_open
    writer.append({"a": None, "b": 10})
    assert not writer.step_is_open
    writer.append({"a": 1, "b": None}, partial_step=True)
    writer.end_episode()  # closes the open step; the item misses b, so none is made
    assert not writer.step_is_open
    writer.flush()
    assert [[c.tolist() for c in cols] for _, cols in _drain(client, "t")] == [[0, 10]]
    # A pattern reading only what the partial append gave creates its item at once, once.
    steps = []
    for i in range(3):
        steps += [(_s(i, b=None), "P"), _s(i, a=None)]
    assert _run(client, [sw.create_config([R["a"][-1]], "t")], steps) == [[0], [1], [2]]
    assert _run(
        client, [sw.create_config([R["b"][-1]], "t", [C.steps_since_applied() >= 2])], steps
    ) == [[10]]


def test_end_episode_and_history_across_episodes(client):
    end2 = sw.create_config([R["a"][-2:]], "t", [C.is_end_episode()])
    assert _run(
        client, [end2], [_s(0), _s(1), _s(2), "END", _s(0), "END", "END", _s(3), _s(4), "END"]
    ) == [[[1, 2]], [[3, 4]]]
    assert _run(client, [end2], [_s(0), _s(1), "KEEP", _s(2), "KEEP", "KEEP", _s(3), "END"]) == [
        [[0, 1]],
        [[1, 2]],
        [[2, 3]],
    ]
    first = sw.create_config([R["a"][-1]], "t", [C.step_index() == 0])
    assert _run(client, [first], [_s(0), _s(1), "KEEP", _s(2), _s(3), "END", _s(4)]) == [
        [0],
        [2],
        [4],
    ]


def test_td_error_and_constant_priorities(client):
    tds = [0.5, -2.0, 1.0, -0.25, 3.0]
    ref = sw.create_reference_step({"a": None, "td": None})
    td = sw.td_error(0.5, {"a": None, "td": None}, lambda s: s["td"])
    writer = client.structured_writer(
        [
            sw.create_config([ref["a"][-1], ref["td"][-3:]], "t", priority=td),
            sw.create_config(
                ref["a"][-1], "t", [C.step_index() == 0], priority=sw.constant_priority_fn(2.5)
            ),
        ]
    )
    for i, x in enumerate(tds):
        writer.append({"a": i, "td": np.float32(x)})
    writer.flush()
    prios = [p for p, _ in _drain(client, "t")]
    want = [
        0.5 * max(map(abs, w)) + 0.5 * np.mean(np.abs(w)) for w in (tds[0:3], tds[1:4], tds[2:5])
    ]
    assert prios[0] == 2.5
    np.testing.assert_allclose(prios[1:], want)


def test_td_error_column_must_be_one_number_per_step(client):
    ref = sw.create_reference_step({"td": None})
    writer = client.structured_writer(
        [
            sw.create_config(
                ref["td"][-2:], "t", priority=sw.td_error(0.5, {"td": None}, lambda s: s["td"])
            )
        ]
    )
    writer.append({"td": np.zeros(2, np.float32)})
    with pytest.raises(ValueError, match=r"TD error priority reads column 0 \(path \('td',\)\)"):
        writer.append({"td": np.zeros(2, np.float32)})


def test_nested_steps_namedtuples_and_unused_columns(client):
    Step = collections.namedtuple("Step", ["obs", "extras"])
    spec = Step(obs={"x": None, "y": None}, extras=(None, None))
    ref = sw.create_reference_step(spec)
    config = sw.create_config({"y": ref.obs["y"][-2:], "e": ref.extras[1][-1]}, "t")
    writer = client.structured_writer([config])
    for i in range(3):
        writer.append(Step({"x": np.zeros(1000), "y": np.int8(i)}, (i, np.float64(i / 2))))
    writer.flush()
    assert "columns=2" in repr(writer)  # obs.x and extras[0] are read by no config: not stored
    assert [[c.tolist() for c in cols] for _, cols in _drain(client, "t")] == [
        [0.5, [0, 1]],
        [1.0, [1, 2]],
    ]
    signature = sw.infer_signature(
        [config],
        Step(
            obs={"x": reverb.TensorSpec([1000], np.float64), "y": reverb.TensorSpec([], np.int8)},
            extras=(reverb.TensorSpec([], np.int64), reverb.TensorSpec([], np.float64)),
        ),
    )
    assert signature == {
        "y": reverb.TensorSpec([2], np.int8, "y"),
        "e": reverb.TensorSpec([], np.float64, "e"),
    }


# -- configs, builders, signatures -----------------------------------------------------------------


def test_config_fields_read_like_reverbs_protos():
    config = sw.create_config(
        {"x": R["a"][-3:-1:2], "y": R["b"][-1]},
        "t",
        conditions=[
            C.step_index() % 2 != 1,
            C.is_end_episode(),
            C.data({"a": 0, "b": 0})["b"] <= 3,
        ],
    )
    x, y = config.flat
    assert (x.flat_source_index, x.start, x.stop, x.step) == (0, -3, -1, 2)
    assert (y.flat_source_index, y.start, y.stop, y.step) == (1, 0, -1, 0)  # unset reads 0
    assert not y.HasField("start") and y.HasField("stop") and x.HasField("step")
    assert config.table == "t" and config.HasField("pattern_structure")
    assert config.priority.constant_fn.value == 1.0
    assert config.priority.WhichOneof("priority_fn") == "constant_fn"
    mod, end, data = config.conditions
    assert mod.step_index and mod.mod_eq == sw.ModuloEq(2, 1) and mod.inverse
    assert mod.WhichOneof("left") == "step_index" and mod.WhichOneof("cmp") == "mod_eq"
    assert end == sw.ConditionProto(is_end_episode=True, eq=1)
    assert data.flat_source_index == 1 and data.ge == 4 and data.inverse and data.eq == 0
    assert sw.unpack_pattern(config) == {"x": x, "y": y}
    assert pickle.loads(pickle.dumps(config)) == config
    config.conditions.append(C.steps_since_applied() >= 2)  # repeated fields are lists


def test_infer_signature():
    ref = sw.create_reference_step({"a": None, "b": {"c": None}})
    spec = {"a": np.zeros([3, 3], np.float32), "b": {"c": reverb.TensorSpec([], np.int32)}}
    got = sw.infer_signature(
        [sw.create_config({"x": ref["a"][-5::2], "y": {"z": ref["b"]["c"][-2]}}, "t")], spec
    )
    # Reverb gave the strided slice 2 steps ((0 - -5) // 2); it reads 3.
    assert got == {
        "x": reverb.TensorSpec([3, 3, 3], np.float32, "x"),
        "y": {"z": reverb.TensorSpec([], np.int32, "y/z")},
    }
    configs = [sw.create_config({"x": ref["a"][-k:]}, "t") for k in (2, 3)]
    assert sw.infer_signature(configs, spec) == {
        "x": reverb.TensorSpec([None, 3, 3], np.float32, "x")
    }
    with pytest.raises(ValueError, match="At least one config must be provided"):
        sw.infer_signature([], spec)
    with pytest.raises(
        ValueError,
        match="All configs must target the same table but provided configs included t, u",
    ):
        sw.infer_signature([configs[0], sw.create_config({"x": ref["a"][-1]}, "u")], spec)
    with pytest.raises(ValueError, match="same pattern_structure"):
        sw.infer_signature([configs[0], sw.create_config({"y": ref["a"][-1]}, "t")], spec)
    with pytest.raises(ValueError, match=r"multiple dtypes at \('x',\)"):
        sw.infer_signature([configs[0], sw.create_config({"x": ref["b"]["c"][-2:]}, "t")], spec)
    with pytest.raises(ValueError, match=r"incompatible shapes at \('x',\)"):
        sw.infer_signature([configs[0], sw.create_config({"x": ref["a"][-1]}, "t")], spec)


def test_infer_signature_accepts_tf_specs_by_duck_typing():
    class FakeTFSpec:  # what a tf.TensorSpec looks like to Ostinato (TensorFlow not imported)
        def __init__(self, shape, dtype):
            self.shape, self.dtype = shape, dtype

        def is_compatible_with(self, other):
            return True

    ref = sw.create_reference_step({"a": None})
    got = sw.infer_signature(
        [sw.create_config([ref["a"][-4:]], "t")], {"a": FakeTFSpec([2], np.dtype(np.float64))}
    )
    assert got == [reverb.TensorSpec([4, 2], np.float64, "0")]


# -- PatternDataset (TensorFlow) ------------------------------------------------------------------


def _pattern_dataset():
    tf = pytest.importorskip("tensorflow")
    from ostinato.datasets.pattern_dataset import PatternDataset

    return tf, PatternDataset


def test_pattern_dataset_rlds_sars(client):
    """RLDS's pattern_map test, and the same items as a StructuredWriter given the same steps."""
    tf, PatternDataset = _pattern_dataset()
    steps = {
        "observation": {
            "f0": [[0, 0], [0, 1], [0, 2], [5, 5]],
            "f1": [[1, 0], [1, 1], [1, 2], [6, 6]],
        },
        "action": ([0, 10, 20, 30], [10, 11, 21, 31]),
        "reward": [0.0, 1.0, 2.0, 3.0],
        "is_last": [False, False, True, True],
    }
    ds = tf.data.Dataset.from_tensor_slices(steps)

    def sars(step):
        return {
            "observation": tf.nest.map_structure(lambda x: x[-2], step["observation"]),
            "action": tf.nest.map_structure(lambda x: x[-2], step["action"]),
            "reward": step["reward"][-2],
            "next_observation": tf.nest.map_structure(lambda x: x[-1], step["observation"]),
        }

    config = sw.create_config(sw.pattern_from_transform(ds.element_spec, sars), "t")
    for respect in (True, False):
        got = [
            tf.nest.flatten(e)
            for e in PatternDataset(ds, [config], respect, lambda s: s["is_last"])
        ]
        writer = client.structured_writer([config])
        for step in ds.as_numpy_iterator():
            writer.append(step)
            if step["is_last"]:
                writer.end_episode(clear_buffers=respect)
        writer.flush()
        want = _drain(client, "t")
        assert len(got) == len(want) == (2 if respect else 3)
        for g, (_, w) in zip(got, want):
            for a, b in zip(g, w):
                np.testing.assert_array_equal(a.numpy(), b)


def test_pattern_dataset_configs_each_need_their_own_history():
    tf, PatternDataset = _pattern_dataset()
    ds = tf.data.Dataset.from_tensor_slices(
        {"r": [0.0, 1.0, 2.0, 5.0], "last": [False, False, True, True]}
    )
    ref = sw.create_reference_step(ds.element_spec)
    long = sw.create_config({"r": ref["r"][-3:]}, "t", [C.step_index() >= 2])
    short = sw.create_config({"r": ref["r"][-1:]}, "t", [C.is_end_episode(), C.step_index() == 0])
    for configs in ([long, short], [short, long]):  # Reverb dropped [5.0] for the first order
        out = [
            e["r"].numpy().tolist() for e in PatternDataset(ds, configs, True, lambda s: s["last"])
        ]
        assert out == [[0.0, 1.0, 2.0], [5.0]]
    assert long.conditions == [C.step_index() >= 2]  # not modified
    strided = PatternDataset(
        ds.repeat(2), [sw.create_config([ref["r"][-5::2]], "t")], False, lambda s: s["last"]
    )
    assert strided.element_spec == (tf.TensorSpec([3], tf.float32),)
    assert [e[0].numpy().tolist() for e in strided] == [
        [0.0, 2.0, 0.0],
        [1.0, 5.0, 1.0],
        [2.0, 0.0, 2.0],
        [5.0, 1.0, 5.0],
    ]
    with pytest.raises(ValueError, match="`is_end_of_episode` must return `bool`"):
        PatternDataset(ds, [long], True, lambda s: s["r"])
    with pytest.raises(ValueError, match=r"position 0: `flat\[0\]\.start` must be < 0"):
        PatternDataset(ds, [sw.create_config([ref["r"][0:]], "t")], True, lambda s: s["last"])
