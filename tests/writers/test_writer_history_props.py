"""TrajectoryWriter history indexing and item contents against a plain Python list model.

``writer.history[col]`` must behave like a Python list of the column's appended values (for
``int``, negative ``int``, any slice and lists of ints), except that steps older than
``num_keep_alive_refs`` (or steps at which the column was not written) cannot be used: building
a column that refers to them raises ``ValueError``. Items made from any of these columns --
including non-contiguous picks and permutations inside one chunk, which Reverb got wrong
(reverb-behaviour.md §4.2.2) -- must sample back exactly the picked steps.
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import ostinato as reverb

SETTINGS = settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)

IDX = st.one_of(st.integers(-6, 6), st.integers(-14, 14))
OPT_IDX = st.one_of(st.none(), IDX, st.just("len"))  # "len" stands for len(h)


@contextlib.contextmanager
def _queue_server():
    server = reverb.Server([reverb.Table.queue("q", 100_000)])
    try:
        yield server.localhost_client()
    finally:
        server.stop()


def _x(v: int) -> np.ndarray:
    return np.array([v, -v], dtype=np.int32)


def _z(v: int) -> np.float64:
    return np.float64(v) + 0.5


class _Col:
    """A model of one column's history: the values of every step (None where not written)."""

    def __init__(self) -> None:
        self.values: list = []

    def resolve(self, i: int) -> int:
        n = len(self.values)
        j = i + n if i < 0 else i
        if not 0 <= j < n:
            raise IndexError(i)
        return j

    def usable(self, j: int, keep: int) -> bool:
        return j >= len(self.values) - keep and self.values[j] is not None

    def clear(self) -> None:
        self.values.clear()


def _end_episode(writer, models: dict, clear_buffers: bool) -> None:
    """``end_episode`` on the writer and, when it clears the buffers, on the models."""
    writer.end_episode(clear_buffers=clear_buffers, timeout_ms=5000)
    if clear_buffers:
        for m in models.values():
            m.clear()


def _expect(model: _Col, keep: int, index):
    """('index_error' | 'value_error' | ('ok', [steps], squeezed))."""
    n = len(model.values)
    if isinstance(index, int):
        try:
            j = model.resolve(index)
        except IndexError:
            return "index_error"
        return ("ok", [j], True) if model.usable(j, keep) else "value_error"
    if isinstance(index, slice):
        steps = list(range(*index.indices(n)))
    else:
        try:
            steps = [model.resolve(i) for i in index]
        except IndexError:
            return "index_error"
    if not all(model.usable(j, keep) for j in steps):
        return "value_error"
    return ("ok", steps, False)


def _to_index(spec, n: int):
    kind = spec[0]
    if kind == "int":
        return n if spec[1] == "len" else spec[1]
    if kind == "slice":
        start, stop, step = (n if v == "len" else v for v in spec[1:])
        return slice(start, stop, step)
    return list(spec[1])


_INDEX = st.one_of(
    st.tuples(st.just("int"), st.one_of(IDX, st.just("len"))),
    st.tuples(
        st.just("slice"),
        OPT_IDX,
        OPT_IDX,
        st.one_of(st.none(), st.sampled_from([-4, -3, -2, -1, 1, 2, 3, 4])),
    ),
    st.tuples(
        st.just("slice"), st.one_of(st.none(), st.integers(0, 12)), st.just("len"), st.none()
    ),  # h[i:len(h)], Reverb's off-by-one (§4.2.4)
    st.tuples(st.just("list"), st.lists(IDX, max_size=6)),
    st.tuples(st.just("list"), st.permutations([-1, -2, -3])),
    st.tuples(st.just("list"), st.permutations([-1, -3, -5])),
)

_APPEND = st.tuples(st.just("append"), st.booleans())  # flag: also write column "z"
_OPS = st.lists(
    st.one_of(
        _APPEND,
        _APPEND,
        _APPEND,
        _APPEND,
        st.tuples(st.just("end_episode"), st.booleans()),  # clear_buffers
        st.tuples(st.just("index"), st.sampled_from(["x", "z"]), _INDEX),
        st.tuples(st.just("index"), st.just("x"), _INDEX),
        st.tuples(st.just("item"), _INDEX, _INDEX),
        st.tuples(st.just("item"), _INDEX, _INDEX),
    ),
    min_size=15,
    max_size=60,
)


def _has_column(writer, name: str) -> bool:
    try:
        writer.history[name]
    except (RuntimeError, KeyError, TypeError):  # no append yet / no such column
        return False
    return True


def writer_has_x(writer) -> bool:
    return _has_column(writer, "x")


