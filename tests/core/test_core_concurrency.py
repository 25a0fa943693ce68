"""Many writer and sampler threads on one table: nothing lost, nothing duplicated, no hangs.

Every blocking call has a timeout and every thread is joined with a timeout, so a bug fails
the test instead of hanging it. Threads are daemons so that a stuck one cannot keep the test
process alive.
"""

from __future__ import annotations

import collections
import contextlib
import sys
import threading
import time

import numpy as np
import pytest

import ostinato as reverb
from _helpers import wait_until
from ostinato import errors
from ostinato.core import Chunk
from ostinato.core.deadline import Deadline

JOIN_TIMEOUT = 60.0


@pytest.fixture
def frequent_thread_switches():
    """Switch threads far more often than the default 5 ms, so that races get a chance."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        yield
    finally:
        sys.setswitchinterval(old)


@contextlib.contextmanager
def _serve(*tables):
    server = reverb.Server(list(tables))
    try:
        yield server, server.localhost_client()
    finally:
        server.stop()


class _Threads:
    """Starts daemon threads, records their exceptions, joins them with a timeout."""

    def __init__(self) -> None:
        self.threads: list[threading.Thread] = []
        self.errors: list[BaseException] = []

    def start(self, fn, *args) -> None:
        def run():
            try:
                fn(*args)
            except BaseException as e:  # noqa: BLE001 - reported by join_all
                self.errors.append(e)

        t = threading.Thread(target=run, daemon=True)
        t.start()
        self.threads.append(t)

    def join_all(self, timeout: float = JOIN_TIMEOUT) -> None:
        end = time.monotonic() + timeout
        for t in self.threads:
            t.join(max(0.0, end - time.monotonic()))
        alive = [t for t in self.threads if t.is_alive()]
        assert not alive, f"{len(alive)} thread(s) did not finish within {timeout}s"
        assert not self.errors, f"thread errors: {self.errors!r}"


def _run_writers_and_samplers(
    server, table_name, num_writers, per_writer, num_samplers, expected_times
):
    """Returns the Counter of sampled values once every value was sampled expected_times."""
    total = num_writers * per_writer * expected_times
    seen: collections.Counter = collections.Counter()
    times_by_key: dict[int, list[int]] = collections.defaultdict(list)
    lock = threading.Lock()
    stop = threading.Event()
    writers = _Threads()
    samplers = _Threads()

    def insert_writer(w):
        client = server.localhost_client()
        for i in range(per_writer):
            client.insert(np.int64(w * per_writer + i), {table_name: 1.0}, timeout=30)

    def trajectory_writer(w):
        client = server.localhost_client()
        with client.trajectory_writer(2, max_pending_items=4) as tw:
            for i in range(per_writer):
                tw.append({"v": np.int64(w * per_writer + i)})
                # [-1:] (not [-1]) so that items look like client.insert's: one unsqueezed step.
                tw.create_item(table_name, 1.0, {"v": tw.history["v"][-1:]}, timeout_ms=30_000)
            tw.flush(timeout_ms=30_000)

    def record(values, keys, times):
        with lock:
            seen.update(values)
            for k, t in zip(keys, times):
                times_by_key[k].append(t)

    def batch_sampler(s):
        client = server.localhost_client()
        while not stop.is_set():
            try:
                r = client.sample_batch(table_name, 1 + s % 4, timeout=0.05)
            except errors.RateLimiterTimeout:
                continue
            values = np.asarray(r.data[0]).reshape(-1).tolist()
            assert len(values) == len(r.info.key)
            record(values, r.info.key.tolist(), r.info.times_sampled.tolist())

    def generator_sampler(s):
        client = server.localhost_client()
        while not stop.is_set():
            try:
                for sample in client.sample(table_name, 3, emit_timesteps=False, timeout=0.05):
                    record(
                        [int(np.asarray(sample.data[0]).reshape(-1)[0])],
                        [sample.info.key],
                        [sample.info.times_sampled],
                    )
            except errors.RateLimiterTimeout:
                continue

    for w in range(num_writers):
        writers.start(trajectory_writer if w % 2 else insert_writer, w)
    for s in range(num_samplers):
        samplers.start(generator_sampler if s % 2 else batch_sampler, s)

    try:
        writers.join_all()
        deadline = time.monotonic() + JOIN_TIMEOUT
        while time.monotonic() < deadline:
            with lock:
                if sum(seen.values()) >= total:
                    break
            if samplers.errors:
                break
            time.sleep(0.01)
    finally:
        stop.set()
        samplers.join_all()
    assert sum(seen.values()) == total, f"sampled {sum(seen.values())} of {total}"
    return seen, times_by_key


def _expect_values(seen, num_values, times):
    assert set(seen) == set(range(num_values)), "a value was lost or invented"
    wrong = {v: c for v, c in seen.items() if c != times}
    assert not wrong, (
        f"values not sampled exactly {times} time(s): {dict(list(wrong.items())[:10])}"
    )


def test_queue_every_item_sampled_exactly_once(frequent_thread_switches):
    table = reverb.Table.queue("q", 4)  # small: writers block on a full queue
    with _serve(table) as (server, _):
        num_writers, per_writer = 4, 500
        seen, times = _run_writers_and_samplers(
            server, "q", num_writers, per_writer, num_samplers=4, expected_times=1
        )
        n = num_writers * per_writer
        _expect_values(seen, n, 1)
        assert all(t == [1] for t in times.values())
        info = table.info
        assert info.current_size == 0 and len(table) == 0
        assert info.num_unique_samples == n
        rl = info.rate_limiter_info
        assert (rl.insert_stats.completed, rl.sample_stats.completed, rl.delete_count) == (n, n, n)
        assert len(server.chunk_store) == 0, "chunks leaked"


def test_max_times_sampled_two_every_item_sampled_exactly_twice(frequent_thread_switches):
    # samples_per_insert 2 with min_diff 0: never more than 2 samples per inserted item on
    # average, and at most 20 outstanding samples, so at most 20 items are stored (no eviction).
    table = reverb.Table(
        "t2",
        reverb.selectors.Uniform(),
        reverb.selectors.Fifo(),
        20,
        reverb.rate_limiters.SampleToInsertRatio(2.0, 1, (0.0, 20.0)),
        max_times_sampled=2,
    )
    with _serve(table) as (server, _):
        num_writers, per_writer = 4, 400
        seen, times = _run_writers_and_samplers(
            server, "t2", num_writers, per_writer, num_samplers=3, expected_times=2
        )
        n = num_writers * per_writer
        _expect_values(seen, n, 2)
        assert len(times) == n
        assert all(sorted(t) == [1, 2] for t in times.values())
        assert len(table) == 0
        rl = table.info.rate_limiter_info
        assert (rl.insert_stats.completed, rl.sample_stats.completed, rl.delete_count) == (
            n,
            2 * n,
            n,
        )
        assert len(server.chunk_store) == 0, "chunks leaked"


def test_chunks_shared_by_items_are_freed_with_the_last_item():
    table = reverb.Table.queue("q", 100)
    with _serve(table) as (server, client):
        with client.trajectory_writer(4, max_chunk_length=4) as w:
            for v in range(8):
                w.append({"a": np.int64(v), "b": np.float32(v)})
                if v >= 2:
                    w.create_item("q", 1.0, {"a": w.history["a"][-3:], "b": w.history["b"][-1]})
        assert len(table) == 6
        assert len(server.chunk_store) > 0
        for _ in range(6):
            client.sample_batch("q", 1, timeout=1)
        assert len(table) == 0
        assert len(server.chunk_store) == 0


# -- negative priorities (Reverb bug §4.2.1: the table worker died) --------------------------------


def _chunk_item(key, priority):
    chunk = Chunk(key, np.zeros((1, 3), np.float32), episode_id=1)
    return (key, priority, (chunk, 0, 1), (False,))


@pytest.mark.parametrize("bad", [-1.0, -1e-300, float("-inf"), float("nan")])
def test_bad_priority_on_prioritized_table_is_rejected_and_table_keeps_working(bad):
    table = reverb.Table(
        "p",
        reverb.selectors.Prioritized(0.6),
        reverb.selectors.Fifo(),
        100,
        reverb.rate_limiters.MinSize(1),
    )
    with _serve(table) as (server, client):
        client.insert(np.int64(1), {"p": 1.0})
        key = int(table.keys()[0])
        chunks_before = len(server.chunk_store)

        with pytest.raises(ValueError):
            client.insert(np.int64(2), {"p": bad})
        for validate in (True, False):
            with client.trajectory_writer(1, validate_items=validate) as w:
                w.append({"x": np.int64(3)})
                with pytest.raises(ValueError):
                    w.create_item("p", bad, {"x": w.history["x"][-1:]})
        with pytest.raises(ValueError):
            table.insert(*_chunk_item(99, bad), timeout=1)
        with pytest.raises(ValueError):
            table.try_insert_many([_chunk_item(98, 1.0), _chunk_item(99, bad)])
        with pytest.raises(ValueError):
            client.update_priorities("p", [key], [bad])
        with pytest.raises(ValueError):
            client.mutate_priorities("p", updates={key: bad}, deletes=[key])

        # Nothing was half-applied.
        assert table.keys().tolist() == [key]
        assert table.get(key)["priority"] == 1.0
        assert table.sampler.num_items() == table.remover.num_items() == 1
        assert len(server.chunk_store) == chunks_before

        # And the table still works, from other threads too.
        threads = _Threads()
        threads.start(
            lambda: [client.insert(np.int64(10 + i), {"p": 2.0}, timeout=5) for i in range(20)]
        )
        threads.start(lambda: [client.sample_batch("p", 4, timeout=5) for _ in range(20)])
        threads.join_all(30)
        assert len(table) == 21
        client.update_priorities("p", [key], [0.0])
        s = client.sample_batch("p", 200, timeout=5)
        assert key not in set(s.info.key.tolist())


def test_overflowing_priority_is_rejected_cleanly():
    table = reverb.Table(
        "p",
        reverb.selectors.Prioritized(2.0),
        reverb.selectors.Fifo(),
        100,
        reverb.rate_limiters.MinSize(1),
    )
    with _serve(table) as (_, client):
        client.insert(np.int64(1), {"p": 1.0})
        try:
            client.insert(np.int64(2), {"p": 1e200})
        except ValueError:
            assert len(table) == 1
        assert len(table) == table.sampler.num_items() == table.remover.num_items()


# -- close / stop wake blocked callers -------------------------------------------------------------


def _blocked_call_is_woken(call, wake, expected=errors.CancelledError):
    outcome: dict = {}

    def run():
        try:
            call()
            outcome["result"] = "returned"
        except BaseException as e:  # noqa: BLE001
            outcome["error"] = e
            outcome["at"] = time.monotonic()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    time.sleep(0.3)
    assert t.is_alive(), f"the call did not block: {outcome}"
    woken_at = time.monotonic()
    wake()
    t.join(5)
    assert not t.is_alive(), "the blocked call was not woken"
    assert isinstance(outcome.get("error"), expected), outcome
    assert outcome["at"] - woken_at < 1.0


def test_table_close_wakes_blocked_sampler():
    table = reverb.Table(
        "t",
        reverb.selectors.Uniform(),
        reverb.selectors.Fifo(),
        10,
        reverb.rate_limiters.MinSize(1),
    )
    _blocked_call_is_woken(lambda: table.sample(1, timeout=30), table.close)
    with pytest.raises(errors.CancelledError):
        table.sample(1, timeout=0)


def test_server_stop_wakes_blocked_client_sampler():
    table = reverb.Table.queue("q", 10)
    server = reverb.Server([table])
    client = server.localhost_client()
    try:
        _blocked_call_is_woken(lambda: client.sample_batch("q", 4, timeout=30), server.stop)
    finally:
        server.stop()


def test_server_stop_wakes_blocked_generator_sampler_and_writer():
    table = reverb.Table.queue("q", 2)
    server = reverb.Server([table])
    client = server.localhost_client()
    try:
        _blocked_call_is_woken(lambda: next(client.sample("q", 1, timeout=30)), table.close)
    finally:
        server.stop()

    table = reverb.Table.queue("q2", 2)
    server = reverb.Server([table])
    client = server.localhost_client()
    try:
        client.insert(np.int64(0), {"q2": 1.0}, timeout=1)
        client.insert(np.int64(1), {"q2": 1.0}, timeout=1)
        # The queue is full: a third insert blocks until stop.
        _blocked_call_is_woken(
            lambda: client.insert(np.int64(2), {"q2": 1.0}, timeout=30), server.stop
        )
    finally:
        server.stop()


# -- sample(linger=): a rate-limited sampler waits briefly for a fuller batch --------------------


def _queue(size=100):
    return reverb.Table.queue("q", size)


def test_linger_collects_items_inserted_meanwhile():
    table = _queue()
    table.insert_many([_chunk_item(k, 1.0) for k in range(1, 4)])
    t = threading.Timer(
        0.02, lambda: table.insert_many([_chunk_item(k, 1.0) for k in range(4, 11)])
    )
    t.start()
    batch = table.sample(10, timeout=5, linger=2.0)
    t.join()
    assert sorted(batch.keys) == list(range(1, 11))


def test_linger_returns_what_is_admitted_when_nothing_more_comes():
    table = _queue()
    table.insert_many([_chunk_item(k, 1.0) for k in range(1, 4)])
    assert sorted(table.sample(10, timeout=5, linger=0.01).keys) == [1, 2, 3]
    with pytest.raises(errors.RateLimiterTimeout):  # the deadline still bounds the wait
        table.sample(10, timeout=0.05, linger=5.0)


def test_linger_ends_when_inserts_are_blocked():
    """A lingering sampler never holds writers back: once the limiter blocks inserts it takes
    what is admitted at once (a full queue here) instead of waiting out its linger."""
    table = _queue(3)
    table.insert_many([_chunk_item(k, 1.0) for k in range(1, 4)])
    t0 = time.monotonic()
    assert sorted(table.sample(10, timeout=30, linger=20.0).keys) == [1, 2, 3]
    assert time.monotonic() - t0 < 10


def test_linger_is_woken_by_a_writer_that_blocks():
    """A sampler lingers on a queue with room; a writer then fills it and blocks: the sampler
    must return then, not after its linger, so that the writer can go on."""
    table = _queue(4)
    table.insert_many([_chunk_item(1, 1.0)])
    writer = threading.Thread(
        target=lambda: table.insert_many(
            [_chunk_item(k, 1.0) for k in range(2, 7)], Deadline.after(30)
        ),
        daemon=True,
    )
    threading.Timer(0.05, writer.start).start()
    t0 = time.monotonic()
    got = [int(k) for k in table.sample(10, timeout=30, linger=20.0).keys]
    assert time.monotonic() - t0 < 10
    writer.join(JOIN_TIMEOUT)
    assert not writer.is_alive()
    got += [int(k) for k in table.sample(10, timeout=5).keys]
    assert sorted(got) == list(range(1, 7))


def test_lingering_sampler_never_returns_an_empty_batch(frequent_thread_switches):
    """Another sampler may take everything while one lingers: it then waits again."""
    table = _queue(1000)
    got: list[int] = []
    errs: list[BaseException] = []
    stop = threading.Event()

    def sampler(linger):
        try:
            while not stop.is_set():
                try:
                    b = table.sample(8, timeout=0.05, linger=linger)
                except errors.RateLimiterTimeout:
                    continue
                assert len(b.keys) >= 1
                got.extend(int(k) for k in b.keys)
        except BaseException as e:  # noqa: BLE001
            errs.append(e)

    threads = [threading.Thread(target=sampler, args=(lg,), daemon=True) for lg in (0.002, 0.0)]
    for th in threads:
        th.start()
    for k in range(1, 601):
        table.insert_many([_chunk_item(k, 1.0)], Deadline.after(5))
    deadline = time.monotonic() + 10
    while len(got) < 600 and time.monotonic() < deadline:
        time.sleep(0.01)
    stop.set()
    for th in threads:
        th.join(JOIN_TIMEOUT)
    assert not errs, errs
    assert sorted(got) == list(range(1, 601))


def test_insert_waiting_for_the_limiter_stores_nothing_once_cancelled():
    # A writer that goes away while its item waits for room must not have the item stored
    # later, when room appears (the server passes the stream's "client gone" flag).
    table = _queue(2)
    table.insert_many([_chunk_item(1, 1.0), _chunk_item(2, 1.0)])
    gone = threading.Event()
    out: dict = {}

    def insert() -> None:
        try:
            table.insert_many([_chunk_item(3, 1.0)], Deadline.after(30), cancelled=gone.is_set)
        except errors.CancelledError as e:
            out["error"] = e

    t = threading.Thread(target=insert)
    t.start()
    wait_until(lambda: table.wait_stats().blocked_inserters >= 1, 10, "the insert to block")
    gone.set()
    table.sample(1, timeout=1)  # makes room: the waiter wakes, sees the flag, stores nothing
    t.join(10)
    assert not t.is_alive()
    assert isinstance(out.get("error"), errors.CancelledError), out
    assert out["error"].inserted == []
    assert sorted(table.keys()) == [2]
    # Without the flag set the same wait stores the item once room appears.
    table.insert_many([_chunk_item(4, 1.0)], Deadline.after(1), cancelled=lambda: False)
    assert sorted(table.keys()) == [2, 4]


# -- sample_now: all admitted at once, or nothing taken -------------------------------------------


def test_sample_now_takes_all_or_nothing():
    table = _queue()
    table.insert_many([_chunk_item(k, 1.0) for k in range(1, 4)])
    assert table.sample_now(4) is None  # 3 admitted: nothing taken
    assert table.size == 3
    assert sorted(table.sample_now(2).keys) == [1, 2]
    assert table.size == 1
    batch = table.sample_now(1)
    assert list(batch.keys) == [3] and not batch.rate_limited
    assert table.sample_now(1) is None
    table.close()
    with pytest.raises(errors.CancelledError):
        table.sample_now(1)
