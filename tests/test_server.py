"""Server and Table tests (after Reverb's server_test.py)."""

import itertools
import socket

import numpy as np
import pytest

import ostinato as reverb

SAMPLERS = [
    reverb.selectors.Prioritized(1),
    reverb.selectors.Prioritized(0.5),
    reverb.selectors.Fifo(),
    reverb.selectors.Lifo(),
    reverb.selectors.Uniform(),
    reverb.selectors.MinHeap(),
    reverb.selectors.MaxHeap(),
]
LIMITERS = [
    lambda: reverb.rate_limiters.MinSize(10),
    lambda: reverb.rate_limiters.Queue(10),
    lambda: reverb.rate_limiters.SampleToInsertRatio(1.0, 10, 1.0),
    lambda: reverb.rate_limiters.Stack(10),
]
ONEOF = {
    "PrioritizedSelector": "prioritized",
    "FifoSelector": "fifo",
    "LifoSelector": "lifo",
    "UniformSelector": "uniform",
    "HeapSelector": "heap",
}


def test_in_process_client(make_server):
    server = make_server(reverb.Table.queue("q", 1))
    client = server.localhost_client()
    client.reset("q")
    server.stop()
    server.stop()  # idempotent


def test_duplicate_table_names():
    with pytest.raises(ValueError, match="same name: test"):
        reverb.Server([reverb.Table.queue("test", 1), reverb.Table.queue("test", 2)])


def test_no_tables():
    with pytest.raises(ValueError, match="At least one table"):
        reverb.Server(tables=[])


def test_can_sample(make_server):
    table = reverb.Table(
        "t",
        reverb.selectors.Uniform(),
        reverb.selectors.Fifo(),
        100,
        reverb.rate_limiters.MinSize(2),
        max_times_sampled=1,
    )
    client = make_server(table).localhost_client()
    assert not table.can_sample(1) and table.can_insert(1)
    client.insert(np.int64(1), {"t": 1.0})
    assert not table.can_sample(1)
    client.insert(np.int64(2), {"t": 1.0})
    assert table.can_sample(2)
    # Reverb's known TODO (§4.3.4): it answered True here although only 2 samples exist.
    assert not table.can_sample(3)
    with pytest.raises(ValueError):
        table.can_sample(0)


@pytest.mark.parametrize(
    "sampler,remover,limiter", list(itertools.product(SAMPLERS, SAMPLERS[1:], LIMITERS))
)
def test_table_info(sampler, remover, limiter):
    table = reverb.Table("t", sampler.clone(), remover.clone(), 100, limiter())
    info = table.info
    assert info.name == "t" and info.max_size == 100 and info.current_size == 0
    assert info.num_episodes == 0 and info.num_deleted_episodes == 0 and info.signature is None
    assert info.sampler_options.WhichOneof("distribution") == ONEOF[repr(sampler).split("(")[0]]
    assert info.remover_options.WhichOneof("distribution") == ONEOF[repr(remover).split("(")[0]]


@pytest.mark.parametrize(
    "signature",
    [
        reverb.TensorSpec([], np.float32),
        reverb.TensorSpec([3, 64, 64], np.uint8),
        ({"a": reverb.TensorSpec([1], np.int32)}, reverb.TensorSpec([None], np.float64)),
    ],
)
def test_table_info_signature(signature):
    table = reverb.Table(
        "t",
        reverb.selectors.Uniform(),
        reverb.selectors.Fifo(),
        10,
        reverb.rate_limiters.MinSize(1),
        signature=signature,
    )
    assert table.info.signature == signature


def test_bad_signature_leaf():
    with pytest.raises(ValueError, match="Unsupported signature spec"):
        reverb.Table(
            "t",
            reverb.selectors.Uniform(),
            reverb.selectors.Fifo(),
            10,
            reverb.rate_limiters.MinSize(1),
            signature={"a": 3},
        )


