#!/usr/bin/env python3
"""Where networked W3's time goes: CPU and page faults of the writer and of the server, per run.

Networked W3 (``net_bench.py``) moves 5,000 frames of uint8[84,84,4] (141 MB) from a trajectory
writer to a server process on the same host. Its wall time can be no shorter than the busier
of the two processes' CPU time (and, on a machine with two cores, than half their sum). This
script runs the same loop (``workloads.write_w3``) against the server net_bench.py starts, and
reads from ``/proc`` each process's user and system CPU time and minor page faults during each
run. ``--full`` runs W3F instead: the table holds a quarter of the frames and is filled first,
so that every frame evicts the oldest (a replay buffer's steady state), and the server can put
new frames in memory the evicted ones freed.

    python benchmarks/w3_cpu.py --runs 8
    python benchmarks/w3_cpu.py --runs 8 --full

CPU times come in the kernel's clock ticks (10 ms on most Linux systems): read medians over
several runs, not one run's figure. Linux only.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import servers  # noqa: E402
import workloads as wl  # noqa: E402

import ostinato as reverb  # noqa: E402


def proc_times(pid: int) -> tuple[float, float, int]:
    """(user ms, system ms, minor page faults) of process ``pid`` so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = 1e3 / os.sysconf("SC_CLK_TCK")
    return int(fields[11]) * tick, int(fields[12]) * tick, int(fields[7])


def _fmt(row) -> str:
    mbps, ms, wu, ws, wf, su, ss, sf = row
    return (
        f"{mbps:6.0f} MB/s {ms:6.1f} ms | writer user {wu:4.0f} sys {ws:4.0f} ms, {wf:6.0f} "
        f"faults | server user {su:4.0f} sys {ss:4.0f} ms, {sf:6.0f} faults"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=8, help="runs, each into a fresh table")
    ap.add_argument("--frames", type=int, default=wl.Sizes().w3_steps, help="frames per run")
    ap.add_argument(
        "--full", action="store_true", help="W3F: tables of frames/4 items, filled first"
    )
    args = ap.parse_args()
    if not sys.platform.startswith("linux"):
        sys.exit("w3_cpu.py reads /proc: Linux only")
    steps = wl.w3_steps(args.frames, seed=3)
    max_size = len(steps) // 4 if args.full else wl.TABLE_MAX_SIZE
    # The server net_bench.py starts (servers.py --serve), one table per run.
    specs = [wl.table_spec("uniform", f"t{r}", max_size) for r in range(args.runs)]
    with servers.Deployment(reverb, "ostinato", "networked", specs) as dep:
        client = dep.client()
        server = dep.proc.proc  # the server's process
        me = os.getpid()
        rows = []
        name = "W3F" if args.full else "W3"
        print(f"{name}: {len(steps):,} frames per run, tables of max_size {max_size:,}")
        for r in range(args.runs):
            table = f"t{r}"
            if args.full:
                with client.trajectory_writer(num_keep_alive_refs=1) as w:
                    wl.write_w3(w, table, steps[:max_size])
            gc.collect()
            c0, s0 = proc_times(me), proc_times(server.pid)
            with client.trajectory_writer(num_keep_alive_refs=1) as w:
                t0 = time.perf_counter()
                n = wl.write_w3(w, table, steps)
                w.flush()
                dt = time.perf_counter() - t0
            time.sleep(0.05)  # the server's last acknowledgements are counted
            c1, s1 = proc_times(me), proc_times(server.pid)
            row = (
                n * wl.W3_FRAME_BYTES / dt / 1e6,
                dt * 1e3,
                c1[0] - c0[0],
                c1[1] - c0[1],
                c1[2] - c0[2],
                s1[0] - s0[0],
                s1[1] - s0[1],
                s1[2] - s0[2],
            )
            rows.append(row)
            print(f"run {r + 1}: {_fmt(row)}", flush=True)
        med = [statistics.median(col) for col in zip(*rows)]
        print(f"median: {_fmt(med)}")


if __name__ == "__main__":
    main()
