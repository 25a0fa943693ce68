"""VectorTrajectoryWriter: one writer for num_envs environments, against real servers.

The reference is what Reverb users write: one TrajectoryWriter per environment. Random
sequences of appends, item creations and episode ends (with masks, chunk boundaries and items
that span chunks) must store the same items, in the same order.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ostinato as reverb
from ostinato import errors

QUEUE = 100_000


def _tables():
    return [reverb.Table.queue("vec", QUEUE), reverb.Table.queue("ref", QUEUE)]


def _drain(client, table):
    n = client.server_info()[table].current_size
    if not n:
        return []
    out = []
    for s in client.sample(table, n, emit_timesteps=False):
        out.append(tuple(np.asarray(x).tobytes() for x in s.data))
    return out


def _step(rng, n, t):
    return {
        "env": np.arange(n, dtype=np.int32),
        "t": np.full(n, t, np.int64),
        "obs": rng.standard_normal((n, 3)).astype(np.float32),
        # 32 KiB rows: 4 rows per chunk by default (the other columns: 256), and not carved
        # from shared blocks.
        "img": rng.standard_normal((n, 8192)).astype(np.float32),
    }


def _check_fills_agree(vw):
    """Columns with as many rows per chunk fill and close their chunks at the same steps
    (``create_items`` computes their offsets once)."""
    by_rows = {}
    for col in vw._columns:
        fill = (col.pos - col.start).tolist(), col.live.tolist(), col.cap.tolist(), col.room
        assert by_rows.setdefault(col.rows, fill) == fill, col.path


def _run_ops(client, ops, n, keep, chunk):
    """Applies ``ops`` to a vector writer ("vec") and to one TrajectoryWriter per
    environment ("ref")."""
    rng = np.random.default_rng(0)
    vw = client.vector_writer(n, keep, max_chunk_length=chunk)
    refs = [client.trajectory_writer(keep, max_chunk_length=chunk) for _ in range(n)]
    t = 0
    steps: list[list[int]] = [[] for _ in range(n)]  # per environment, its episode's t values
    for op, mask, a, b in ops:
        m = np.array(mask[:n] + [True] * (n - len(mask)), bool)
        if op == "append":
            step = _step(rng, n, t)
            vw.append(step, mask=m)
            for i in np.flatnonzero(m):
                refs[i].append({k: v[i] for k, v in step.items()})
                steps[i].append(t)
            t += 1
        elif op == "items":
            if not t:
                continue
            back = 1 + a % keep
            length = 1 + b % back
            m &= vw.episode_steps >= back
            sl = slice(-back, None if back == length else -back + length)
            traj = {k: vw.history[k][sl] for k in ("env", "t", "obs", "img")}
            assert vw.create_items("vec", 1.0, traj, mask=m) == m.sum()
            for i in np.flatnonzero(m):
                w = refs[i]
                h = w.history
                w.create_item("ref", 1.0, {k: h[k][sl] for k in ("env", "t", "obs", "img")})
                w.flush()  # items of different writers are in their table in creation order
        else:
            vw.end_episode(m)
            for i in np.flatnonzero(m):
                refs[i].end_episode()
                steps[i].clear()
        _check_fills_agree(vw)
        for i in range(n if t else 0):  # the kept steps, walked back through the lane's chunks
            assert vw.history["t"].numpy(i).tolist() == steps[i][-keep:]
    vw.flush()
    for w in refs:
        w.flush()
    return vw, refs


OPS = st.lists(
    st.tuples(
        st.sampled_from(["append", "append", "append", "items", "items", "end"]),
        st.lists(st.booleans(), max_size=5),
        st.integers(0, 10),
        st.integers(0, 10),
    ),
    max_size=60,
)


@settings(max_examples=40, deadline=None)
@given(
    ops=OPS,
    n=st.integers(1, 5),
    keep=st.integers(1, 5),
    # 8 and 16: chunks that fill up and pass their newest rows on (Lanes.carry) when keep <= 3
    chunk=st.sampled_from([None, 1, 2, 3, 8, 16]),
)
def test_same_items_as_one_writer_per_environment(ops, n, keep, chunk):
    server = reverb.Server(_tables())
    try:
        client = server.localhost_client()
        vw, refs = _run_ops(client, ops, n, keep, chunk)
        assert _drain(client, "vec") == _drain(client, "ref")
        vw.close()
        for w in refs:
            w.close()
    finally:
        server.stop()


@pytest.mark.parametrize(("keep", "chunk", "kinds", "n_ops"), [(4, 2, 1, 80), (3, 16, 2, 160)])
def test_over_the_network(serve, keep, chunk, kinds, n_ops):
    """The same items through a server in another process (and an embedded one). With
    16-row chunks and 3 steps kept, full chunks pass their newest 2 rows on (Lanes.carry)."""
    client = serve(
        "import ostinato as reverb\n"
        f"TABLES = [reverb.Table.queue('vec', {QUEUE}), reverb.Table.queue('ref', {QUEUE})]\n"
    )
    rng = np.random.default_rng(3)
    ops = []
    ops_of = ["append", "append", "items", "end"] if kinds == 1 else ["append"] * 5 + ["items"] * 3
    ops_of += [] if kinds == 1 else ["end"]
    for _ in range(n_ops):
        op = ops_of[rng.integers(0, len(ops_of))]
        ops.append((op, rng.integers(0, 2, 4).astype(bool).tolist(), *rng.integers(0, 10, 2)))
    vw, refs = _run_ops(client, ops, 4, keep, chunk)
    vec, ref = _drain(client, "vec"), _drain(client, "ref")
    assert len(vec) > 20
    assert vec == ref
    vw.close()


@pytest.fixture()
def client(make_server):
    server = make_server(
        reverb.Table(
            "t",
            reverb.selectors.Fifo(),
            reverb.selectors.Fifo(),
            10_000,
            reverb.rate_limiters.MinSize(1),
        ),
        reverb.Table(
            "sig",
            reverb.selectors.Fifo(),
            reverb.selectors.Fifo(),
            100,
            reverb.rate_limiters.MinSize(1),
            signature={"obs": reverb.TensorSpec([2, 3], np.float32)},
        ),
        reverb.Table(
            "prio",
            reverb.selectors.Prioritized(1.0),
            reverb.selectors.Fifo(),
            100,
            reverb.rate_limiters.MinSize(1),
        ),
    )
    return server.localhost_client()


def _obs(n, t=0.0):
    return {"obs": np.full((n, 3), t, np.float32)}


def test_items_data_and_priorities(client):
    with client.vector_writer(3, 2) as w:
        for t in range(3):
            w.append(_obs(3, t))
        assert w.episode_steps.tolist() == [3, 3, 3]
        assert (
            w.create_items("prio", np.array([1.0, 2.0, 3.0]), {"obs": w.history["obs"][-2:]}) == 3
        )
        assert w.create_items("t", 0.5, {"obs": w.history["obs"][-1]}) == 3
    info = client.server_info()
    assert info["prio"].current_size == 3 and info["t"].current_size == 3
    batch = client.sample_batch("t", 3)
    assert batch.data[0].shape == (3, 3)
    assert (batch.data[0] == 2.0).all()
    b2 = client.sample_batch("prio", 50)
    assert b2.data[0].shape == (50, 2, 3)
    assert sorted(set(b2.info.priority.tolist())) == [1.0, 2.0, 3.0]
    assert (b2.data[0][:, 0] == 1.0).all() and (b2.data[0][:, 1] == 2.0).all()


def test_episode_step_counts(client):
    with client.vector_writer(3, 2) as w:
        assert w.min_episode_steps == 0 and w.steps_at_least(0).all()
        w.append(_obs(3))
        w.append(_obs(3), mask=np.array([True, False, True]))
        assert w.episode_steps.tolist() == [2, 1, 2]
        assert w.steps_at_least(2).tolist() == [True, False, True]
        assert w.steps_at_least(1.5).tolist() == [True, False, True]  # compared as given
        assert w.steps_at_least(np.int32(2)).tolist() == [True, False, True]
        assert 0 <= w.min_episode_steps <= 1  # a lower bound
        w.append(_obs(3))
        w.append(_obs(3))
        assert 2 <= w.min_episode_steps <= w.episode_steps.min() == 3
        w.end_episode(np.array([False, True, False]))
        assert w.min_episode_steps == 0 and w.episode_steps.tolist() == [4, 0, 4]
        assert w.steps_at_least(1).tolist() == [True, False, True]


def test_history_numpy_per_environment(client):
    w = client.vector_writer(2, 3)
    for t in range(5):
        w.append({"x": np.array([t, 10 + t], np.int64)})
    assert w.history["x"].numpy(1).tolist() == [12, 13, 14]
    w.end_episode(np.array([True, False]))
    assert w.episode_steps.tolist() == [0, 5]
    assert w.history["x"].numpy(0).tolist() == []
    w.close()


def test_signature_checked_once_per_layout(client):
    w = client.vector_writer(2, 2)
    w.append(_obs(2))
    w.append(_obs(2))
    assert w.create_items("sig", 1.0, {"obs": w.history["obs"][-2:]}) == 2
    with pytest.raises(ValueError, match="sig"):
        w.create_items("sig", 1.0, {"obs": w.history["obs"][-1:]})
    w.close()


@pytest.mark.parametrize(
    "step,match",
    [
        ({"obs": np.zeros((3, 3), np.float32)}, "leading dimension of 2"),
        ({"obs": np.zeros((2, 4), np.float32)}, "incompatible shape"),
        ({"obs": np.zeros((2, 3), np.float64)}, "wrong dtype"),
        ({"obs": np.float32(1)}, "leading dimension"),
    ],
)
def test_bad_steps(client, step, match):
    w = client.vector_writer(2, 2)
    w.append(_obs(2))
    with pytest.raises(ValueError, match=match):
        w.append(step)
    # Nothing was written: the next good step is the second.
    w.append(_obs(2, 1.0))
    assert w.episode_steps.tolist() == [2, 2]
    w.close()


def test_first_step_errors(client):
    with pytest.raises(ValueError, match="strings"):
        client.vector_writer(2, 1).append({"s": np.array([b"a", b"b"], object)})
    with pytest.raises(ValueError, match="None"):
        client.vector_writer(2, 1).append({"a": None, "b": np.zeros(2)})
    w = client.vector_writer(2, 1)
    w.append(_obs(2))
    with pytest.raises(ValueError, match="structure"):
        w.append({"other": np.zeros(2)})


def test_bad_item_requests(client):
    w = client.vector_writer(2, 2)
    w.append(_obs(2))
    with pytest.raises(IndexError, match="-1 to -2"):
        w.history["obs"][-3]
    with pytest.raises(IndexError, match="negative"):
        w.history["obs"][0]
    with pytest.raises(IndexError):
        w.history["obs"][0:1]
    with pytest.raises(ValueError, match="environment 0 has 1 steps"):
        w.create_items("t", 1.0, {"obs": w.history["obs"][-2:]})
    with pytest.raises(ValueError, match="nan"):
        w.create_items("t", float("nan"), {"obs": w.history["obs"][-1]})
    with pytest.raises(ValueError, match="shape"):
        w.create_items("t", np.ones(3), {"obs": w.history["obs"][-1]})
    with pytest.raises(ValueError, match="mask"):
        w.create_items("t", 1.0, {"obs": w.history["obs"][-1]}, mask=[True])
    with pytest.raises(TypeError, match="columns of this writer"):
        w.create_items("t", 1.0, {"obs": 3})
    with pytest.raises(errors.InvalidArgumentError, match="negative"):
        w.create_items("prio", -1.0, {"obs": w.history["obs"][-1]})
    with pytest.raises(errors.TableNotFoundError):
        w.create_items("nope", 1.0, {"obs": w.history["obs"][-1]})
    assert client.server_info()["t"].current_size == 0
    assert w.create_items("t", 1.0, {"obs": w.history["obs"][-1]}, mask=np.zeros(2, bool)) == 0
    w.close()
    with pytest.raises(errors.FailedPreconditionError):
        w.append(_obs(2))


def test_argument_checks(client):
    with pytest.raises(ValueError, match="num_envs"):
        client.vector_writer(0, 1)
    with pytest.raises(ValueError, match="num_keep_alive_refs"):
        client.vector_writer(2, 0)
    with pytest.raises(ValueError, match="max_chunk_length"):
        client.vector_writer(2, 1, max_chunk_length=0)


def test_chunks_are_freed_with_their_items(client):
    """Items keep their environment's chunks alive; once the items are gone and the writer
    moved on, the chunks are released."""
    w = client.vector_writer(4, 1, max_chunk_length=2)
    for t in range(10):
        w.append(_obs(4, t))
        w.create_items("t", 1.0, {"obs": w.history["obs"][-1]})
    w.flush()
    client.reset("t")
    w.close()
    # the server's chunk store (embedded) holds nothing once the table is empty
    import gc

    gc.collect()
    assert client.server_info()["t"].current_size == 0


def test_items_survive_a_checkpoint(tmp_path, make_server):
    """Items of a vector writer (lanes carved from shared blocks, one still being filled) are
    saved and restored exactly, and sample the same columns afterwards."""
    from ostinato import checkpointers

    def table():
        return reverb.Table.queue("q", 1000)

    server = make_server(table(), checkpointer=checkpointers.DefaultCheckpointer(str(tmp_path)))
    client = server.localhost_client()
    w = client.vector_writer(3, 3, max_chunk_length=4)
    for t in range(7):
        x = np.arange(3, dtype=np.int64) * 100 + t
        w.append({"x": x, "y": np.full((3, 2), t, np.float32)})
        if t >= 2:
            traj = {"x": w.history["x"][-3:], "y": w.history["y"][-1]}
            w.create_items("q", 1.0, traj, mask=w.episode_steps >= 3)
        if t == 3:
            w.end_episode(np.array([False, True, False]))
    w.flush()
    before = _drain_items(server)
    path = server.checkpoint()
    w.close()
    assert path.startswith(str(tmp_path))
    restored = make_server(table(), checkpointer=checkpointers.DefaultCheckpointer(str(tmp_path)))
    assert _drain_items(restored) == before
    assert (
        len(before) == 13
    )  # lanes 0 and 2: 5 items each; lane 1: 2 before its episode end, 1 after


def _drain_items(server):
    t = server.tables_by_name["q"]
    from ostinato.core import items as items_lib

    out = []
    for k in t.keys().tolist():
        it = t.get(k)
        cols = [
            np.concatenate([c.data[o : o + n] for c, o, n in col]).tolist()
            for col in items_lib.columns(it["trajectory"])
        ]
        out.append((k, it["priority"], it["squeeze"], cols))
    return out