def test_replace():
    table = reverb.Table(
        "t",
        reverb.selectors.Prioritized(0.7),
        reverb.selectors.MinHeap(),
        10,
        reverb.rate_limiters.MinSize(5),
        max_times_sampled=3,
    )
    new = table.replace(rate_limiter=reverb.rate_limiters.RateLimiter(1.0, 1, -1e9, 1e9))
    assert new.name == "t"
    assert new.info.rate_limiter_info.min_size_to_sample == 1
    assert new.info.sampler_options.prioritized.priority_exponent == 0.7
    assert new.info.remover_options.heap.min_heap is True
    assert new.max_times_sampled == 3
    other = table.replace(name="u", max_size=5)
    assert other.name == "u" and other.max_size == 5
    assert other.info.rate_limiter_info.min_size_to_sample == 5


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"name": ""}, "name must be nonempty"),
        ({"max_size": 0}, r"max_size \(0\) must be a positive integer"),
        ({"max_size": -3}, r"max_size \(-3\) must be a positive integer"),
        ({"max_size": 1.5}, r"max_size \(1.5\) must be a positive integer"),
    ],
)
def test_table_validation(kwargs, match):
    args = {
        "name": "t",
        "sampler": reverb.selectors.Uniform(),
        "remover": reverb.selectors.Fifo(),
        "max_size": 10,
        "rate_limiter": reverb.rate_limiters.MinSize(1),
    }
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        reverb.Table(**args)


def test_port_reported_and_collisions(make_server):
    server = make_server(reverb.Table.queue("q", 1), port=0)
    assert server.port > 0  # Reverb reported 0 here (§4.3.7)
    with pytest.raises(ValueError, match=f"port \\({server.port}\\) is already in use"):
        reverb.Server([reverb.Table.queue("q", 1)], port=server.port)
    # A port bound by some other program is refused too.
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    try:
        with pytest.raises(ValueError, match="already in use"):
            reverb.Server([reverb.Table.queue("q", 1)], port=sock.getsockname()[1])
    finally:
        sock.close()


def test_a_crashed_servers_port_can_be_taken_again_at_once():
    # The dead server's connections linger in TIME_WAIT on its port; a server restarted in
    # its place (by Ray, Kubernetes, systemd) must get the port, and clients reconnect.
    from server_process import ServerProcess

    code = "import ostinato as reverb\nTABLES = [reverb.Table.queue('q', 10)]"
    first = ServerProcess(code)
    client = reverb.Client(f"127.0.0.1:{first.port}", in_process=False, unavailable_timeout=10)
    client.insert(np.int64(1), {"q": 1.0})
    first.kill()  # SIGKILL: no clean shutdown
    with ServerProcess(code, port=first.port) as second:
        assert second.port == first.port
        client.insert(np.int64(2), {"q": 1.0})  # the same client, reconnected
        assert client.server_info(timeout=5)["q"].current_size == 1


def test_context_manager_and_stop_wakes_blocked_calls():
    import threading

    with reverb.Server([reverb.Table.queue("q", 1)]) as server:
        client = server.localhost_client()
        errors_seen = []

        def blocked():
            try:
                next(client.sample("q", 1))
            except Exception as e:  # noqa: BLE001
                errors_seen.append(e)

        t = threading.Thread(target=blocked)
        t.start()
        t.join(0.2)
        assert t.is_alive()
    t.join(2)
    assert not t.is_alive()
    assert isinstance(errors_seen[0], reverb.errors.CancelledError)
    with pytest.raises(reverb.errors.UnavailableError, match=str(server.port)):
        client.reset("q")


def test_table_belongs_to_one_server(make_server):
    table = reverb.Table.queue("q", 1)
    make_server(table)
    with pytest.raises(ValueError, match="another server"):
        reverb.Server([table])


def test_chunks_shared_between_tables_and_freed(make_server):
    a = reverb.Table(
        "a",
        reverb.selectors.Uniform(),
        reverb.selectors.Fifo(),
        10,
        reverb.rate_limiters.MinSize(1),
    )
    b = reverb.Table.queue("b", 10)
    server = make_server(a, b)
    client = server.localhost_client()
    client.insert([np.zeros(100, np.float32), np.int32(1)], {"a": 1.0, "b": 1.0})
    store = server.chunk_store
    assert len(store) == 2
    assert all(c.refs == 2 for c in store.chunks())
    next(client.sample("b", 1))  # deletes b's item (max_times_sampled=1)
    assert all(c.refs == 1 for c in store.chunks())
    client.reset("a")
    assert len(store) == 0


def test_table_extension_hooks(make_server):
    events = []

    class Recorder(reverb.TableExtension):
        def on_insert(self, table_name, key, priority):
            events.append(("insert", priority))

        def on_sample(self, table_name, key, times_sampled):
            events.append(("sample", times_sampled))

        def on_delete(self, table_name, key):
            events.append(("delete",))

    table = reverb.Table.queue("q", 5, extensions=[Recorder()])
    client = make_server(table).localhost_client()
    client.insert(np.int64(1), {"q": 2.0})
    next(client.sample("q"))
    assert events == [("insert", 2.0), ("sample", 1), ("delete",)]
