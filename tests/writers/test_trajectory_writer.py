"""TrajectoryWriter tests (after Reverb's trajectory_writer_test.py), against a real server."""

import numpy as np
import pytest

import ostinato as reverb
from ostinato import errors


@pytest.fixture()
def client(make_server):
    server = make_server(
        reverb.Table.queue("queue", 100),
        reverb.Table(
            "uniform",
            reverb.selectors.Uniform(),
            reverb.selectors.Fifo(),
            1000,
            reverb.rate_limiters.MinSize(1),
        ),
        reverb.Table.queue("tiny", 1),
    )
    return server.localhost_client()


def _drain(client, table, n):
    return [s.data for s in client.sample(table, n, emit_timesteps=False)]


def test_history_requires_append_first(client):
    w = client.trajectory_writer(2)
    with pytest.raises(RuntimeError, match="before `append`"):
        _ = w.history


def test_history_flat_data(client):
    w = client.trajectory_writer(10)
    for i in range(3):
        w.append(np.int64(i))
    assert [r.numpy() for r in w.history] == [0, 1, 2]
    assert w.history[:].numpy().tolist() == [0, 1, 2]


def test_history_structured_with_new_fields(client):
    w = client.trajectory_writer(10)
    w.append({"x": np.int64(1)})
    w.append({"y": np.float32(2)})
    w.append({"x": np.int64(3), "z": np.int32(4)})
    h = w.history
    assert set(h) == {"x", "y", "z"}
    assert [None if r is None else int(r.numpy()) for r in h["x"]] == [1, None, 3]
    assert [r is None for r in h["y"]] == [True, False, True]
    assert [r is None for r in h["z"]] == [True, True, False]
    assert h["x"]._path == ("x",)


@pytest.mark.parametrize(
    "first,second",
    [
        ((np.int64(1),), (np.int64(1), np.int64(2))),
        ([np.int64(1)], [np.int64(1), np.int64(2)]),
        ({"a": np.int64(1)}, {"a": np.int64(1), "b": np.int64(2)}),
    ],
)
def test_append_with_more_fields(client, first, second):
    w = client.trajectory_writer(5)
    w.append(first)
    w.append(second)
    assert len(w._columns) == 2


def test_partial_append_fills_one_step(client):
    w = client.trajectory_writer(5)
    w.append({"x": np.int64(1)}, partial_step=True)
    w.append({"y": np.int64(2)}, partial_step=True)
    w.append({"z": np.int64(3)})
    w.append({"x": np.int64(4), "y": np.int64(5), "z": np.int64(6)})
    assert len(w.history["x"]) == 2
    assert w.history["y"][0].numpy() == 2 and w.history["z"][1].numpy() == 6
    assert w.episode_steps == 2


def test_columns_must_not_appear_twice_in_a_step(client):
    w = client.trajectory_writer(5)
    w.append({"x": np.int64(1), "y": np.int64(1)}, partial_step=True)
    w.append({"x": None, "y": None}, partial_step=True)  # None is allowed
    with pytest.raises(
        ValueError,
        match=r"Field \('x',\) has already been set in the active step "
        r"by previous \(partial\) append call and thus must be "
        r"omitted or set to None but got: 4",
    ):
        w.append({"x": 4})


def test_create_item_checks_type_of_leaves(client):
    w = client.trajectory_writer(5)
    w.append({"x": np.int64(1)})
    w.create_item("uniform", 1.0, {"x": w.history["x"][0]})
    with pytest.raises(TypeError, match="TrajectoryColumn"):
        w.create_item("uniform", 1.0, {"x": np.int64(1)})


def test_flush_checks_block_until_num_items(client):
    w = client.trajectory_writer(5)
    w.flush(0)
    w.flush(1)
    with pytest.raises(ValueError, match="block_until_num_items must be >= 0, got -1"):
        w.flush(-1)


def test_history_indexing(client):
    w = client.trajectory_writer(10)
    for v in (1, 2, 3):
        w.append(np.int64(v))
    h = w.history
    assert h[0].numpy() == 1 and h[-1].numpy() == 3
    assert h[:2].numpy().tolist() == [1, 2]
    assert h[-2:].numpy().tolist() == [2, 3]
    assert h[[0, -1]].numpy().tolist() == [1, 3]
    assert h[[1, 0, 2]].numpy().tolist() == [2, 1, 3]
    with pytest.raises(TypeError):
        h["x"]


