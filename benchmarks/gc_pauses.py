#!/usr/bin/env python3
"""Garbage-collector pauses of a server process holding a big table, with and without
``ostinato.gc_pauses.keep_gc_pauses_short`` (what ``ostinato-server`` does by default).

A server process (one ``uniform`` table of ``workloads.py``, ``max_size`` 2,000,000)
receives ``--items`` W1 items (default 1,500,000) from one networked trajectory writer in
this process, while a second client asks ``server_info()`` every 10 ms. The server times
each full (generation 2) collection with ``gc.callbacks``. Reported per run: items/s,
``server_info`` latency p50 / p99 / max, full collections, their total and longest time,
and the young collections' total.
The two modes alternate, ``--rounds`` times each, each run in a fresh server process.

``--embedded``: the same items and probe with the server in this process (an embedded server,
which does not freeze: the program's own objects would be frozen too), the collections timed
here. This is where a stored item that the collector must visit costs the most, as every
thread of the program stops for each full collection.

    python benchmarks/gc_pauses.py --rounds 2 --json benchmarks/results_gc_pauses.json
    python benchmarks/gc_pauses.py --embedded --rounds 3
"""

from __future__ import annotations

import argparse
import gc
import json
import multiprocessing as mp
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import workloads as wl  # noqa: E402


def _gc_timer() -> tuple[dict[int, list[float]], Any]:
    """Seconds of each collection, by generation, and the ``gc.callbacks`` entry filling it."""
    took: dict[int, list[float]] = {0: [], 1: [], 2: []}
    started = [0.0]

    def timer(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            took[info["generation"]].append(time.perf_counter() - started[0])

    return took, timer


def _server(port: int, freeze: bool, ready: Any, done: Any) -> None:
    import ostinato as reverb
    from ostinato.gc_pauses import keep_gc_pauses_short

    took, timer = _gc_timer()
    gc.callbacks.append(timer)  # before the policy's: its freeze is not timed
    table = wl.build_table(reverb, wl.table_spec("uniform", "t", max_size=2_000_000))
    server = reverb.Server([table], port=port)
    if freeze:
        keep_gc_pauses_short()
    ready.put(server.port)
    done.get()
    ready.put({g: v for g, v in took.items()})


def run_once(items: int, freeze: bool, embedded: bool = False) -> dict[str, Any]:
    import ostinato as reverb

    if embedded:
        took, timer = _gc_timer()
        table = wl.build_table(reverb, wl.table_spec("uniform", "t", max_size=2_000_000))
        server = reverb.Server([table])
        client = server.localhost_client()
        gc.collect()
        gc.callbacks.append(timer)
    else:
        ctx = mp.get_context("spawn")
        ready, done = ctx.Queue(), ctx.Queue()
        proc = ctx.Process(target=_server, args=(0, freeze, ready, done), daemon=True)
        proc.start()
        port = ready.get(timeout=60)
        client = reverb.Client(f"localhost:{port}", in_process=False)
    stop = threading.Event()
    latencies: list[float] = []

    def probe() -> None:
        c = client if embedded else reverb.Client(f"localhost:{port}", in_process=False)
        while not stop.is_set():
            t = time.perf_counter()
            c.server_info()
            latencies.append(time.perf_counter() - t)
            time.sleep(0.01)

    steps = wl.w1_steps(50_000, seed=1)
    th = threading.Thread(target=probe, daemon=True)
    th.start()
    t0 = time.perf_counter()
    n = 0
    with client.trajectory_writer(1) as w:
        while n < items:
            n += wl.write_w1(w, "t", steps[: min(len(steps), items - n)])
    dt = time.perf_counter() - t0
    stop.set()
    th.join()
    if embedded:
        gc.callbacks.remove(timer)
        server.stop()
    else:
        done.put(1)
        took = ready.get(timeout=60)
        proc.kill()
    lat = np.array(latencies) * 1e3
    full = took[2]
    return {
        "mode": "embedded" if embedded else "freeze" if freeze else "default",
        "items": n,
        "items_per_s": n / dt,
        "server_info_ms": {
            "p50": float(np.median(lat)),
            "p99": float(np.percentile(lat, 99)),
            "max": float(lat.max()),
        },
        "full_collections": len(full),
        "full_total_ms": 1e3 * sum(full),
        "full_longest_ms": 1e3 * max(full, default=0.0),
        "young_total_ms": 1e3 * (sum(took[0]) + sum(took[1])),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--items", type=int, default=1_500_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", help="write every run here")
    ap.add_argument(
        "--embedded", action="store_true", help="the server in this process (no freezing)"
    )
    args = ap.parse_args()
    runs = []
    for r in range(args.rounds):
        modes = [False] if args.embedded else [False, True] if r % 2 == 0 else [True, False]
        for freeze in modes:
            res = run_once(args.items, freeze, args.embedded)
            runs.append(res)
            lat = res["server_info_ms"]
            print(
                f"[gc_pauses] {res['mode']:8s} {res['items_per_s']:>9,.0f} items/s  "
                f"server_info p50 {lat['p50']:.1f} p99 {lat['p99']:.1f} max {lat['max']:.1f} ms  "
                f"full collections {res['full_collections']}, {res['full_total_ms']:,.0f} ms, "
                f"longest {res['full_longest_ms']:.0f} ms; young {res['young_total_ms']:,.0f} ms",
                flush=True,
            )
    print()
    print(
        "| mode | items/s | `server_info` p50 / p99 / max, ms | full collections "
        "| their time, ms | longest, ms |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for mode in ("embedded",) if args.embedded else ("default", "freeze"):
        rs = [r for r in runs if r["mode"] == mode]

        def med(f: Any, rs: list[dict[str, Any]] = rs) -> float:
            return float(np.median([f(r) for r in rs]))

        lat = [med(lambda r, q=q: r["server_info_ms"][q]) for q in ("p50", "p99", "max")]
        print(
            f"| {mode} | {med(lambda r: r['items_per_s']):,.0f} | "
            f"{lat[0]:.1f} / {lat[1]:.1f} / {lat[2]:.1f} | "
            f"{med(lambda r: r['full_collections']):.0f} | "
            f"{med(lambda r: r['full_total_ms']):,.0f} | "
            f"{med(lambda r: r['full_longest_ms']):.0f} |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps({"items": args.items, "runs": runs}, indent=1))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
