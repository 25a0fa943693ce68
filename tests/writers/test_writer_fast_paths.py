"""The TrajectoryWriter's fast paths (a step's ref as its squeezed column, the generated
whole-step append and dict packer) give what the general paths give, and step aside for
everything they do not handle."""

import numpy as np
import pytest

import ostinato as reverb
from ostinato.writers.chunker import CellRef


@pytest.fixture()
def client(make_server):
    server = make_server(
        reverb.Table.queue("queue", 1000),
        reverb.Table(
            "prio",
            reverb.selectors.Prioritized(1.0),
            reverb.selectors.Fifo(),
            1000,
            reverb.rate_limiters.MinSize(1),
        ),
    )
    return server.localhost_client()


def _drain(client, table, n):
    return [s.data for s in client.sample(table, n, emit_timesteps=False)]


def test_a_step_s_ref_is_its_squeezed_column(client):
    w = client.trajectory_writer(2)
    w.append({"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.int64(4)})
    col = w.history["a"][-1]
    assert isinstance(col, CellRef) and isinstance(col, reverb.TrajectoryColumn)
    # A ref is made when the step is read (the writer keeps value indices): every read of
    # the step refers to the same value.
    again = w.history["a"][0]
    assert again is not col and (again.chunk, again.offset) == (col.chunk, col.offset)
    assert col.is_squeezed and len(col) == 1 and list(col) == [col]
    assert col.shape == (2, 3) and col.dtype == np.float32
    np.testing.assert_array_equal(col.numpy(), np.arange(6, dtype=np.float32).reshape(2, 3))
    assert col[0] is col and col[-1] is col
    # The ref as a reference: into a column of its own, squeezed or not.
    assert reverb.TrajectoryColumn([col], squeeze=True).shape == (2, 3)
    assert reverb.TrajectoryColumn([col, col]).shape == (2, 2, 3)
    w.close()


def test_an_expired_step_says_so_as_ref_and_as_column(client):
    w = client.trajectory_writer(1)
    w.append({"a": np.int64(1)})
    col = w.history["a"][-1]
    w.append({"a": np.int64(2)})
    assert col.expired
    with pytest.raises(RuntimeError) as e:
        col.numpy()
    assert "Cannot convert TrajectoryColumn with expired data references" in str(e.value)
    assert "Cannot access data from expired WeakCellRef" in str(e.value)
    with pytest.raises(ValueError, match="expired"):
        w.create_item("queue", 1.0, {"a": col})
    w.close()


def test_dicts_of_as_many_keys_but_other_keys_are_packed_right(client):
    # The packer of the keys last seen is tried first: a dict of as many other keys must
    # not be taken for it.
    w = client.trajectory_writer(3)
    for i in range(6):
        w.append({"a": np.int64(i), "b": np.int64(10 + i), "c": np.int64(20 + i)})
        if i % 2:
            traj = {"a": w.history["a"][-1], "b": w.history["b"][-2:]}
        else:
            traj = {"b": w.history["b"][-1], "c": w.history["c"][-1]}
        w.create_item("queue", 1.0, traj)
    w.flush()
    got = _drain(client, "queue", 6)
    for i, data in enumerate(got):
        if i % 2:
            assert int(data[0]) == i and data[1].tolist() == [9 + i, 10 + i]
        else:
            assert int(data[0]) == 10 + i and int(data[1]) == 20 + i
    w.close()


def test_a_history_run_is_a_column_like_any_other(client):
    w = client.trajectory_writer(4)
    for i in range(5):
        w.append({"a": np.full(2, i, np.float32)})
    h = w.history["a"]
    run = h[-3:]
    assert isinstance(run, reverb.TrajectoryColumn) and not run.is_squeezed
    assert len(run) == 3 and list(run) == [h[2], h[3], h[4]]
    assert run[0] == h[2] and run[-1] == h[-1]  # refs to the same values
    assert run.shape == (3, 2) and run.dtype == np.float32
    np.testing.assert_array_equal(run.numpy(), [[2, 2], [3, 3], [4, 4]])
    assert run[1:].numpy().tolist() == [[3, 3], [4, 4]]
    assert repr(run) == "TrajectoryColumn(len=3, squeeze=False, path=('a',))"
    assert len(h[-4:]) == 4  # the whole buffer
    with pytest.raises(ValueError, match="None"):
        h[-5:]  # older than the writer keeps
    w.close()


def test_squeeze_flags_of_every_mix_of_columns(client):
    # The generated packer keeps a column's squeeze flag as a bit: every combination of
    # squeezed and unsqueezed columns, of each kind, comes back with its own shapes.
    w = client.trajectory_writer(3)
    w.append({"a": np.int64(0), "b": np.int64(10), "c": np.int64(20)})
    w.append({"a": np.int64(1), "b": np.int64(11), "c": np.int64(21)})
    H = w.history
    kinds = [
        lambda k: H[k][-1],  # a ref: squeezed
        lambda k: H[k][-2:],  # a run
        lambda k: reverb.TrajectoryColumn([H[k][-1]], squeeze=True),
        lambda k: reverb.TrajectoryColumn([H[k][-1]]),
    ]
    combos = [(x, y, z) for x in range(4) for y in range(4) for z in range(4)]
    for combo in combos:
        w.create_item("queue", 1.0, {k: kinds[j](k) for k, j in zip("abc", combo)})
    w.flush()
    got = _drain(client, "queue", len(combos))
    for combo, data in zip(combos, got):
        for base, j, col in zip((0, 10, 20), combo, data):
            want = {0: base + 1, 1: [base, base + 1], 2: base + 1, 3: [base + 1]}[j]
            assert np.asarray(col).tolist() == want, (combo, data)
    w.close()


def test_mixed_and_picked_columns_take_the_general_path(client):
    w = client.trajectory_writer(4, max_chunk_length=2)
    for i in range(4):
        w.append({"a": np.int64(i), "b": np.int64(10 + i)})
    # b's last three steps span two chunks; a's picks are not a run.
    w.create_item("queue", 1.0, {"a": w.history["a"][[0, 2]], "b": w.history["b"][-3:]})
    w.create_item("queue", 1.0, {"a": w.history["a"][-1], "b": w.history["b"][-2:]})
    w.flush()
    first, second = _drain(client, "queue", 2)
    assert first[0].tolist() == [0, 2] and first[1].tolist() == [11, 12, 13]
    assert int(second[0]) == 3 and second[1].tolist() == [12, 13]
    w.close()


def test_prioritized_tables_still_refuse_negative_priorities(client):
    w = client.trajectory_writer(1, validate_items=False)
    w.append({"a": np.int64(1)})
    with pytest.raises(reverb.errors.InvalidArgumentError, match="(?i)priority"):
        w.create_item("prio", -1.0, {"a": w.history["a"][-1]})
    with pytest.raises(ValueError, match="nan"):
        w.create_item("queue", float("nan"), {"a": w.history["a"][-1]})
    w.create_item("prio", 0.5, {"a": w.history["a"][-1]})
    w.flush()
    assert client.server_info()["prio"].current_size == 1
    w.close()


def test_whole_step_append_steps_aside_for_new_keys_and_other_values(client):
    w = client.trajectory_writer(2)
    w.append({"a": np.int64(0), "b": np.float32(0.5)})
    w.append({"a": np.int64(1), "b": np.float32(1.5)})  # the whole-step path
    w.append({"a": np.int64(2), "c": np.int32(7)})  # as many keys, one new: learnt
    with pytest.raises(ValueError, match="None"):
        _ = w.history["b"][-1]  # not written at that step
    assert int(w.history["c"][-1].numpy()) == 7
    # A value that is not an array or scalar (a string) takes the general path.
    w.append({"a": np.int64(3), "b": np.float32(2.5), "c": np.int32(8)})
    w.append({"a": np.int64(4), "b": np.float32(3.5), "c": np.int32(9)})  # whole again
    w.create_item("queue", 1.0, {"a": w.history["a"][-2:], "b": w.history["b"][-1]})
    w.flush()
    (data,) = _drain(client, "queue", 1)
    assert data[0].tolist() == [3, 4] and float(data[1]) == 3.5
    w2 = client.trajectory_writer(1)
    w2.append({"s": b"x", "n": np.int64(0)})
    w2.append({"s": "yz", "n": np.int64(1)})  # str: converted to bytes by the general path
    assert w2.history["s"][-1].numpy() == b"yz"
    w.close()
    w2.close()


def test_whole_step_append_converts_python_scalars_and_checks_specs(client):
    w = client.trajectory_writer(2)
    w.append({"a": np.int64(0), "b": np.zeros(2, np.float32)})
    w.append({"a": 1, "b": np.ones(2, np.float32)})  # a Python int: an int64 value
    assert int(w.history["a"][-1].numpy()) == 1
    with pytest.raises(ValueError, match="dtype"):
        w.append({"a": np.int64(2), "b": np.ones(2, np.float64)})
    with pytest.raises(ValueError, match="shape"):
        w.append({"a": np.int64(2), "b": np.ones(3, np.float32)})
    w.close()


def test_python_bools_and_floats_are_stored_exactly_and_others_still_checked(client):
    """A Python bool into a bool column and a Python float into a float64 column are stored
    as they are (numpy converts them exactly); every other mix is converted and checked as
    before."""
    w = client.trajectory_writer(8)
    floats = [0.1, -0.0, 1e300, float("inf"), 2.5e-310]
    for i, f in enumerate(floats):
        w.append({"done": i % 2 == 1, "r": f, "f32": np.float32(i), "i": i})
    w.create_item("queue", 1.0, {k: w.history[k][-5:] for k in ("done", "r", "f32", "i")})
    w.flush()
    (data,) = _drain(client, "queue", 1)
    done, f32, i, r = data
    assert done.dtype == np.bool_ and done.tolist() == [False, True, False, True, False]
    assert r.dtype == np.float64 and r.tolist() == floats
    assert np.signbit(r[1]) and i.dtype == np.int64 and i.tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="dtype"):
        w.append({"done": 1.0, "r": 0.0, "f32": np.float32(0), "i": 0})  # a float, bool column
    with pytest.raises(ValueError, match="dtype"):
        w.append({"done": True, "r": True, "f32": np.float32(0), "i": 0})  # a bool, float column
    with pytest.raises(ValueError, match="dtype"):
        w.append({"done": True, "r": 0.0, "f32": 0.5, "i": 0})  # a Python float, float32 column
    w.close()


def test_items_of_namedtuples_and_nested_dicts_are_packed_right(client):
    """A trajectory that is not a flat dict (a namedtuple of columns, as Acme's adders make,
    nested dicts, a bare column) is flattened and packed by the packer of as many columns,
    kept per structure: its items sample back their steps in the flattened order."""
    import collections

    Transition = collections.namedtuple("Transition", "obs action extras")
    w = client.trajectory_writer(4)
    for i in range(6):
        w.append({"o": np.full(2, i, np.float32), "a": np.int32(i)})
        if i < 3:
            continue
        h = w.history
        w.create_item("queue", 1.0, Transition(h["o"][-3:-1], h["a"][-1], ()))
        w.create_item("queue", 1.0, {"outer": {"a": h["a"][i - 2 : i], "o": h["o"][-1]}})
        w.create_item("queue", 1.0, h["a"][-2:])
    w.flush()
    got = _drain(client, "queue", 9)
    for k, i in enumerate(range(3, 6)):
        obs, action = got[3 * k]
        assert obs[:, 0].tolist() == [i - 2, i - 1] and int(action) == i
        nested_a, nested_o = got[3 * k + 1]
        assert nested_a.tolist() == [i - 2, i - 1] and nested_o.tolist() == [i, i]
        (bare,) = got[3 * k + 2]
        assert bare.tolist() == [i - 1, i]
    with pytest.raises(TypeError, match="TrajectoryColumn"):
        w.create_item("queue", 1.0, Transition(w.history["o"][-1], np.int32(0), ()))
    w.close()


def test_refs_expire_after_keep_values_whatever_the_history_holds(client):
    # While a column's history buffer is exactly its keep-alive window the chunker keeps one
    # deque; a step without the column, a longer history (another column configured to keep
    # more) or end_episode must leave every ref expiring as before: after `keep` values.
    w = client.trajectory_writer(2)
    w.append({"a": np.int64(0), "b": np.int64(10)})
    b0 = w.history["b"][-1]
    w.append({"a": np.int64(1), "b": np.int64(11)})
    b1 = w.history["b"][-1]
    assert not b0.expired
    w.append({"a": np.int64(2)})  # b not written: its window still holds b0 and b1
    assert not b0.expired and not b1.expired
    w.create_item("queue", 1.0, {"b": b0})  # not in the history any more, still live
    w.append({"a": np.int64(3), "b": np.int64(13)})
    assert b0.expired and not b1.expired
    a3 = w.history["a"][-1]
    w.configure(("b",), num_keep_alive_refs=4, max_chunk_length=None)  # histories grow to 4
    w.append({"a": np.int64(4), "b": np.int64(14)})
    assert not a3.expired
    w.append({"a": np.int64(5), "b": np.int64(15)})
    assert a3.expired  # a keeps 2 values, though its history now shows 4 steps
    assert not b1.expired  # b keeps 4: b1, b13, b14, b15
    w.append({"a": np.int64(6), "b": np.int64(16)})
    assert b1.expired
    last = w.history["a"][-1]
    w.end_episode(clear_buffers=True)
    assert last.expired
    for i in range(3):
        w.append({"a": np.int64(20 + i), "b": np.int64(30 + i)})
        if i == 0:
            first = w.history["a"][-1]
    assert first.expired  # a window of 2 again after the episode
    w.flush()
    (data,) = _drain(client, "queue", 1)
    assert int(data[0]) == 10
    w.close()


def test_a_partial_step_keeps_refs_live_as_before(client):
    w = client.trajectory_writer(1)
    w.append({"a": np.int64(0), "b": np.int64(0)})
    a0 = w.history["a"][-1]
    w.append({"b": np.int64(1)}, partial_step=True)  # a reserved (None) in the open step
    assert not a0.expired
    w.append({"a": np.int64(1)})  # completes the step
    assert a0.expired and int(w.history["a"][-1].numpy()) == 1
    w.close()


def test_partial_steps_leave_out_a_column_added_after_they_were_first_seen(client):
    """A step's columns that a partial append leaves out are remembered per step structure
    (``TrajectoryWriter._missing``); a column added later is left out too, and a field set
    twice in one open step is still refused once the steps before it closed."""
    w = client.trajectory_writer(4)
    for i in range(2):  # Acme's adders: the observation first, then the rest
        w.append({"o": np.int64(i)}, partial_step=True)
        w.append({"r": np.float32(i)})
    w.append({"o": np.int64(2), "c": np.int64(20)})  # a new column, in a whole step
    w.append({"o": np.int64(3)}, partial_step=True)  # leaves out r and the new c
    for path in ("c", "r"):  # the open step has no value there (yet)
        with pytest.raises(ValueError, match="None data references"):
            w.history[path][-1]
    w.append({"r": np.float32(3), "c": np.int64(30)})  # both fill the open step
    assert [int(x.numpy()) for x in w.history["c"][-2:]] == [20, 30]
    with pytest.raises(ValueError, match="None data references"):
        w.history["r"][-2]
    assert float(w.history["r"][-1].numpy()) == 3
    w.append({"o": np.int64(4)}, partial_step=True)
    with pytest.raises(ValueError, match="already been set"):
        w.append({"o": np.int64(5)})
    w.append({"r": np.float32(4)}, partial_step=True)  # still open: the flags were set
    with pytest.raises(ValueError, match="already been set"):
        w.append({"r": np.float32(5)})
    w.append({"c": np.int64(40)})
    assert [int(x.numpy()) for x in w.history["o"][-3:]] == [2, 3, 4]
    assert [float(x.numpy()) for x in w.history["r"][-2:]] == [3, 4]
    w.close()


def test_acme_steps_take_the_generated_halves_and_keep_no_history_buffer(client):
    """Steps in two appends with the same keys each time (Acme's adders) are written by the
    writer's generated halves (``step_writers.part_step_writer``) from the second step on,
    and leave every history without a buffer (a reservation filled in the same step): the
    histories' fast reads stay in use. Items of them sample back their steps."""
    w = client.trajectory_writer(3)
    for i in range(6):
        w.append({"o": np.full(2, i, np.float32)}, partial_step=True)
        w.append({"a": np.int32(i), "r": np.float32(i / 2)})
        if i >= 2:
            h = w.history
            w.create_item("queue", 1.0, {"o": h["o"][-3:], "a": h["a"][-3:], "r": h["r"][-1]})
    assert set(w._opening) == {1} and set(w._filling) == {2}
    for path in ("o", "a", "r"):
        assert w.history[path]._buf is None and w.history[path]._pending_lo is None
    w.flush()
    for i, (a, o, r) in enumerate(_drain(client, "queue", 4), start=2):
        assert a.tolist() == [i - 2, i - 1, i] and o[:, 0].tolist() == [i - 2, i - 1, i]
        assert float(r) == i / 2
    # A step that leaves a reserved column without a value sends the next steps to the
    # general path (its history keeps a buffer from then on); the halves still write fine.
    w.append({"o": np.full(2, 6, np.float32)}, partial_step=True)
    w.append({"a": np.int32(6)})  # r stays None at step 6
    w.append({"o": np.full(2, 7, np.float32)}, partial_step=True)
    w.append({"a": np.int32(7), "r": np.float32(3.5)})
    assert [x is None for x in w.history["r"]._buf][-2:] == [True, False]
    assert float(w.history["r"][-1].numpy()) == 3.5
    with pytest.raises(ValueError, match="None data references"):
        w.history["r"][-2]
    w.close()


@pytest.mark.parametrize("chunk", [1, 2, 3, 5])
def test_runs_across_two_chunks_hold_the_right_rows(client, chunk):
    """A run that crosses from one chunk into the next is packed as two slices without a
    look at each step (``pack_columns``): every window of every length, at every position
    against the chunk boundaries, gives the steps it names; so do runs across three or more
    chunks and runs whose first chunk was trimmed (``end_episode(clear_buffers=False)``)."""
    from ostinato.writers.packing import merge_refs, pack_columns

    w = client.trajectory_writer(8, max_chunk_length=chunk)
    want = []
    for i in range(12):
        w.append({"a": np.int64(i), "b": np.full(2, i, np.float32)})
        if i == 6:
            w.end_episode(clear_buffers=False)  # the chunk being filled is trimmed
        for k in range(1, min(i + 1, 8) + 1):
            cols = [w.history["a"][-k:], w.history["b"][-k:]]
            packed, _ = pack_columns(cols)
            # The same slices as the general merge, column by column.
            by_col = packed if isinstance(packed[0], tuple) else (packed[0:3], packed[3:6])
            for col, got in zip(cols, by_col):
                expect = merge_refs(col._refs, 0)
                got = list(got) if isinstance(got[0], tuple) else [tuple(got)]
                assert got == expect, (i, k)
            w.create_item("queue", 1.0, {"a": cols[0], "b": cols[1]})
            want.append(list(range(i - k + 1, i + 1)))
    w.flush()
    got = _drain(client, "queue", len(want))
    for steps, (a, b) in zip(want, got):
        assert a.tolist() == steps and b[:, 0].tolist() == steps
    w.close()


def test_history_slices_of_every_kind_of_start(client):
    w = client.trajectory_writer(3)
    w.append({"a": np.int64(-1)})
    w.end_episode()  # clears the history
    h = w.history["a"]
    with pytest.raises(IndexError):
        h[0]
    assert len(h[0:]) == 0 and len(h[-1:]) == 0  # empty history: empty columns
    for i in range(5):
        w.append({"a": np.int64(i)})
    assert [int(r.numpy()) for r in h[-3:]] == [2, 3, 4]
    assert [int(r.numpy()) for r in h[np.int64(-2) :]] == [3, 4]  # numpy integers too
    assert [int(r.numpy()) for r in h[-1:]] == [4]
    with pytest.raises(ValueError, match="None"):
        h[-4:]  # older than the writer keeps
    with pytest.raises(TypeError):
        h[-2.0:]
    with pytest.raises(TypeError):
        h["x":]
    w.close()