def test_history_slicing_to_len_is_not_empty(client):
    """Reverb bug §4.2.4: h[i:len(h)] was empty and h[len(h)] returned the oldest step."""
    w = client.trajectory_writer(10)
    for v in range(4):
        w.append(np.int64(v))
    h = w.history
    assert h[1 : len(h)].numpy().tolist() == [1, 2, 3]
    assert h[0 : len(h) : 2].numpy().tolist() == [0, 2]
    with pytest.raises(IndexError):
        h[len(h)]


def test_old_steps_are_none(client):
    w = client.trajectory_writer(2)
    for v in range(5):
        w.append(np.int64(v))
    h = w.history
    assert len(h) == 5
    with pytest.raises(ValueError, match="cannot contain any None"):
        h[0]
    with pytest.raises(ValueError, match="cannot contain any None"):
        h[:]
    assert h[-2:].numpy().tolist() == [3, 4]


def test_configure_validates(client):
    w = client.trajectory_writer(5)
    for n, m in [(1, None), (1, 1), (5, 5)]:
        w.configure(("x",), num_keep_alive_refs=n, max_chunk_length=m)
    for n, m in [(0, None), (-1, None), (1, 0), (1, -1), (4, 5)]:
        with pytest.raises(ValueError):
            w.configure(("x",), num_keep_alive_refs=n, max_chunk_length=m)


def test_configure_unseen_column_applies_later(client):
    w = client.trajectory_writer(2)
    w.configure(("z",), num_keep_alive_refs=4, max_chunk_length=3)
    w.append({"x": np.int64(1)})
    w.append({"x": np.int64(2), "z": np.int64(3)})
    col = w._path_to_column[("z",)]
    assert col.chunker.num_keep_alive_refs == 4 and col.chunker.max_chunk_length == 3
    assert w.max_num_keep_alive_refs == 4


def test_episode_steps(client):
    w = client.trajectory_writer(2)
    for episode in range(3):
        assert w.episode_steps == 0
        for i in range(1, 4):
            w.append({"x": np.int64(i)})
            assert w.episode_steps == i
        w.end_episode(clear_buffers=episode % 2 == 0)
    w.append({"x": np.int64(1)}, partial_step=True)
    assert w.episode_steps == 0
    w.append({"y": np.int64(1)})
    assert w.episode_steps == 1


def test_exit_flushes_unless_reverb_error(client):
    w = client.trajectory_writer(1)
    with pytest.raises(errors.DeadlineExceededError):
        with w:
            w.append({"x": np.int64(1)})
            for _ in range(3):
                w.create_item("tiny", 1.0, {"x": w.history["x"][-1]})
            raise errors.DeadlineExceededError("boom")  # __exit__ must not block on flush
    assert w.num_pending_items >= 2  # the queue holds 1: at least 2 wait, none was flushed
    w.close()


def test_timeout_on_flush(client):
    w = client.trajectory_writer(1)
    with pytest.raises(reverb.DeadlineExceededError, match="Flush call did not complete"):
        for i in range(4):
            w.append({"x": np.int64(i)})
            w.create_item("tiny", 1.0, {"x": w.history["x"][-1]})
            w.flush(timeout_ms=1)
    w.close()


def test_timeout_on_end_episode_still_starts_new_episode(client):
    """Reverb bug §4.3.2: a timed-out end_episode did not reset the episode."""
    w = client.trajectory_writer(1)
    w.append({"x": np.int64(0)})
    w.create_item("tiny", 1.0, {"x": w.history["x"][-1]})
    w.append({"x": np.int64(1)})
    w.create_item("tiny", 1.0, {"x": w.history["x"][-1]})
    with pytest.raises(reverb.DeadlineExceededError, match="End episode call"):
        w.end_episode(clear_buffers=True, timeout_ms=0)
    assert w.episode_steps == 0 and len(w.history["x"]) == 0
    # The pending item is still delivered once there is room.
    assert _drain(client, "tiny", 1)[0][0] == 0
    w.flush(timeout_ms=2000)
    assert _drain(client, "tiny", 1)[0][0] == 1
    w.close()


