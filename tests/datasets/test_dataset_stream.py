"""The framework-free sampler and ``ostinato.datasets.numpy``, embedded and networked."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from _dataset_helpers import (
    TABLES_CODE,
    samples_completed,
    table_size,
    write_queue,
    write_trajectories,
    write_varlen,
)

import ostinato as reverb
import ostinato.datasets as datasets
from _helpers import wait_until
from ostinato import errors
from ostinato.core.assemble import gather, stack_batch
from ostinato.core.deadline import Deadline
from ostinato.datasets.options import StreamOptions
from ostinato.datasets.stream import SampleStream


# -- options ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs, quoted",
    [
        ({"max_in_flight_samples_per_worker": 0}, "max_in_flight_samples_per_worker (0)"),
        ({"max_in_flight_samples_per_worker": -1}, "max_in_flight_samples_per_worker (-1)"),
        ({"num_workers_per_iterator": 0}, "num_workers_per_iterator (0)"),
        ({"num_workers_per_iterator": -2}, "num_workers_per_iterator (-2)"),
        ({"max_samples_per_stream": 0}, "max_samples_per_stream (0)"),
        ({"max_samples": 0}, "max_samples (0)"),
        ({"rate_limiter_timeout_ms": -2}, "must be an integer >= -1"),
        ({"max_samples": 1.5}, "max_samples (1.5)"),
        ({"num_workers_per_iterator": True}, "num_workers_per_iterator (True)"),
    ],
)
def test_options_reject_bad_values_and_quote_them(kwargs, quoted):
    with pytest.raises(ValueError, match=quoted.replace("(", r"\(").replace(")", r"\)")):
        StreamOptions(**kwargs)


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"num_workers_per_iterator": 1},
        {"num_workers_per_iterator": -1},
        {"max_samples_per_stream": 1},
        {"max_samples_per_stream": -1},
        {"max_in_flight_samples_per_worker": 1},
        {"rate_limiter_timeout_ms": 0},
    ],
)
def test_options_accept_reverb_values(kwargs):
    StreamOptions(**kwargs)


def test_worker_count_follows_reverb_rule():
    o = StreamOptions(max_in_flight_samples_per_worker=5, num_workers_per_iterator=3, max_samples=4)
    assert o.num_workers(ordered=False, remote=False) == 1
    o = StreamOptions(max_in_flight_samples_per_worker=1, num_workers_per_iterator=3, max_samples=4)
    assert o.num_workers(ordered=False, remote=True) == 3
    assert o.num_workers(ordered=True, remote=True) == 1


def test_numpy_rejects_bad_batch_size(make_server):
    server = make_server(reverb.Table.queue("q", 10))
    with pytest.raises(ValueError, match=r"batch_size \(0\)"):
        datasets.numpy(f"localhost:{server.port}", "q", 0)


def test_unknown_table_fails_at_construction(make_server):
    server = make_server(reverb.Table.queue("q", 10))
    with pytest.raises(errors.TableNotFoundError, match="nope"):
        datasets.numpy(f"localhost:{server.port}", "nope", 4)


# -- data, shapes and dtypes -------------------------------------------------------------------
def test_batches_have_signature_structure_shapes_and_dtypes(serve):
    client = serve(TABLES_CODE)
    write_trajectories(client, "uniform", 50)
    with datasets.numpy(client, "uniform", batch_size=8, max_samples=24) as it:
        batches = list(it)
    assert len(batches) == 3
    for b in batches:
        assert set(b.data) == {"obs", "act"}
        assert b.data["obs"].shape == (8, 3, 4) and b.data["obs"].dtype == np.float32
        assert b.data["act"].shape == (8, 3) and b.data["act"].dtype == np.int32
        assert [a.dtype for a in b.info] == list(reverb.SampleInfo.numpy_dtypes())
        assert all(a.shape == (8,) for a in b.info)
        # Each item is 3 consecutive steps, and obs agrees with act.
        np.testing.assert_array_equal(np.diff(b.data["act"], axis=1), 1)
        np.testing.assert_array_equal(b.data["obs"][:, :, 0], b.data["act"])
        assert b.data["obs"].flags.writeable


def test_table_without_signature_gives_flat_columns(serve):
    client = serve(TABLES_CODE)
    write_trajectories(client, "nosig", 10)
    b = next(datasets.numpy(client, "nosig", batch_size=4, max_samples=4))
    assert isinstance(b.data, list) and len(b.data) == 2
    assert b.data[0].shape == (4, 3) and b.data[1].shape == (4, 3, 4)  # sorted: act, obs


def test_items_one_at_a_time_have_scalar_info(serve):
    client = serve(TABLES_CODE)
    write_trajectories(client, "uniform", 5)
    items = list(datasets.numpy(client, "uniform", batch_size=None, max_samples=7))
    assert len(items) == 7
    assert isinstance(items[0].info.key, np.uint64)
    assert items[0].data["obs"].shape == (3, 4)


def test_variable_length_items(serve):
    client = serve(TABLES_CODE)
    write_varlen(client, "varlen", [1, 2, 3, 4])
    items = list(datasets.numpy(client, "varlen", batch_size=None, max_samples=40))
    assert {len(i.data[0]) for i in items} == {1, 2, 3, 4}
    with pytest.raises(ValueError, match="different shapes"):
        list(datasets.numpy(client, "varlen", batch_size=8, max_samples=40))


def test_emit_timesteps(serve):
    client = serve(TABLES_CODE)
    write_trajectories(client, "uniform", 20)
    with datasets.numpy(client, "uniform", batch_size=6, max_samples=4, emit_timesteps=True) as it:
        batches = list(it)
    assert [len(b.info.key) for b in batches] == [6, 6]  # 4 items x 3 steps
    b = batches[0]
    assert b.data["obs"].shape == (6, 4) and b.data["act"].shape == (6,)
    # Steps of one item come together, with its info repeated.
    assert b.info.key[0] == b.info.key[1] == b.info.key[2]
    assert b.data["act"][1] == b.data["act"][0] + 1


def test_timesteps_of_variable_length_items(serve):
    client = serve(TABLES_CODE)
    write_varlen(client, "varlen", [2, 3])
    rows = list(
        datasets.numpy(client, "varlen", batch_size=None, max_samples=10, emit_timesteps=True)
    )
    assert 20 <= len(rows) <= 30
    assert all(r.data[0].shape == (2,) for r in rows)


def test_timesteps_need_equal_column_lengths(make_server):
    server = make_server(
        reverb.Table(
            name="t",
            sampler=reverb.selectors.Uniform(),
            remover=reverb.selectors.Fifo(),
            max_size=10,
            rate_limiter=reverb.rate_limiters.MinSize(1),
        )
    )
    client = server.localhost_client()
    with client.trajectory_writer(num_keep_alive_refs=2) as w:
        w.append({"a": 1.0, "b": 2.0})
        w.append({"a": 1.0, "b": 2.0})
        w.create_item("t", 1.0, {"a": w.history["a"][-2:], "b": w.history["b"][-1:]})
    with pytest.raises(errors.InvalidArgumentError, match="cannot be decomposed into timesteps"):
        list(datasets.numpy(client, "t", batch_size=None, max_samples=1, emit_timesteps=True))


def test_embedded_and_networked_give_the_same_data(make_server):
    server = make_server(
        reverb.Table.queue("q", 100, signature={"x": reverb.TensorSpec([], np.int64)})
    )
    address = f"localhost:{server.port}"
    write_queue(reverb.Client(address), "q", range(40))
    embedded = list(datasets.numpy(address, "q", batch_size=8, max_samples=20))
    networked = list(
        datasets.numpy(reverb.Client(address, in_process=False), "q", batch_size=8, max_samples=20)
    )
    assert [b.data["x"].tolist() for b in embedded] == [
        list(range(0, 8)),
        list(range(8, 16)),
        list(range(16, 20)),
    ]
    assert [b.data["x"].tolist() for b in networked] == [
        list(range(20, 28)),
        list(range(28, 36)),
        list(range(36, 40)),
    ]
    for e, n in zip(embedded, networked):
        assert e.data["x"].dtype == n.data["x"].dtype
        assert [a.dtype for a in e.info] == [a.dtype for a in n.info]


# -- max_samples, ordering, bounded prefetch ---------------------------------------------------
@pytest.mark.parametrize("workers, in_flight", [(1, 1), (1, 5), (3, 1), (3, 5)])
def test_max_samples_takes_no_item_beyond_it(serve, workers, in_flight):
    client = serve(TABLES_CODE)
    write_queue(client, "queue", range(10))
    it = datasets.numpy(
        client,
        "queue",
        batch_size=None,
        max_samples=4,
        num_workers_per_iterator=workers,
        max_in_flight_samples_per_worker=in_flight,
    )
    got = [int(s.data["x"]) for s in it]
    assert got == [0, 1, 2, 3]
    time.sleep(0.2)
    assert table_size(client, "queue") == 6
    nxt = next(datasets.numpy(client, "queue", batch_size=None, max_samples=1))
    assert int(nxt.data["x"]) == 4


def test_queue_order_is_kept_with_many_workers_requested(serve):
    client = serve(TABLES_CODE)
    write_queue(client, "queue", range(100))
    it = datasets.numpy(
        client,
        "queue",
        batch_size=7,
        max_samples=100,
        num_workers_per_iterator=4,
        max_in_flight_samples_per_worker=3,
    )
    assert it.sampler.num_workers == 1
    got = np.concatenate([b.data["x"] for b in it])
    np.testing.assert_array_equal(got, np.arange(100))


def test_deterministic_sampler_gets_one_worker(serve):
    client = serve(TABLES_CODE)
    write_queue(client, "fifo_keep", range(3))
    with SampleStream(client, "fifo_keep", num_workers_per_iterator=4) as s:
        assert s.ordered and s.num_workers == 1


@pytest.mark.parametrize("in_flight", [1, 3, 7])
def test_fetches_whole_requests(serve, in_flight):
    client = serve(TABLES_CODE)
    write_trajectories(client, "uniform", 20)
    before = samples_completed(client, "uniform")
    it = datasets.numpy(
        client,
        "uniform",
        batch_size=None,
        max_in_flight_samples_per_worker=in_flight,
        num_workers_per_iterator=1,
    )
    for _ in range(10):
        next(it)
        assert (samples_completed(client, "uniform") - before) % in_flight == 0
    it.close()


def test_prefetch_is_bounded(serve):
    client = serve(TABLES_CODE)
    write_trajectories(client, "uniform", 20)
    before = samples_completed(client, "uniform")
    it = datasets.numpy(
        client,
        "uniform",
        batch_size=4,
        max_in_flight_samples_per_worker=4,
        num_workers_per_iterator=2,
    )
    next(it)
    time.sleep(0.5)  # give the workers every chance to run ahead
    fetched = samples_completed(client, "uniform") - before
    # One batch taken, plus at most in_flight * workers held or requested.
    assert fetched <= 4 + 4 * 2
    it.close()


@pytest.mark.parametrize("timesteps", [False, True])
def test_pieces_are_cut_to_max_piece_items_in_order(make_server, timesteps):
    server = make_server(reverb.Table.queue("q", 100))
    client = server.localhost_client()
    with client.trajectory_writer(num_keep_alive_refs=3) as w:
        for i in range(10):
            for t in range(1 + i % 3):  # items of 1, 2 and 3 steps
                w.append({"x": np.int64(10 * i + t)})
            w.create_item("q", 1.0, {"x": w.history["x"][-(1 + i % 3) :]})
            w.end_episode()
    want = [[10 * i + t for t in range(1 + i % 3)] for i in range(10)]
    with SampleStream(
        client,
        "q",
        max_in_flight_samples_per_worker=10,
        max_samples=10,
        emit_timesteps=timesteps,
        max_piece_items=4,
    ) as s:
        pieces = [s.next_piece() for _ in range(3)]
        assert s.next_piece() is None
    assert [p.num_samples for p in pieces] == [4, 4, 2]
    got = []
    for p in pieces:
        if timesteps:
            assert len(p) == int(p.item_rows.sum())
            got.extend(int(x) for x in p.columns[0])
        else:
            got.extend([int(v) for v in np.atleast_1d(r[0])] for r in p.row_data)
    assert got == (sum(want, []) if timesteps else want)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_max_piece_items_is_validated(make_server, bad):
    server = make_server(reverb.Table.queue("q", 10))
    with pytest.raises(ValueError, match=rf"max_piece_items \({bad!r}\)"):
        SampleStream(server.localhost_client(), "q", max_piece_items=bad)


def test_set_in_flight_bounds_and_validates(serve):
    client = serve(TABLES_CODE)
    write_trajectories(client, "uniform", 20)
    with SampleStream(
        client, "uniform", max_in_flight_samples_per_worker=2, num_workers_per_iterator=1
    ) as s:
        for n, request in [(0, None), (4, 0), (4, 5)]:
            with pytest.raises(ValueError):
                s.set_in_flight(n, request_size=request)
        before = samples_completed(client, "uniform")
        s.set_in_flight(12, request_size=6)
        s.next_piece()
        time.sleep(0.5)  # the worker runs ahead as far as it may
        fetched = samples_completed(client, "uniform") - before
        # The first piece taken (2 items, or 6 once the new size was seen) plus at most 12 held.
        assert fetched <= 6 + 12
        assert fetched % 2 == 0


# -- timeouts ---------------------------------------------------------------------------------
def test_timeout_zero_on_empty_table_ends_at_once(serve):
    client = serve(TABLES_CODE)
    t0 = time.monotonic()
    it = datasets.numpy(client, "empty", batch_size=4, rate_limiter_timeout_ms=0)
    assert list(it) == []
    assert it.timed_out
    assert time.monotonic() - t0 < 5


@pytest.mark.parametrize("timeout_ms", [300, 1000])
def test_timeout_ends_stream_after_the_timeout(serve, timeout_ms):
    client = serve(TABLES_CODE)
    t0 = time.monotonic()
    it = datasets.numpy(client, "empty", batch_size=4, rate_limiter_timeout_ms=timeout_ms)
    assert list(it) == []
    dt = time.monotonic() - t0
    assert timeout_ms / 1000 <= dt < timeout_ms / 1000 * 2 + 3


def test_timeout_zero_still_returns_available_items(serve):
    client = serve(TABLES_CODE)
    write_queue(client, "queue", range(5))
    got = [
        int(s.data["x"])
        for s in datasets.numpy(client, "queue", batch_size=None, rate_limiter_timeout_ms=0)
    ]
    assert got == [0, 1, 2, 3, 4]


def test_timeout_delivers_the_partial_last_batch(serve):
    client = serve(TABLES_CODE)
    write_queue(client, "queue", range(25))
    it = datasets.numpy(
        client,
        "queue",
        batch_size=10,
        rate_limiter_timeout_ms=300,
        max_in_flight_samples_per_worker=4,
    )
    sizes = [len(b.data["x"]) for b in it]
    assert sizes == [10, 10, 5] and it.timed_out
    assert table_size(client, "queue") == 0
    it = datasets.numpy(
        client, "queue", batch_size=10, rate_limiter_timeout_ms=0, drop_remainder=True
    )
    assert list(it) == []


def test_stream_waits_for_late_inserts(serve):
    client = serve(TABLES_CODE)

    def late():
        time.sleep(0.5)
        write_queue(client, "queue", range(3))

    th = threading.Thread(target=late)
    th.start()
    got = [
        int(s.data["x"])
        for s in datasets.numpy(
            client, "queue", batch_size=None, max_samples=3, rate_limiter_timeout_ms=5000
        )
    ]
    th.join()
    assert got == [0, 1, 2]


def test_close_stops_a_sampler_blocked_on_an_empty_table(serve):
    client = serve(TABLES_CODE)
    s = SampleStream(client, "empty")
    wait_until(
        lambda: client.metrics()["tables"]["empty"]["blocked_samplers"] >= 1,
        10,
        "the stream's sampler to block",
    )
    t0 = time.monotonic()
    s.close()
    assert time.monotonic() - t0 < 3
    assert not any(th.is_alive() for th in s._threads)
    assert s.next_piece() is None


def test_error_after_delivered_items_is_raised(make_server):
    server = make_server(reverb.Table.queue("q", 10))
    client = server.localhost_client()
    write_queue(client, "q", range(3))
    it = datasets.numpy(client, "q", batch_size=None, max_in_flight_samples_per_worker=3)
    assert int(next(it).data[0]) == 0
    server.stop()
    got = [int(next(it).data[0]) for _ in range(2)]
    assert got == [1, 2]  # fetched before the server stopped
    with pytest.raises((errors.CancelledError, errors.UnavailableError)):
        next(it)


# -- gather -----------------------------------------------------------------------------------
def test_gather_matches_stack_batch_for_items_spanning_chunks(make_server):
    server = make_server(
        reverb.Table(
            name="t",
            sampler=reverb.selectors.Uniform(),
            remover=reverb.selectors.Fifo(),
            max_size=10_000,
            rate_limiter=reverb.rate_limiters.MinSize(1),
        )
    )
    client = server.localhost_client()
    obs = np.arange(3000 * 8, dtype=np.float32).reshape(3000, 8)
    with client.trajectory_writer(num_keep_alive_refs=5) as w:
        for i in range(3000):
            w.append({"o": obs[i], "s": np.int16(i)})
            if i >= 4:
                w.create_item("t", 1.0, {"o": w.history["o"][-5:], "s": w.history["s"][-1]})
    batch = client.transport.sample("t", 500, Deadline.never())
    got = gather(batch)
    want = stack_batch(batch)
    assert got is not None
    for g, wnt in zip(got, want):
        assert g.dtype == wnt.dtype and g.shape == wnt.shape
        np.testing.assert_array_equal(g, wnt)
    assert got[0].shape == (500, 5, 8) and got[1].shape == (500,)
    np.testing.assert_array_equal(got[0][:, -1, 0] / 8, got[1])


def test_heap_table_order_is_kept(make_server):
    server = make_server(
        reverb.Table(
            name="h",
            sampler=reverb.selectors.MaxHeap(),
            remover=reverb.selectors.Fifo(),
            max_size=100,
            max_times_sampled=1,
            rate_limiter=reverb.rate_limiters.MinSize(1),
        )
    )
    client = reverb.Client(f"localhost:{server.port}", in_process=False)
    values = np.random.default_rng(3).permutation(30)
    with client.trajectory_writer(num_keep_alive_refs=1) as w:
        for v in values:
            w.append({"x": np.int64(v)})
            w.create_item("h", float(v), {"x": w.history["x"][-1]})
    it = datasets.numpy(
        client,
        "h",
        batch_size=4,
        max_samples=30,
        num_workers_per_iterator=3,
        max_in_flight_samples_per_worker=2,
    )
    assert it.sampler.num_workers == 1
    got = np.concatenate([b.data[0] for b in it])
    np.testing.assert_array_equal(got, np.arange(29, -1, -1))
