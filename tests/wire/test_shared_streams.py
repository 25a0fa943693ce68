"""Writers of one client share Insert streams (``Client(writers_per_stream=16)``): what a writer
sees must not change, except that its items travel with its stream-mates'.

Each test runs a real server and talks gRPC to it: the number of open streams is read from the
server, the items from its tables.
"""

from __future__ import annotations

import numpy as np
import pytest
from _wire_util import drain_ids, grpc_client, wait_until

import ostinato as reverb
from ostinato.errors import ReverbError

STEPS = 5


def test_writers_of_one_client_share_streams_sixteen_to_a_stream():
    with reverb.Server([reverb.Table.queue("q", 10_000)]) as server:
        client = grpc_client(f"localhost:{server.port}")
        writers = [client.trajectory_writer(1) for _ in range(40)]
        for step in range(STEPS):
            for i, w in enumerate(writers):
                w.append({"id": np.int64(i * 1000 + step)})
                w.create_item("q", 1.0, {"id": w.history["id"][-1:]})
        for w in writers:
            w.flush(timeout_ms=15_000)
            assert w.num_pending_items == 0
        assert server.service.active_streams == 3  # 16 + 16 + 8 writers
        ids = drain_ids(server.localhost_client(), "q")
        assert sorted(ids) == sorted(i * 1000 + s for i in range(40) for s in range(STEPS))
        for i in range(40):  # a queue hands each writer's items out in the order they were made
            mine = [x for x in ids if x // 1000 == i]
            assert mine == sorted(mine)
        for w in writers:
            w.close()
        wait_until(lambda: server.service.active_streams == 0, 5, "the streams to end")


def test_one_stream_per_writer_when_asked():
    with reverb.Server([reverb.Table.queue("q", 100)]) as server:
        client = grpc_client(f"localhost:{server.port}", writers_per_stream=1)
        writers = [client.trajectory_writer(1) for _ in range(3)]
        for w in writers:
            w.append({"x": np.zeros(2, np.float32)})
            w.create_item("q", 1.0, {"x": w.history["x"][-1:]})
            w.flush(timeout_ms=15_000)
        assert server.service.active_streams == 3
        for w in writers:
            w.close()


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2"])
def test_writers_per_stream_must_be_a_positive_int(bad):
    with pytest.raises(ValueError, match="writers_per_stream"):
        reverb.Client("localhost:1", writers_per_stream=bad)


def test_a_writer_held_by_its_table_does_not_hold_writers_of_other_tables():
    tables = [reverb.Table.queue("small", 1), reverb.Table.queue("big", 100)]
    with reverb.Server(tables) as server:
        client = grpc_client(f"localhost:{server.port}")
        held = client.trajectory_writer(1)
        free = client.trajectory_writer(1)
        for _ in range(2):  # the second item waits on the server for room in "small"
            held.append({"x": np.zeros(2, np.float32)})
            held.create_item("small", 1.0, {"x": held.history["x"][-1:]})
        wait_until(
            lambda: server.metrics()["tables"]["small"]["blocked_inserters"] >= 1,
            10,
            "the second item to wait on the server",
        )
        for _ in range(10):
            free.append({"x": np.ones(2, np.float32)})
            free.create_item("big", 1.0, {"x": free.history["x"][-1:]})
        free.flush(timeout_ms=10_000)
        assert len(server.tables_by_name["big"]) == 10
        assert held.num_pending_items == 1
        held.close()
        free.close()


def test_closing_a_writer_leaves_its_stream_mates_writing():
    with reverb.Server([reverb.Table.queue("q", 1000)]) as server:
        client = grpc_client(f"localhost:{server.port}")
        a, b = client.trajectory_writer(1), client.trajectory_writer(1)
        for w in (a, b):
            w.append({"x": np.zeros(2, np.float32)})
            w.create_item("q", 1.0, {"x": w.history["x"][-1:]})
            w.flush(timeout_ms=10_000)
        assert server.service.active_streams == 1
        a.close()
        for _ in range(20):
            b.append({"x": np.ones(2, np.float32)})
            b.create_item("q", 1.0, {"x": b.history["x"][-1:]})
        b.flush(timeout_ms=10_000)
        assert len(server.tables_by_name["q"]) == 22
        b.close()  # the stream's last writer: the call ends at once
        wait_until(lambda: server.service.active_streams == 0, 1.5, "the stream to end")


def test_a_refused_request_stops_its_writer_and_spares_the_others():
    mb = 1024 * 1024
    with reverb.Server([reverb.Table.queue("q", 100)], max_inflated_bytes=mb) as server:
        client = grpc_client(f"localhost:{server.port}", compression="none")
        big, small = client.trajectory_writer(1), client.trajectory_writer(1)
        small.append({"x": np.zeros(4, np.uint8)})
        small.create_item("q", 1.0, {"x": small.history["x"][-1:]})
        small.flush(timeout_ms=10_000)
        # rows over the server's limit: the server refuses the request that carries them
        big.append({"x": np.zeros(2 * mb, np.uint8)})
        big.create_item("q", 1.0, {"x": big.history["x"][-1:]})
        with pytest.raises(ReverbError, match="max_inflated_bytes"):
            big.flush(timeout_ms=10_000)
        with pytest.raises(ReverbError, match="max_inflated_bytes"):  # and stays stopped
            big.append({"x": np.zeros(2 * mb, np.uint8)})
            big.create_item("q", 1.0, {"x": big.history["x"][-1:]})
        for _ in range(3):  # its stream-mate had nothing in that request and goes on
            small.append({"x": np.ones(4, np.uint8)})
            small.create_item("q", 1.0, {"x": small.history["x"][-1:]})
        small.flush(timeout_ms=10_000)
        assert len(server.tables_by_name["q"]) == 4
        big.close()
        small.close()