def test_flush_timeout_zero_means_now(client):
    """Reverb bug §4.3.1: flush(timeout_ms=0) waited forever while end_episode(0) did not."""
    w = client.trajectory_writer(1)
    for i in range(2):
        w.append({"x": np.int64(i)})
        w.create_item("tiny", 1.0, {"x": w.history["x"][-1]})
    with pytest.raises(reverb.DeadlineExceededError):
        w.flush(timeout_ms=0)
    w.close()


def test_dtype_of_columns_are_validated(client):
    w = client.trajectory_writer(5)
    w.append(
        {"scalar": np.int64(1), "nest": {"sub": 1.0, "sub_list": [np.int64(1), np.float32(1)]}}
    )
    with pytest.raises(ValueError, match=r"column \('scalar',\)\. Got double but expected int64\."):
        w.append({"scalar": 1.0, "nest": {"sub": 1.0, "sub_list": [np.int64(1), np.float32(1)]}})
    with pytest.raises(
        ValueError, match=r"column \('nest', 'sub'\)\. Got int64 but expected double\."
    ):
        w.append(
            {"scalar": np.int64(1), "nest": {"sub": 1, "sub_list": [np.int64(1), np.float32(1)]}}
        )
    with pytest.raises(ValueError, match=r"column \('nest', 'sub_list', 1\)"):
        w.append({"scalar": np.int64(1), "nest": {"sub": 1.0, "sub_list": [np.int64(1), 1.0]}})


def test_shapes_of_columns_are_validated(client):
    w = client.trajectory_writer(5)
    w.append({"a": np.int64(1), "b": np.zeros(2), "c": np.zeros(3)})
    with pytest.raises(ValueError, match=r"Got \[2\] which is incompatible with \[\]"):
        w.append({"a": np.zeros(2, np.int64)})
    with pytest.raises(ValueError, match=r"Got \[1,2\] which is incompatible with \[2\]"):
        w.append({"b": np.zeros((1, 2))})
    with pytest.raises(ValueError, match=r"Got \[10\] which is incompatible with \[3\]"):
        w.append({"c": np.zeros(10)})


def test_trajectory_column_numpy_and_shape(client):
    w = client.trajectory_writer(10)
    for i in range(5):
        w.append({"a": np.int64(i), "b": np.full((3, 4, 2), i, np.float32)})
        col = w.history["a"][:]
        np.testing.assert_array_equal(col.numpy(), np.arange(i + 1))
        assert w.history["a"][-1].numpy() == i
        assert w.history["b"][:].shape == (i + 1, 3, 4, 2)
        assert w.history["b"][-1].shape == (3, 4, 2)
        assert w.history["b"][:].dtype == np.float32


def test_trajectory_column_validation(client):
    w = client.trajectory_writer(10)
    w.append({"a": np.int64(1)})
    ref = list(w.history["a"])[0]
    reverb.TrajectoryColumn([ref], squeeze=True)
    with pytest.raises(ValueError, match="exactly one data reference"):
        reverb.TrajectoryColumn([], squeeze=True)
    with pytest.raises(ValueError, match="exactly one data reference"):
        reverb.TrajectoryColumn([ref, ref], squeeze=True)
    with pytest.raises(ValueError, match="cannot contain any None"):
        reverb.TrajectoryColumn([ref, None])
    for i in range(1, 4):
        assert len(reverb.TrajectoryColumn([ref] * i)) == i


def test_empty_column_is_rejected_not_crashing(client):
    """Reverb bug §4.2.3: an empty column next to non-empty ones segfaulted."""
    w = client.trajectory_writer(5)
    w.append({"a": np.int64(1), "b": np.int64(2)})
    with pytest.raises(ValueError, match="empty"):
        w.create_item("uniform", 1.0, {"a": w.history["a"][:], "b": w.history["b"][5:]})


def test_expired_refs_are_rejected(client):
    w = client.trajectory_writer(1)
    w.append({"a": np.int64(1)})
    col = w.history["a"][-1]
    w.append({"a": np.int64(2)})
    with pytest.raises(ValueError, match="expired"):
        w.create_item("uniform", 1.0, {"a": col})
    with pytest.raises(RuntimeError, match="expired"):
        col.numpy()