def writer_has_z(writer) -> bool:
    return _has_column(writer, "z")


def _check_column(col, model: _Col, steps: list[int], squeezed: bool) -> np.ndarray | None:
    assert len(col) == len(steps)
    assert col.is_squeezed == squeezed
    if not steps:
        return None
    got = col.numpy()
    want = model.values[steps[0]] if squeezed else np.stack([model.values[j] for j in steps])
    np.testing.assert_array_equal(got, want)
    return want


def _check_read(h, model: _Col, keep: int, index) -> str | tuple:
    """Reads ``h[index]`` and checks it against the model (the error, or the steps); returns
    what the model expected."""
    want = _expect(model, keep, index)
    if want == "index_error":
        with pytest.raises(IndexError):
            h[index]
    elif want == "value_error":
        with pytest.raises(ValueError):
            h[index]
    else:
        _check_column(h[index], model, want[1], want[2])
    return want


@SETTINGS
@given(keep=st.integers(1, 6), chunk=st.sampled_from([None, 1, 2, 3, 5]), ops=_OPS)
def test_history_indexing_and_items_match_list_model(keep, chunk, ops):
    with _queue_server() as client:
        writer = client.trajectory_writer(keep, max_chunk_length=chunk)
        models = {"x": _Col(), "z": _Col()}
        step_value = 0
        steps_in_episode = 0
        for op in ops:
            if op[0] == "append":
                step_value += 1
                data = {"x": _x(step_value)}
                add_z = op[1]
                if (
                    add_z
                    and not writer_has_z(writer)
                    and len(models["x"].values) != steps_in_episode
                ):
                    # A column first written after end_episode(clear_buffers=False) is padded
                    # wrongly: see test_new_column_after_episode_without_clearing_is_aligned.
                    add_z = False
                if add_z:
                    data["z"] = _z(step_value)
                # The z column exists once first written; its history is then padded with
                # None so that history["x"][i] and history["z"][i] are the same step.
                if writer_has_z(writer):
                    models["z"].values.append(_z(step_value) if "z" in data else None)
                elif "z" in data:
                    models["z"].values = [None] * len(models["x"].values) + [_z(step_value)]
                models["x"].values.append(_x(step_value))
                writer.append(data)
                steps_in_episode += 1
            elif op[0] == "end_episode":
                _end_episode(writer, models, op[1])
                steps_in_episode = 0
            elif op[0] == "index":
                name, spec = op[1], op[2]
                if not writer_has_z(writer) and name == "z":
                    name = "x"
                if not writer_has_x(writer):
                    continue
                h = writer.history[name]
                m = models[name]
                assert len(h) == len(m.values)
                index = _to_index(spec, len(h))
                want = _check_read(h, m, keep, index)
                event(f"index {spec[0]}: {want if isinstance(want, str) else 'ok'}")
            elif op[0] == "item":
                if not writer_has_x(writer):
                    continue
                cols = {}
                wants = {}
                for name, spec in zip(("x", "z"), op[1:]):
                    if name == "z" and not writer_has_z(writer):
                        continue
                    h = writer.history[name]
                    index = _to_index(spec, len(h))
                    want = _expect(models[name], keep, index)
                    if not isinstance(want, tuple) or not want[1]:
                        continue  # errors are covered by "index"; empty columns are refused
                    cols[name] = h[index]
                    wants[name] = _check_column(cols[name], models[name], want[1], want[2])
                if not cols:
                    continue
                writer.create_item("q", 1.0, cols)
                event(f"item with {len(cols)} column(s)")
                sample = next(client.sample("q", 1, emit_timesteps=False, timeout=2))
                assert len(sample.data) == len(cols)
                for got, name in zip(sample.data, sorted(cols)):
                    np.testing.assert_array_equal(got, wants[name])
            assert writer.episode_steps == steps_in_episode
        writer.close()


# -- example-based ---------------------------------------------------------------------------------


@pytest.mark.parametrize("chunk", [None, 2, 4])
@pytest.mark.parametrize(
    "picks", [[0, 2], [1, 0], [1, 0, 2], [2, 0, 1], [3, 1], [0, 0, 3], [3, 2, 1, 0]]
)
def test_non_contiguous_and_permuted_picks_sample_back_exactly(chunk, picks):
    """Reverb bug §4.2.2: picks within one chunk came back as the contiguous run."""
    with _queue_server() as client:
        with client.trajectory_writer(4, max_chunk_length=chunk) as w:
            for v in range(4):
                w.append({"x": np.int64(v)})
            w.create_item("q", 1.0, {"x": w.history["x"][picks]})
            w.create_item("q", 1.0, w.history["x"][picks])  # a bare column as trajectory
        for _ in range(2):
            s = next(client.sample("q", 1, emit_timesteps=False, timeout=2))
            np.testing.assert_array_equal(s.data[0], np.array(picks, dtype=np.int64))


