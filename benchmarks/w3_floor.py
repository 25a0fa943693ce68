#!/usr/bin/env python3
"""The floor under networked W3 on this machine: moving its bytes between two processes and
nothing else.

A writer process copies W3's 5,000 frames (uint8[84,84,4], 141 MB), four to a chunk as a
trajectory writer groups them, into a chunk buffer and from there into a shared file mapped
and populated up front (a same-host writer's ring, never wrapped); every 16 chunks it tells
the server process, over a pipe, which chunks are ready. The server reads each chunk with
``pread`` into a new ``bytes`` object and keeps it, as a server keeps the frames it stores.
There is no item, table, request encoding or gRPC: what is left is the copies and the fresh
memory the server has to take. Each run forks a new server process, as a fresh server.

    python benchmarks/w3_floor.py --runs 8

Any server that keeps a copy of each frame sends W3 no faster than this; compare its MB/s with
3× dm-reverb's networked W3 (``versus_reverb.py --benches net --workloads W3``). Linux only
(``fork``, ``/dev/shm``, ``MAP_POPULATE``).
"""

from __future__ import annotations

import argparse
import mmap
import os
import statistics
import struct
import sys
import time

import numpy as np

FRAME = 84 * 84 * 4
ROWS = 4  # frames per chunk
PER_MESSAGE = 16  # chunks per message


def _cpu() -> tuple[float, float]:
    t = os.times()
    return (t.user + t.system) * 1e3, t.system * 1e3


def _serve(fd: int, ready: int, done: int, chunk_bytes: int) -> None:
    """The server (a forked child): reads and keeps every chunk it is told of, then reports
    its CPU time (ms, and ms of it in the kernel) and exits."""
    kept = []
    c0 = _cpu()
    while True:
        msg = os.read(ready, 8)
        if not msg:
            break
        first, n = struct.unpack("II", msg)
        for c in range(first, first + n):
            kept.append(os.pread(fd, chunk_bytes, c * chunk_bytes))
    c1 = _cpu()
    os.write(done, struct.pack("dd", c1[0] - c0[0], c1[1] - c0[1]))
    os._exit(0)


def one_run(frames: np.ndarray, tag: str) -> tuple[float, float, float, float, float]:
    """(MB/s, ms, writer CPU ms, server CPU ms, server system ms) of one run."""
    nchunks = len(frames) // ROWS
    chunk_bytes = ROWS * FRAME
    size = nchunks * chunk_bytes
    path = f"/dev/shm/ostinato-w3-floor-{os.getpid()}-{tag}"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.posix_fallocate(fd, 0, size)
        mm = mmap.mmap(fd, size, flags=mmap.MAP_SHARED | mmap.MAP_POPULATE)
        ring = np.frombuffer(mm, dtype=np.uint8)
        ready_r, ready_w = os.pipe()
        done_r, done_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(ready_w)
            os.close(done_r)
            _serve(fd, ready_r, done_w, chunk_bytes)
        os.close(ready_r)
        os.close(done_w)
        c0 = _cpu()
        t0 = time.perf_counter()
        for c in range(nchunks):
            chunk = np.empty((ROWS, FRAME), np.uint8)  # the writer's chunk
            for k in range(ROWS):
                chunk[k] = frames[c * ROWS + k]
            ring[c * chunk_bytes : (c + 1) * chunk_bytes] = chunk.reshape(-1)
            if c % PER_MESSAGE == PER_MESSAGE - 1 or c == nchunks - 1:
                first = c - c % PER_MESSAGE
                os.write(ready_w, struct.pack("II", first, c - first + 1))
        os.close(ready_w)
        server_cpu, server_sys = struct.unpack("dd", os.read(done_r, 16))
        dt = time.perf_counter() - t0
        c1 = _cpu()
        os.close(done_r)
        os.waitpid(pid, 0)
        del ring
        mm.close()
    finally:
        os.close(fd)
        os.unlink(path)
    return size / dt / 1e6, dt * 1e3, c1[0] - c0[0], server_cpu, server_sys


def _fmt(row) -> str:
    mbps, ms, writer, server, server_sys = row
    return (
        f"{mbps:6.0f} MB/s {ms:6.1f} ms | writer CPU {writer:4.0f} ms | "
        f"server CPU {server:4.0f} ms (system {server_sys:4.0f})"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=8)
    ap.add_argument("--frames", type=int, default=5_000)
    args = ap.parse_args()
    if not sys.platform.startswith("linux"):
        sys.exit("w3_floor.py needs Linux")
    rng = np.random.default_rng(3)
    frames = rng.integers(0, 256, size=(args.frames - args.frames % ROWS, FRAME), dtype=np.uint8)
    rows = []
    for r in range(args.runs):
        rows.append(one_run(frames, str(r)))
        print(f"run {r + 1}: {_fmt(rows[-1])}", flush=True)
    print(f"median: {_fmt([statistics.median(col) for col in zip(*rows)])}")


if __name__ == "__main__":
    main()