def test_items_sampled_back_exactly(client):
    w = client.trajectory_writer(5, max_chunk_length=4)
    for i in range(10):
        w.append({"obs": np.full(2, i, np.float32), "act": np.int32(i)})
        if i >= 4:
            w.create_item(
                "queue", 1.0, {"obs": w.history["obs"][-5:], "act": w.history["act"][[-1, -3]]}
            )
    w.flush()
    for i, (act, obs) in enumerate(_drain(client, "queue", 6)):  # dict keys sorted
        assert obs[:, 0].tolist() == list(range(i, i + 5))
        assert act.tolist() == [i + 4, i + 2]


def test_closed_writer_raises(client):
    w = client.trajectory_writer(1)
    w.close()
    with pytest.raises(RuntimeError, match="Close has been called"):
        w.append({"a": 1})


def test_flush_after_close_returns_as_nothing_is_pending(client):
    # Acme's ReverbAdder.__del__ flushes then closes; its tests call __del__ by hand, so the
    # collector's call flushes a closed writer (Reverb raised: "Exception ignored in" noise).
    w = client.trajectory_writer(2)
    w.append({"a": 1})
    w.create_item("queue", 1.0, {"a": w.history["a"][-1]})
    for _ in range(2):
        w.flush(0, timeout_ms=10_000)
        w.close()
    assert client.server_info()["queue"].current_size == 1
    with pytest.raises(RuntimeError, match="Close has been called"):
        w.end_episode()
    with pytest.raises(ValueError, match="block_until_num_items must be >= 0"):
        w.flush(-1)


def test_writer_blocks_instead_of_growing_without_bound(client):
    w = client.trajectory_writer(1, max_pending_items=3)
    for i in range(4):
        w.append({"x": np.int64(i)})
        w.create_item("tiny", 1.0, {"x": w.history["x"][-1]})
    w.append({"x": np.int64(9)})
    with pytest.raises(reverb.DeadlineExceededError, match="pending"):
        w.create_item("tiny", 1.0, {"x": w.history["x"][-1]}, timeout_ms=50)
    assert w.num_pending_items == 3
    w.close()


# -- Reverb 0.7's `get_signature_timeout_ms` (Acme 0.4 passes it) ---------------------------------


@pytest.mark.parametrize("timeout_ms", [300_000, 0, np.int32(5)])
def test_get_signature_timeout_ms_is_accepted_and_items_are_validated(client, timeout_ms):
    with client.trajectory_writer(num_keep_alive_refs=2, get_signature_timeout_ms=timeout_ms) as w:
        w.append({"x": np.int32(1)})
        w.create_item("queue", 1.0, {"x": w.history["x"][-1]})
        with pytest.raises(errors.TableNotFoundError, match="nope"):
            w.create_item("nope", 1.0, {"x": w.history["x"][-1]})
    assert client.server_info()["queue"].current_size == 1


def test_get_signature_timeout_ms_none_skips_validation_as_reverb_07_did(make_server):
    server = make_server(
        reverb.Table(
            "p",
            reverb.selectors.Prioritized(1.0),
            reverb.selectors.Fifo(),
            10,
            reverb.rate_limiters.MinSize(1),
        )
    )
    client = server.localhost_client()
    with client.trajectory_writer(2, get_signature_timeout_ms=None) as w:
        assert w._validate is False
        w.append({"x": 1})
        w.create_item("p", 1.0, {"x": w.history["x"][-1]})
    assert client.server_info()["p"].current_size == 1
    assert client.trajectory_writer(2)._validate is True


@pytest.mark.parametrize("bad", [-1, 1.5, True, "100"])
def test_get_signature_timeout_ms_must_be_none_or_non_negative_integer(client, bad):
    with pytest.raises(
        ValueError,
        match=rf"get_signature_timeout_ms \({bad!r}\) must be None or "
        r"a non-negative integer \(milliseconds\)",
    ):
        client.trajectory_writer(2, get_signature_timeout_ms=bad)