def test_len_indexing_is_python_list_like():
    """Reverb bug §4.2.4: h[len(h)] returned a step and h[i:len(h)] was empty."""
    with _queue_server() as client:
        w = client.trajectory_writer(10)
        for v in range(5):
            w.append({"x": np.int64(v)})
        h = w.history["x"]
        with pytest.raises(IndexError):
            h[len(h)]
        with pytest.raises(IndexError):
            h[-len(h) - 1]
        np.testing.assert_array_equal(h[1 : len(h)].numpy(), [1, 2, 3, 4])
        np.testing.assert_array_equal(h[0 : len(h) : 2].numpy(), [0, 2, 4])
        w.create_item("q", 1.0, {"x": h[2 : len(h)]})
        s = next(client.sample("q", 1, emit_timesteps=False, timeout=2))
        np.testing.assert_array_equal(s.data[0], [2, 3, 4])
        w.close()


def test_old_steps_raise_value_error_and_index_out_of_range_raises_index_error():
    with _queue_server() as client:
        w = client.trajectory_writer(2)
        for v in range(5):
            w.append({"x": np.int64(v)})
        h = w.history["x"]
        assert len(h) == 5
        np.testing.assert_array_equal(h[-2:].numpy(), [3, 4])
        for bad in (0, 1, 2, -3):
            with pytest.raises(ValueError):
                h[bad]
        with pytest.raises(ValueError):
            h[2:]
        with pytest.raises(ValueError):
            h[[4, 2]]
        with pytest.raises(IndexError):
            h[[4, 5]]
        with pytest.raises(IndexError):
            h[5]
        with pytest.raises(TypeError):
            h["a"]
        w.close()


@pytest.mark.parametrize("chunk", [None, 1, 3])
def test_items_across_end_episode_without_clearing(chunk):
    with _queue_server() as client:
        w = client.trajectory_writer(6, max_chunk_length=chunk)
        for v in range(3):
            w.append({"x": np.int64(v)})
        w.end_episode(clear_buffers=False)
        assert w.episode_steps == 0
        for v in range(3, 5):
            w.append({"x": np.int64(v)})
        h = w.history["x"]
        assert len(h) == 5  # the history spans both episodes
        w.create_item("q", 1.0, {"x": h[[4, 1, 3, 0]]})
        w.create_item("q", 2.0, {"x": h[1:]})
        got = [
            next(client.sample("q", 1, emit_timesteps=False, timeout=2)).data[0] for _ in range(2)
        ]
        np.testing.assert_array_equal(got[0], [4, 1, 3, 0])
        np.testing.assert_array_equal(got[1], [1, 2, 3, 4])
        w.close()


def test_end_episode_with_clearing_expires_old_columns():
    with _queue_server() as client:
        w = client.trajectory_writer(4, max_chunk_length=2)
        for v in range(3):
            w.append({"x": np.int64(v)})
        old = w.history["x"][[2, 0]]
        w.end_episode(clear_buffers=True)
        assert len(w.history["x"]) == 0
        with pytest.raises(IndexError):
            w.history["x"][0]
        with pytest.raises(ValueError):
            w.create_item("q", 1.0, {"x": old})
        with pytest.raises(RuntimeError):
            old.numpy()
        w.append({"x": np.int64(10)})
        w.create_item("q", 1.0, {"x": w.history["x"][[0, 0]]})
        s = next(client.sample("q", 1, emit_timesteps=False, timeout=2))
        np.testing.assert_array_equal(s.data[0], [10, 10])
        assert client.server_info()["q"].current_size == 0
        w.close()


def test_new_column_after_episode_without_clearing_is_aligned():
    with _queue_server() as client:
        w = client.trajectory_writer(5)
        w.append({"x": np.int64(0)})
        w.append({"x": np.int64(1)})
        w.end_episode(clear_buffers=False)
        w.append({"x": np.int64(2), "z": np.int64(20)})
        hx, hz = w.history["x"], w.history["z"]
        assert len(hx) == 3
        assert len(hz) == len(hx)
        np.testing.assert_array_equal(hz[2].numpy(), 20)
        w.close()


# -- columns kept while the writer goes on -------------------------------------------------------

