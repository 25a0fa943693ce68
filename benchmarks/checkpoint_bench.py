#!/usr/bin/env python3
"""W7: checkpoint and restore a 100,000-item table, Ostinato vs dm-reverb side by side.

The same user code runs against either implementation (``import ostinato as reverb`` or
``import reverb``). Workload: a Uniform/Fifo table (max_size = items, MinSize(1)) filled by one
trajectory writer with 100,000 items of the last 10 steps of {obs float32[64]} (100,009 appended
steps, random normal data, ``num_keep_alive_refs=10``). Each run, per implementation:

1. a *save* child process (the implementation's interpreter) byte-compiles the library (as
   installing it does), builds a server with
   ``DefaultCheckpointer(root)``, fills it (untimed), times ``client.checkpoint()``, measures
   the checkpoint's bytes on disk and stops. Ostinato's save child also measures insert+sample
   throughput while three more saves run (``serving``; Ostinato-only API).
2. a *restore* child process (a fresh interpreter of the same implementation) imports the
   library and builds the table (untimed), then times
   ``reverb.Server([table], checkpointer=DefaultCheckpointer(root))`` plus the first
   ``server_info()`` over the network (``reverb.Client("localhost:PORT")``; Ostinato with
   ``in_process=False``) that shows all items: "restore s", server start included. The time
   from launching the child until that answer (interpreter start and imports included,
   TensorFlow for Reverb) is recorded as "launch to serving s", for information.

``--compare-reverb`` alternates the implementations run by run (ABBA: O R R O O R ...) so that
slow phases of a shared machine hit both, and prints every run and the medians. The Reverb side
runs under $OSTINATO_REVERB_PYTHON (default /opt/reverb-venv/bin/python).

Targets: checkpoint <= 0.5x Reverb's time, restore <= 1x, size <= 1x, serving >= 50% of normal.

Usage:
    python benchmarks/checkpoint_bench.py --compare-reverb --repeat 5 [--json out.json]
    python benchmarks/checkpoint_bench.py --impl ostinato --repeat 5
    /opt/reverb-venv/bin/python benchmarks/checkpoint_bench.py --impl reverb --repeat 5
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
import harness  # noqa: E402  (tables)
import servers  # noqa: E402  (impl import, child processes, reverb interpreter)
import workloads as wl  # noqa: E402  (the fill: W2-style items of 10 steps of obs f32[64])
from servers import log  # noqa: E402

SEQ = 10
ITEMS = 100_000
CHILD_TIMEOUT = 300  # a run normally takes seconds; see one_run
RETRIES = 2
TARGETS = {"checkpoint_s": 0.5, "restore_s": 1.0, "size_mb": 1.0}  # ostinato/reverb <= value
SERVING_TARGET = 0.5  # serving during saves >= 50 % of normal (ostinato only)
ROWS = [
    ("checkpoint_s", "client.checkpoint()", "s"),
    ("restore_s", "restore (server start included)", "s"),
    ("size_mb", "bytes on disk", "MB"),
    ("launch_s", "launch to serving (imports included)", "s"),
]


# --------------------------------------------------------------------------------------
# Shared user code (identical for both implementations)
# --------------------------------------------------------------------------------------


def make_table(reverb, n: int):
    return reverb.Table(
        "w7",
        reverb.selectors.Uniform(),
        reverb.selectors.Fifo(),
        n,
        reverb.rate_limiters.MinSize(1),
    )


def make_checkpointer(reverb, impl: str, root: str, compression: str | None):
    if impl == "ostinato":
        return reverb.checkpointers.DefaultCheckpointer(root, compression=compression)
    return reverb.checkpointers.DefaultCheckpointer(root)


def dir_bytes(root: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(root) for f in files)


# --------------------------------------------------------------------------------------
# Ostinato-only: serving throughput while saves run
# --------------------------------------------------------------------------------------


def serving_rate(server, seconds: float, during: threading.Event | None) -> float:
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


def measure_serving(server, client, ckpt, keep_path: str) -> dict:
    normal = serving_rate(server, 2.0, None)
    done = threading.Event()
    durations: list[float] = []
    ckpt.keep = 10  # keep the timed checkpoint: it is the one the restore child loads

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
    root = os.path.dirname(keep_path)
    for name in os.listdir(root):
        if os.path.join(root, name) != keep_path:
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)
    return {
        "serving_normal": normal,
        "serving_in_ckpt": loaded,
        "serving_share": loaded / normal,
        "saves_under_load_s": durations,
    }


# --------------------------------------------------------------------------------------
# Child processes
# --------------------------------------------------------------------------------------


def save_child(args) -> dict:
    reverb, ver = servers.import_impl(args.impl)
    # Byte-compile the library as an installed package is, so that the restore child does not
    # compile sources it imports lazily (PYTHONDONTWRITEBYTECODE, or sources newer than their
    # .pyc, would otherwise put compile time into the restore).
    compileall.compile_dir(os.path.dirname(reverb.__file__), quiet=2)
    ckpt = make_checkpointer(reverb, args.impl, args.root, args.compression)
    server = reverb.Server(tables=[make_table(reverb, args.items)], checkpointer=ckpt)
    client = (
        server.localhost_client()
        if args.impl == "ostinato"
        else reverb.Client(f"localhost:{server.port}")
    )
    wl.fill_obs_sequences(client, "w7", args.items, seed=0, seq=SEQ)
    t0 = time.perf_counter()
    path = client.checkpoint()
    out = {
        "version": ver,
        "checkpoint_s": time.perf_counter() - t0,
        "path": path,
        "size_mb": dir_bytes(args.root) / 1e6,
    }
    if args.impl == "ostinato" and args.serving:
        out.update(measure_serving(server, client, ckpt, path))
    server.stop()
    return out


def restore_child(args) -> dict:
    t_launch = time.perf_counter()
    reverb, ver = servers.import_impl(args.impl)
    table = make_table(reverb, args.items)
    import_s = time.perf_counter() - t_launch
    t0 = time.perf_counter()
    server = reverb.Server(
        tables=[table], checkpointer=make_checkpointer(reverb, args.impl, args.root, None)
    )
    client = servers.connect(reverb, args.impl, server.port, check=False)
    size = client.server_info()["w7"].current_size
    restore_s = time.perf_counter() - t0
    if size != args.items:
        raise SystemExit(f"restored {size} items, expected {args.items}")
    return {"version": ver, "restore_s": restore_s, "import_s": import_s, "items": size}


def _run_child(impl: str, mode: str, root: str, args) -> tuple[dict, float]:
    py = sys.executable if impl == "ostinato" else servers.reverb_python()
    cmd = [
        py,
        os.path.abspath(__file__),
        "--impl",
        impl,
        f"--{mode}-child",
        root,
        "--items",
        str(args.items),
    ]
    if args.compression:
        cmd += ["--compression", args.compression]
    if not args.serving:
        cmd.append("--no-serving")
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pump = threading.Thread(
        target=servers.pump, args=(proc.stderr, f"  ({impl} {mode}) "), daemon=True
    )
    pump.start()
    try:
        line = servers.readline(proc, CHILD_TIMEOUT, f"{impl} {mode} child")
    except BaseException:
        proc.kill()
        raise
    wall = time.perf_counter() - t0
    proc.wait(timeout=60)
    pump.join(timeout=5)
    if proc.returncode != 0:
        raise SystemExit(f"{impl} {mode} child failed with rc={proc.returncode}")
    return json.loads(line), wall


def one_run(impl: str, args) -> dict:
    for attempt in range(RETRIES + 1):
        root = tempfile.mkdtemp(prefix=f"w7-{impl}-")
        try:
            saved, _ = _run_child(impl, "save", root, args)
            restored, wall = _run_child(impl, "restore", root, args)
            break
        except RuntimeError as e:  # no answer in time: dm-reverb's writer once stalled for
            if attempt == RETRIES:  # minutes filling the table on a starved 2-CPU machine
                raise
            log(f"  {impl}: {e}; running it again")
        finally:
            shutil.rmtree(root, ignore_errors=True)
    out = {**saved, **restored, "launch_s": wall}
    extra = f", serving {out['serving_share']:.0%} of normal" if "serving_share" in out else ""
    log(
        f"  {impl}: checkpoint {out['checkpoint_s']:.3f} s, restore {out['restore_s']:.3f} s "
        f"(launch to serving {wall:.2f} s, imports {out['import_s']:.2f} s), "
        f"{out['size_mb']:.1f} MB{extra}"
    )
    return out


# --------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------


def summarize(runs: list[dict]) -> dict:
    out: dict = {"runs": runs, "version": runs[0]["version"] if runs else None}
    for key in ("checkpoint_s", "restore_s", "size_mb", "launch_s", "import_s", "serving_share"):
        vals = [r[key] for r in runs if key in r]
        if vals:
            out[key] = {
                "values": vals,
                "median": statistics.median(vals),
                "min": min(vals),
                "max": max(vals),
            }
    return out


def _cell(res: dict | None, key: str) -> str:
    if not res or key not in res:
        return "-"
    m = res[key]
    if m["min"] == m["max"]:
        return f"{m['median']:.3f}"
    return f"{m['median']:.3f} ({m['min']:.3f}-{m['max']:.3f})"


def report(ost: dict | None, rev: dict | None, args) -> list[tuple]:
    rows = []
    for key, label, unit in ROWS:
        ratio = target = verdict = "-"
        if ost and rev and key in ost and key in rev:
            r = ost[key]["median"] / rev[key]["median"]
            ratio = f"{r:.2f}x"
            if key in TARGETS:
                target = f"<= {TARGETS[key]:g}x"
                verdict = "PASS" if r <= TARGETS[key] else "FAIL"
        rows.append((label, _cell(ost, key), _cell(rev, key), unit, ratio, target, verdict))
    if ost and "serving_share" in ost:
        s = ost["serving_share"]
        rows.append(
            (
                "serving during saves (% of normal)",
                f"{100 * s['median']:.0f} ({100 * s['min']:.0f}-{100 * s['max']:.0f})",
                "not measured",
                "%",
                "-",
                f">= {100 * SERVING_TARGET:.0f}%",
                "PASS" if s["median"] >= SERVING_TARGET else "FAIL",
            )
        )
    return rows


def print_runs(name: str, res: dict) -> None:
    keys = [
        k
        for k in ("checkpoint_s", "restore_s", "size_mb", "launch_s", "import_s", "serving_share")
        if k in res
    ]
    print(f"\n{name} {res['version']}, every run:")
    for k in keys:
        print(
            f"  {k:<14}"
            + "  ".join(f"{v:8.3f}" for v in res[k]["values"])
            + f"   median {res[k]['median']:.3f}"
        )


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--impl", choices=["ostinato", "reverb"], default="ostinato")
    p.add_argument(
        "--compare-reverb",
        action="store_true",
        help="run both implementations, alternating run by run, and compare",
    )
    p.add_argument("--repeat", type=int, default=5, help="runs per implementation (median)")
    p.add_argument("--items", type=int, default=ITEMS)
    p.add_argument("--compression", default=None, help="Ostinato's chunk compression (zstd)")
    p.add_argument(
        "--no-serving",
        dest="serving",
        action="store_false",
        help="skip Ostinato's serving-during-saves measurement",
    )
    p.add_argument("--json", default=None, help="write all runs and medians to this file")
    p.add_argument("--markdown", action="store_true", help="also print a markdown table")
    p.add_argument("--save-child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--restore-child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.repeat < 1:
        p.error("--repeat must be >= 1")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    servers.set_log_prefix("checkpoint_bench")
    for mode, fn in (("save", save_child), ("restore", restore_child)):
        root = getattr(args, f"{mode}_child")
        if root is not None:
            args.root = root
            print(json.dumps(fn(args)), flush=True)
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)  # skip slow interpreter/TF teardown
    impls = ["ostinato", "reverb"] if args.compare_reverb else [args.impl]
    runs: dict[str, list[dict]] = {i: [] for i in impls}
    t_start = time.perf_counter()
    for r in range(args.repeat):
        order = impls[::-1] if r % 4 in (1, 2) else impls  # ABBA ABBA ...
        log(f"run {r + 1}/{args.repeat}: {' then '.join(order)}")
        for impl in order:
            runs[impl].append(one_run(impl, args))
    res = {i: summarize(v) for i, v in runs.items()}
    ost, rev = res.get("ostinato"), res.get("reverb")
    for name, r in res.items():
        print_runs(name, r)
    rows = report(ost, rev, args)
    title = " vs ".join(f"{n} {r['version']}" for n, r in res.items())
    print(
        f"\nW7, {args.items:,} items: {title} (median of {args.repeat}, range in brackets; "
        f"{os.cpu_count()} CPUs)\n"
    )
    hdr = ("", "ostinato", "reverb", "unit", "ratio", "target", "result")
    print(harness.text_table(rows, hdr, left=(0, 3, 5)))
    if args.markdown:
        print("\n" + harness.markdown_table(rows, hdr))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "results": res,
                    "items": args.items,
                    "repeat": args.repeat,
                    "commit": servers.git_commit(),
                },
                f,
                indent=2,
            )
        log(f"wrote {args.json}")
    log(f"total {time.perf_counter() - t_start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