def test_get_signature_timeout_ms_bounds_the_wait_for_an_unreachable_server():
    import time

    client = reverb.Client("localhost:1", in_process=False)
    w = client.trajectory_writer(2, get_signature_timeout_ms=300)
    w.append({"x": 1})
    start = time.monotonic()
    with pytest.raises(
        errors.DeadlineExceededError,
        match=r"signature of table 'q' within get_signature_timeout_ms=300",
    ):
        w.create_item("q", 1.0, {"x": w.history["x"][-1]})
    assert time.monotonic() - start < 5


def test_get_signature_timeout_ms_over_the_network(make_server):
    server = make_server(reverb.Table.queue("q", 10))
    client = reverb.Client(f"localhost:{server.port}", in_process=False)
    with client.trajectory_writer(2, get_signature_timeout_ms=3000) as w:
        w.append({"x": 1})
        w.create_item("q", 1.0, {"x": w.history["x"][-1]})
        with pytest.raises(errors.TableNotFoundError):
            w.create_item("nope", 1.0, {"x": w.history["x"][-1]})
    assert client.server_info()["q"].current_size == 1


def test_dict_steps_and_items_in_any_key_order(client):
    """Whole steps and items are taken apart by their keys (an itemgetter of the columns'
    keys), whatever order a dict lists them in; a dict of other keys takes the general path."""
    w = client.trajectory_writer(4)
    w.append({"a": np.int32(1), "b": np.float32(2.0)})
    w.append({"b": np.float32(20.0), "a": np.int32(10)})  # same keys, other order
    w.append({"a": np.int32(100), "c": np.float32(3.0)})  # another key: b is missing
    w.append({"b": np.float32(40.0), "a": np.int32(1000), "c": np.float32(4.0)})
    assert [r.numpy() for r in w.history["a"]] == [1, 10, 100, 1000]
    assert [None if r is None else float(r.numpy()) for r in w.history["b"]] == [
        2.0,
        20.0,
        None,
        40.0,
    ]
    assert [None if r is None else float(r.numpy()) for r in w.history["c"]] == [
        None,
        None,
        3.0,
        4.0,
    ]
    h = w.history
    w.create_item("uniform", 1.0, {"b": h["b"][-1], "a": h["a"][-3:]})
    w.create_item("uniform", 1.0, {"a": h["a"][-1], "b": h["b"][-1]})  # same keys, other order
    w.create_item("uniform", 1.0, {"c": h["c"][-2:]})
    w.flush()
    got = _drain(client, "uniform", 50)  # columns in sorted key order (no signature)
    kinds = set()
    for d in got:
        if len(d) == 1:  # {"c": h["c"][-2:]}
            np.testing.assert_array_equal(d[0], [3.0, 4.0])
            kinds.add("c")
        elif np.ndim(d[0]) == 1:  # {"b": h["b"][-1], "a": h["a"][-3:]}
            np.testing.assert_array_equal(d[0], [10, 100, 1000])
            assert float(d[1]) == 40.0
            kinds.add("a3")
        else:  # {"a": h["a"][-1], "b": h["b"][-1]}
            assert int(d[0]) == 1000 and float(d[1]) == 40.0
            kinds.add("a1")
    assert kinds == {"c", "a3", "a1"}


def test_single_column_dict_steps(client):
    w = client.trajectory_writer(3)
    for i in range(5):
        w.append({"x": np.float32(i)})
        w.create_item("queue", 1.0, {"x": w.history["x"][-1]})
    w.flush()
    assert [float(d[0]) for d in _drain(client, "queue", 5)] == [0.0, 1.0, 2.0, 3.0, 4.0]


def test_partial_step_value_that_fails_keeps_the_reserved_step(client):
    """A partial step reserves each column's step; a value refused when the step is filled
    leaves the reservation in place (the history keeps its length)."""
    w = client.trajectory_writer(3)
    w.append({"a": np.float32(1.0), "b": np.float32(1.0)})
    w.append({"a": np.float32(2.0)}, partial_step=True)
    with pytest.raises(ValueError, match="dtype"):
        w.append({"b": np.int64(5)})  # wrong dtype for b
    assert len(w.history["b"]) == 2
    w.append({"b": np.float32(2.0)})
    assert [float(r.numpy()) for r in w.history["b"]] == [1.0, 2.0]
    assert w.episode_steps == 2