_KEPT_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.sampled_from(["x", "whole", "partial"])),
        st.tuples(st.just("append"), st.sampled_from(["x", "whole", "partial"])),
        st.tuples(st.just("append"), st.sampled_from(["x", "whole", "partial"])),
        st.tuples(st.just("end_episode"), st.booleans()),  # clear_buffers
        st.tuples(
            st.just("hold"),
            st.sampled_from(["x", "z"]),
            st.sampled_from(["run", "one", "pick"]),
            st.integers(1, 6),
        ),
        st.tuples(st.just("use"), st.integers(0, 7)),
        st.tuples(st.just("use"), st.integers(0, 7)),
    ),
    min_size=10,
    max_size=50,
)


class _Values:
    """A model of one column by value: each step of the episode's history as (value, value
    index) or None; values are numbered from the writer's start, and a value is live while it
    is among the newest ``keep`` and no buffers were cleared since it was appended."""

    def __init__(self) -> None:
        self.steps: list = []
        self.count = 0
        self.cleared = 0

    def add(self, value) -> None:
        self.steps.append((value, self.count))
        self.count += 1

    def live(self, vi: int, keep: int) -> bool:
        return vi >= max(self.cleared, self.count - keep)

    def clear(self) -> None:
        self.steps.clear()
        self.cleared = self.count


@SETTINGS
@given(keep=st.integers(1, 6), chunk=st.sampled_from([None, 1, 2, 3, 5]), ops=_KEPT_OPS)
def test_columns_kept_across_appends_pack_their_steps_or_say_expired(keep, chunk, ops):
    """A column read from the history and used later -- after more appends, new chunks,
    episodes, partial steps -- gives an item of exactly the steps it was read at while they
    are live, and ``create_item`` refuses it ("expired") once one of them left the keep-alive
    window or the buffers were cleared. (Reads store value indices, not refs: this checks the
    indices against a list model.)"""
    with _queue_server() as client:
        writer = client.trajectory_writer(keep, max_chunk_length=chunk)
        models = {"x": _Values(), "z": _Values()}
        held: list = []
        value = 0
        steps_in_episode = 0
        for op in ops:
            if op[0] == "append":
                value += 1
                mode = op[1]
                has_z = writer_has_z(writer)
                if mode != "x" and not has_z and len(models["x"].steps) != steps_in_episode:
                    mode = "x"  # see test_history_indexing_and_items_match_list_model
                if mode == "partial":
                    writer.append({"x": _x(value)}, partial_step=True)
                    writer.append({"z": _z(value)})
                elif mode == "whole":
                    writer.append({"x": _x(value), "z": _z(value)})
                else:
                    writer.append({"x": _x(value)})
                if mode != "x" and not has_z:
                    models["z"].steps = [None] * len(models["x"].steps)
                models["x"].add(_x(value))
                if mode != "x":
                    models["z"].add(_z(value))
                elif has_z:
                    models["z"].steps.append(None)
                steps_in_episode += 1
            elif op[0] == "end_episode":
                _end_episode(writer, models, op[1])
                steps_in_episode = 0
            elif op[0] == "hold":
                name, kind, k = op[1:]
                if name == "z" and not writer_has_z(writer):
                    continue
                m = models[name]
                n = len(m.steps)
                if k > min(n, keep):
                    continue  # reads outside the history are covered by the list-model test
                picks = {"run": list(range(n - k, n)), "one": [n - k], "pick": [n - k, n - 1]}
                steps = [m.steps[j] for j in picks[kind]]
                if None in steps:
                    continue
                h = writer.history[name]
                col = h[-k:] if kind == "run" else h[-k] if kind == "one" else h[[-k, -1]]
                want = steps[0][0] if kind == "one" else np.stack([s[0] for s in steps])
                held.append((name, col, want, [s[1] for s in steps]))
                event(f"hold {kind}")
            elif op[0] == "use" and held:
                name, col, want, vis = held.pop(op[1] % len(held))
                if all(models[name].live(vi, keep) for vi in vis):
                    writer.create_item("q", 1.0, {name: col})
                    sample = next(client.sample("q", 1, emit_timesteps=False, timeout=2))
                    np.testing.assert_array_equal(sample.data[0], want)
                    event("use: live")
                else:
                    with pytest.raises(ValueError, match="expired"):
                        writer.create_item("q", 1.0, {name: col})
                    event("use: expired")
        writer.close()


# -- partial steps ---------------------------------------------------------------------------------

