"""Small Sample and Mutate calls are answered on the server's event loop (no hand-off to a pool
thread); a Sample the rate limiter cannot serve at once still goes to the sample pool, where it
waits and lingers as before. Real server, real gRPC client."""

from __future__ import annotations

import threading

import numpy as np
from _wire_util import grpc_client

import ostinato as reverb


def _fill(client, table, n):
    with client.trajectory_writer(1) as w:
        for i in range(n):
            w.append({"x": np.int64(i)})
            w.create_item(table, 1.0, {"x": w.history["x"][-1]})


def test_small_calls_are_answered_on_the_loop():
    table = reverb.Table(
        "u",
        sampler=reverb.selectors.Prioritized(1.0),
        remover=reverb.selectors.Fifo(),
        max_size=1000,
        rate_limiter=reverb.rate_limiters.MinSize(1),
    )
    with reverb.Server([table]) as server:
        client = grpc_client(f"localhost:{server.port}")
        _fill(client, "u", 100)
        samples = list(client.sample("u", num_samples=16, emit_timesteps=False))
        assert len(samples) == 16
        keys = [s.info.key for s in samples]
        client.mutate_priorities("u", updates={k: 5.0 for k in keys})
        info = client.server_info()["u"]
        assert info.current_size == 100
        pools = server.service.pools
        assert not pools["sample"]._threads  # never handed to a pool thread
        assert not pools["control"]._threads


def test_a_sample_not_admitted_at_once_goes_to_the_pool():
    """A queue holding 2 asked for 3: not admitted in full at once, so the sample pool takes
    the call (and waits and lingers there as before); a writer adds the third item later."""
    with reverb.Server([reverb.Table.queue("q", 100)]) as server:
        client = grpc_client(f"localhost:{server.port}")
        _fill(client, "q", 2)
        late = threading.Timer(0.2, _fill, (server.localhost_client(), "q", 1))
        late.start()
        got = list(client.sample("q", num_samples=3, emit_timesteps=False))
        late.join()
        assert sorted(int(s.data[0]) for s in got) == [0, 0, 1]
        assert server.service.pools["sample"]._threads
