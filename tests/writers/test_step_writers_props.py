"""The writer's generated step writers (``ostinato.writers.step_writers``) against its general
path: the same appends -- steps in one append or in several parts, left-out and ``None``
fields, fields set twice, values of the wrong dtype, episodes ending with or without clearing
-- through a writer that uses them and one whose generated writers are switched off must
leave the same histories (every step of every column: its value, or the error reading it;
and slices of the newest and the first steps) and raise the same errors. (The whole-step
writer, used by both, is checked against the general path in test_writer_fast_paths.py.)"""

from __future__ import annotations

import contextlib

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ostinato as reverb

COLUMNS = ("a", "n", "o", "r")
SETTINGS = settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


class _Never(dict):
    """A cache that keeps nothing: the writer never finds a generated writer in it."""

    def __setitem__(self, key, value) -> None:
        pass


def _value(column: str, i: int, bad: bool):
    if bad:
        return np.int8(i)  # not the column's dtype once it has one
    if column == "o":
        return np.full(2, i, np.float32)
    if column == "r":
        return float(i) / 2  # a Python float (float64 column)
    if column == "n":
        return bool(i % 2)  # a Python bool
    return np.int32(i)


_PART = st.tuples(
    st.sets(st.sampled_from(COLUMNS), min_size=1),  # the fields it names
    st.sampled_from(["value", "value", "value", "none", "bad"]),  # the last field's value
    st.booleans(),  # partial_step
)
_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), _PART),
        st.tuples(st.just("append"), _PART),
        st.tuples(st.just("append"), _PART),
        # Acme's steps: the observation first, then the rest (n sometimes in a middle part).
        st.tuples(st.just("acme"), st.booleans()),
        st.tuples(st.just("acme"), st.booleans()),
        st.tuples(st.just("end_episode"), st.booleans()),
    ),
    min_size=5,
    max_size=40,
)


def _state(w) -> dict:
    """Every step of every column: ``("ok", value)`` or the error type of reading it."""
    out = {}
    try:
        history = w.history
    except RuntimeError:
        return out
    for c in COLUMNS:
        if c not in history:
            continue
        h = history[c]
        steps = []
        for i in range(len(h)):
            try:
                steps.append(("ok", np.asarray(h[i].numpy()).tolist()))
            except (ValueError, RuntimeError) as e:
                steps.append(type(e).__name__)
        # Slices between the steps, as the adders read them (runs of held steps).
        for k in (2, 3):
            for sl in (slice(-k, None), slice(-k - 1, -1), slice(0, k)):
                try:
                    steps.append(("slice", np.asarray(h[sl].numpy()).tolist()))
                except (ValueError, RuntimeError, IndexError) as e:
                    steps.append(type(e).__name__)
        out[c] = steps
    return out


def _apply(w, op, counter):
    """Runs one op on ``w``; returns what it raised (type name) or None."""
    try:
        if op[0] == "append":
            fields, last, partial = op[1]
            fields = sorted(fields)
            step = {}
            for j, f in enumerate(fields):
                kind = last if j == len(fields) - 1 else "value"
                step[f] = None if kind == "none" else _value(f, counter, kind == "bad")
            w.append(step, partial_step=partial)
        elif op[0] == "acme":
            w.append({"o": _value("o", counter, False)}, partial_step=True)
            if op[1]:
                w.append({"n": _value("n", counter, False)}, partial_step=True)
            w.append({"a": _value("a", counter, False), "r": _value("r", counter, False)})
        else:
            w.end_episode(clear_buffers=op[1])
    except (ValueError, TypeError) as e:
        return type(e).__name__
    return None


@contextlib.contextmanager
def _writers(keep: int):
    server = reverb.Server([reverb.Table.queue("q", 100_000)])
    try:
        client = server.localhost_client()
        fast = client.trajectory_writer(keep)
        general = client.trajectory_writer(keep)
        general._opening = _Never()
        general._filling = _Never()
        yield fast, general
        fast.close()
        general.close()
    finally:
        server.stop()


@SETTINGS
@given(keep=st.integers(1, 5), ops=_OPS)
def test_generated_step_writers_match_the_general_path(keep, ops):
    with _writers(keep) as (fast, general):
        for i, op in enumerate(ops):
            got = _apply(fast, op, i)
            want = _apply(general, op, i)
            assert got == want, (i, op)
            assert fast.episode_steps == general.episode_steps
            assert _state(fast) == _state(general), (i, op)


def test_the_generated_writers_are_used():
    """(The property above would pass vacuously if they were not.)"""
    with _writers(3) as (fast, _):
        for i in range(4):
            _apply(fast, ("acme", True), i)
        assert fast._opening and fast._filling
        # Every reservation was filled in its step: no history keeps a buffer.
        assert all(fast.history[c]._buf is None for c in COLUMNS)
