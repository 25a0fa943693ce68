"""Hundreds of writer streams on one server (issue 23): the service keeps answering.

256 writers in 4 processes keep their Insert streams open (each writes one item every
0.4 s) while a fresh client asks ``server_info`` and samples; every call must answer within a
second, and every item a writer saw confirmed must be in the table. With a thread per open
stream (the service before ``grpc.aio``) the 65th stream already queued every other call.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

import ostinato as reverb
from _helpers import wait_until

WRITERS_PER_PROCESS = 64
PROCESSES = 4
STEPS = 10
PERIOD = 0.4

_WRITER = textwrap.dedent("""
    import sys, time
    import numpy as np
    import ostinato as reverb
    port, n, steps, period = (
        int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
    )
    # A stream per writer (as Reverb, and as writers in processes of their own): the server
    # must hold hundreds of streams. By default writers of one client share streams.
    client = reverb.Client(f"localhost:{port}", writers_per_stream=1)
    writers = [client.trajectory_writer(1) for _ in range(n)]
    print("open", flush=True)
    start = time.monotonic()
    for step in range(steps):
        for w in writers:
            w.append({"x": np.float32(step)})
            w.create_item("t", 1.0, {"x": w.history["x"][-1]})
        time.sleep(max(0.0, start + (step + 1) * period - time.monotonic()))
    for w in writers:
        w.flush(timeout_ms=60_000)
        w.close()
    print("confirmed", n * steps, flush=True)
""")


def test_hundreds_of_streams_do_not_block_other_calls():
    server = reverb.Server(
        [
            reverb.Table(
                "t",
                reverb.selectors.Uniform(),
                reverb.selectors.Fifo(),
                max_size=1_000_000,
                rate_limiter=reverb.rate_limiters.MinSize(1),
            )
        ]
    )
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                _WRITER,
                str(server.port),
                str(WRITERS_PER_PROCESS),
                str(STEPS),
                str(PERIOD),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(PROCESSES)
    ]
    try:
        for p in procs:
            assert p.stdout.readline().strip() == "open", p.stderr.read()[-2000:]
        latencies: list[float] = []
        peak = 0
        stop = threading.Event()

        def probe() -> None:
            nonlocal peak
            while not stop.is_set():
                t0 = time.monotonic()
                fresh = reverb.Client(f"localhost:{server.port}")
                if fresh.server_info(timeout=10)["t"].current_size:
                    fresh.sample_batch("t", 256, timeout=10)
                latencies.append(time.monotonic() - t0)
                peak = max(peak, server.service.active_streams)
                fresh.close()
                stop.wait(0.1)

        prober = threading.Thread(target=probe, daemon=True)
        prober.start()
        outputs = [p.communicate(timeout=120) for p in procs]
        stop.set()
        prober.join(30)
        for p, (_out, err) in zip(procs, outputs):
            assert p.returncode == 0, err[-3000:]
        confirmed = sum(int(out.split()[-1]) for out, _ in outputs)
        assert confirmed == PROCESSES * WRITERS_PER_PROCESS * STEPS
        assert server.localhost_client().server_info()["t"].current_size == confirmed
        assert peak >= 200, f"only {peak} streams were open at once"
        assert latencies and max(latencies) < 1.0, sorted(latencies)[-5:]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        server.stop()


def _rpc_threads() -> int:
    return sum(t.name.startswith("ostinato-rpc") for t in threading.enumerate())


def _raw_streams(port: int, n: int):
    """``n`` Insert streams that open and never send (no public client needed: D5)."""
    import grpc

    from ostinato.wire import protocol

    channel = grpc.insecure_channel(f"localhost:{port}")
    hold = threading.Event()

    def nothing():
        hold.wait()
        return
        yield  # a generator that sends nothing until released

    method = channel.stream_stream(protocol.method_path(protocol.INSERT_METHOD))
    calls = [method(nothing()) for _ in range(n)]
    return channel, hold, calls


def test_idle_streams_hold_no_thread_and_are_ended():
    server = reverb.Server([reverb.Table.queue("q", 10)], idle_stream_seconds=2.0)
    try:
        client = reverb.Client(f"localhost:{server.port}", in_process=False)
        client.server_info()
        before = _rpc_threads()
        channel, hold, calls = _raw_streams(server.port, 300)
        wait_until(
            lambda: server.service.active_streams >= 300, 30, "300 open streams", interval=0.05
        )
        assert server.service.active_streams == 300
        took = []
        for _ in range(3):  # the best of three: the idle streams cost nothing, load may
            t0 = time.monotonic()
            reverb.Client(f"localhost:{server.port}", in_process=False).server_info()
            took.append(time.monotonic() - t0)
        assert min(took) < 1.0, took
        assert _rpc_threads() <= before + 2  # no thread per stream
        # Streams that send nothing are ended after idle_stream_seconds (OK, not an error).
        wait_until(
            lambda: server.service.active_streams == 0, 30, "idle streams to end", interval=0.1
        )
        hold.set()
        channel.close()
    finally:
        server.stop()


def test_streams_past_max_streams_are_refused_at_once():
    import grpc

    server = reverb.Server([reverb.Table.queue("q", 10)], max_streams=5)
    try:
        channel, hold, calls = _raw_streams(server.port, 5)
        wait_until(lambda: server.service.active_streams >= 5, 30, "5 open streams", interval=0.05)
        _, hold2, (extra,) = _raw_streams(server.port, 1)
        t0 = time.monotonic()
        try:
            next(extra)
            raise AssertionError("the sixth stream was accepted")
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "max_streams" in e.details()
        assert time.monotonic() - t0 < 2.0
        hold.set()
        hold2.set()
        channel.close()
    finally:
        server.stop()