_PARTIAL_OPS = st.lists(
    st.one_of(
        st.just(("append",)),
        # How the first append leaves z (left out of the dict, or None) and what the second
        # one does: sets z, sets it None, names nothing, or first fails on a z of the wrong
        # dtype or on x set twice (the step stays open), then sets z.
        st.tuples(
            st.just("partial"),
            st.sampled_from(["left_out", "none"]),
            st.sampled_from(["set", "none", "empty", "bad_dtype", "twice"]),
        ),
        st.tuples(st.just("partial"), st.just("left_out"), st.just("set")),  # Acme's way
        st.tuples(st.just("end_episode"), st.booleans()),
        st.tuples(st.just("index"), st.sampled_from(["x", "z"]), _INDEX),
        st.tuples(st.just("item"), _INDEX, _INDEX),
    ),
    min_size=10,
    max_size=50,
)


@SETTINGS
@given(keep=st.integers(1, 6), chunk=st.sampled_from([None, 1, 2, 3, 5]), ops=_PARTIAL_OPS)
def test_partial_steps_match_list_model(keep, chunk, ops):
    """Steps written in two appends (``partial_step=True`` first, as Acme's adders do), with
    the second one setting a column or leaving it None: the history reads like the list model
    at every point, also between the two appends (the open step's unset column reads None),
    and items sample back their steps. The same two appends repeat with the same keys, so the
    writer's generated halves (``step_writers.part_step_writer``) write most of them; a
    second append that fails (a value of the wrong dtype, a field set twice) leaves the step
    open and the history as it was."""
    with _queue_server() as client:
        writer = client.trajectory_writer(keep, max_chunk_length=chunk)
        models = {"x": _Col(), "z": _Col()}
        value = 0
        z_typed = False  # z has had a value (its dtype is known)
        for op in ops:
            if op[0] in ("append", "partial"):
                value += 1
                if op[0] == "append":
                    z_typed = True
                    writer.append({"x": _x(value), "z": _z(value)})
                    models["x"].values.append(_x(value))
                    models["z"].values.append(_z(value))
                    continue
                first, second = op[1:]
                if first == "left_out" and writer_has_z(writer):
                    writer.append({"x": _x(value)}, partial_step=True)
                else:  # (z is made by this append, where it has no column yet)
                    writer.append({"x": _x(value), "z": None}, partial_step=True)
                models["x"].values.append(_x(value))
                models["z"].values.append(None)

                def check_open_step() -> None:
                    for name in ("x", "z"):  # between the two appends
                        h, m = writer.history[name], models[name]
                        assert len(h) == len(m.values)
                        for i in (-1, -2, -keep, 0, 1, len(h) - 2):
                            _check_read(h, m, keep, i)
                        # The runs Acme's adders read then (h[-k-1:-1]), and from the start.
                        for k in (1, 2, keep, keep + 1):
                            _check_read(h, m, keep, slice(-k - 1, -1))
                            _check_read(h, m, keep, slice(0, k))
                        _check_read(h, m, keep, slice(1, len(h) + 2))

                check_open_step()
                if second == "bad_dtype" and not z_typed:
                    second = "set"  # (z's first value gives its dtype)
                if second == "bad_dtype":
                    with pytest.raises(ValueError, match="dtype|shape"):
                        writer.append({"z": np.int8(value)})
                    check_open_step()
                elif second == "twice":
                    with pytest.raises(ValueError, match="already been set"):
                        writer.append({"x": _x(value)})
                    check_open_step()
                if second in ("set", "bad_dtype", "twice"):
                    writer.append({"z": _z(value)})
                    models["z"].values[-1] = _z(value)
                    z_typed = True
                elif second == "none":
                    writer.append({"z": None})
                else:
                    writer.append({})
                event(f"partial, {first}, {second}")
            elif op[0] == "end_episode":
                _end_episode(writer, models, op[1])
            elif op[0] == "index":
                if not models["x"].values:
                    continue
                name, spec = op[1], op[2]
                h, m = writer.history[name], models[name]
                assert len(h) == len(m.values)
                _check_read(h, m, keep, _to_index(spec, len(h)))
            elif op[0] == "item":
                if not models["x"].values:
                    continue
                cols, wants = {}, {}
                for name, spec in zip(("x", "z"), op[1:]):
                    h = writer.history[name]
                    index = _to_index(spec, len(h))
                    want = _expect(models[name], keep, index)
                    if not isinstance(want, tuple) or not want[1]:
                        continue
                    cols[name] = h[index]
                    wants[name] = _check_column(cols[name], models[name], want[1], want[2])
                if not cols:
                    continue
                writer.create_item("q", 1.0, cols)
                sample = next(client.sample("q", 1, emit_timesteps=False, timeout=2))
                for got, name in zip(sample.data, sorted(cols)):
                    np.testing.assert_array_equal(got, wants[name])
        writer.close()
