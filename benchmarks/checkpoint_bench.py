"""W7: checkpoint a W2-style table of 100,000 items (10-step items, obs float32[64]).

Measures ``client.checkpoint()`` time, restore time (a new Server restoring from it), bytes on
disk, and insert/sample throughput while a checkpoint runs compared with normal.
Reverb 0.14 on the reference machine: 2.07 s to checkpoint, 0.54 s to restore, 30.7 MB, and no
serving during the save. Targets: checkpoint <= 0.5x, restore <= 1x, size <= 1x, serving >= 50%.

Usage: python benchmarks/checkpoint_bench.py [--items N] [--compression zstd]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import threading
import time

import numpy as np

import ostinato as reverb
from ostinato import checkpointers

REVERB = {"checkpoint_s": 2.07, "restore_s": 0.54, "size_mb": 30.7}
SEQ = 10


def make_table(n: int) -> reverb.Table:
    return reverb.Table("w7", reverb.selectors.Uniform(), reverb.selectors.Fifo(), n,
                        reverb.rate_limiters.MinSize(1))


def fill(client: reverb.Client, n: int) -> None:
    rng = np.random.default_rng(0)
    obs = rng.standard_normal((n + SEQ, 64), dtype=np.float32)
    with client.trajectory_writer(num_keep_alive_refs=SEQ) as w:
        for i in range(n + SEQ - 1):
            w.append({"obs": obs[i]})
            if i + 1 >= SEQ:
                w.create_item("w7", 1.0, {"obs": w.history["obs"][-SEQ:]})
        w.flush()


def serving_rate(server: reverb.Server, seconds: float, during: threading.Event | None) -> float:
    """Operations per second of one inserting thread and one sampling thread."""
    table = server.tables_by_name["w7"]
    client = server.localhost_client()
    ops = [0, 0]
    stop = threading.Event()

    def sampler() -> None:
        while not stop.is_set():
            table.sample(32)
            ops[0] += 32

    def inserter() -> None:
        row = np.zeros(64, np.float32)
        with client.trajectory_writer(num_keep_alive_refs=SEQ) as w:
            i = 0
            while not stop.is_set():
                w.append({"obs": row})
                i += 1
                if i >= SEQ:
                    w.create_item("w7", 1.0, {"obs": w.history["obs"][-SEQ:]})
                    ops[1] += 1
                if i % 100 == 0:
                    w.flush()
    threads = [threading.Thread(target=sampler), threading.Thread(target=inserter)]
    for t in threads:
        t.start()
    t0 = time.perf_counter()
    if during is not None:
        during.wait()
    else:
        time.sleep(seconds)
    el = time.perf_counter() - t0
    stop.set()
    for t in threads:
        t.join()
    return sum(ops) / el


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--items", type=int, default=100_000)
    ap.add_argument("--compression", default=None)
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="w7-")
    try:
        ck = checkpointers.DefaultCheckpointer(root, compression=args.compression)
        server = reverb.Server([make_table(args.items)], checkpointer=ck)
        client = server.localhost_client()
        fill(client, args.items)
        t0 = time.perf_counter()
        path = client.checkpoint()
        ckpt_s = time.perf_counter() - t0
        size = sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))
        normal = serving_rate(server, 2.0, None)
        done = threading.Event()
        durations = []

        def save_loop() -> None:
            for _ in range(3):
                t = time.perf_counter()
                client.checkpoint()
                durations.append(time.perf_counter() - t)
            done.set()
        th = threading.Thread(target=save_loop)
        th.start()
        loaded = serving_rate(server, 0, done)
        th.join()
        server.stop()
        t0 = time.perf_counter()
        s2 = reverb.Server([make_table(args.items)],
                           checkpointer=checkpointers.DefaultCheckpointer(root))
        restore_s = time.perf_counter() - t0
        assert len(s2.tables_by_name["w7"]) == args.items
        s2.stop()
        rows = [("W7 checkpoint s", ckpt_s, REVERB["checkpoint_s"], "<= 0.5x"),
                ("W7 restore s", restore_s, REVERB["restore_s"], "<= 1x"),
                ("W7 size MB", size / 1e6, REVERB["size_mb"], "<= 1x")]
        for name, ours, theirs, target in rows:
            print(f"{name:<28}{ours:10.3f}{theirs:10.3f}   {ours / theirs:5.2f}x   target {target}")
        print(f"{'W7 serving ops/s normal':<28}{normal:10.0f}")
        print(f"{'W7 serving ops/s in ckpt':<28}{loaded:10.0f}   {loaded / normal:5.0%} of normal "
              f"(target >= 50%; saves under load took {', '.join(f'{d:.2f}' for d in durations)} s)")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
