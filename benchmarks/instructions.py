#!/usr/bin/env python3
"""CPU instructions per item of the embedded insert workloads, counted by valgrind.

On a shared VM single timed runs spread by up to 2×, and a change worth 5% cannot be seen in
time. Instructions do not depend on the machine's load: this script runs each workload under
valgrind's callgrind with instrumentation off, switches it on (``callgrind_control -i on``)
just before the measured loop and reads the total at exit. What is counted:

* ``W1``, ``W2``: the workload's user code (``workloads.py``) for ``--items`` steps into an
  embedded table, after a 500-step warm-up, then ``flush()``;
* ``W3``: W1's loop with one 28 KB frame per step (``workloads.py``'s W3), embedded;
* ``W1F``: W1 into a full table (``max_size`` 1,000, filled by the warm-up), every item
  evicting the oldest;
* ``W9``, ``W9s``: 16 vectorised environments through ``BatchedTrajectoryObserver``, items of
  1 and 10 steps; counted per environment step (``--items`` vector steps of 16);
* ``WP``, ``WS``: writes the way two real clients write, per step of W2's data: Acme's
  adders (each step in two appends, the first ``partial_step=True``; items of the last 5
  steps of 4 columns) and a structured writer (an n-step transition and a 5-step sequence
  config: two items per step);
* the floor of W1 and W2 (``floors.py``: the user's loop against a do-nothing writer, plus one
  numpy store per value and one dict entry per item).

Three adjustments keep the count representative. The child leaves with ``os._exit`` right
after the measured loop, so that the interpreter's teardown (about 15 million instructions)
is not counted. Objects that exist before the measured loop
(imports, the warm-up) are frozen out of the garbage collector (``gc.freeze()``), so a full
collection of them does not land in one run's count. And a writer's items are held up to
``HOLD_SECONDS`` before they go into their table in one batch: valgrind runs about 50 times
slower, so the hold is lengthened, or batches would shrink to an item or two and the count
would describe a different program.

    python benchmarks/instructions.py                       # W1, W2, W1F and the floors
    python benchmarks/instructions.py --workloads W9,W9s    # per environment step
    python benchmarks/instructions.py --src /tmp/before/src # another tree (PYTHONPATH)

Needs ``valgrind`` (with ``callgrind_control``). Each workload takes 10-30 s.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORKLOADS = ("W1", "W2", "W1F", "W3", "W9", "W9s", "WP", "WS")
DEFAULT_WORKLOADS = ("W1", "W2", "W1F")
FLOORS = ("W1", "W2")
WARM_UP = 500
FULL_TABLE = 1_000


def _child(workload: str, items: int, floor: bool, go: str) -> None:
    """Inside valgrind: set up, announce, wait for instrumentation, run the measured loop."""
    sys.path.insert(0, str(HERE))
    import floors
    import workloads as wl

    import ostinato as reverb
    from ostinato.transport import streams

    streams.HOLD_SECONDS = 60.0  # keep real batch sizes under valgrind's slowdown
    if workload in ("W9", "W9s"):
        _child_w9(reverb, wl, workload, items, go)
    if workload in ("WP", "WS"):
        _child_client_pattern(reverb, wl, workload, items, go)
    two = workload == "W2"
    steps = wl.w2_steps(items + WARM_UP, 2) if two else wl.w1_steps(items + WARM_UP, 1)
    write = wl.write_w2 if two else wl.write_w1
    if workload == "W3":  # one uint8[84,84,4] frame per step and item
        steps, write = wl.w3_steps(items + WARM_UP, 3), wl.write_w3
    keep = wl.SEQ if two else 1
    size = FULL_TABLE if workload == "W1F" else wl.TABLE_MAX_SIZE
    server = reverb.Server([wl.build_table(reverb, wl.table_spec("uniform", "t", size))])
    client = server.localhost_client()
    with client.trajectory_writer(keep) as w:
        write(w, "t", steps[:WARM_UP])
    if workload != "W1F":
        client.reset("t")
    measured = steps[WARM_UP:]

    def run() -> None:
        if floor:
            write(floors._NullWriter(), "t", measured)
            floors._least_insert(measured, keep, 1)
        else:
            with client.trajectory_writer(keep) as w:
                write(w, "t", measured)

    _measure(run, go)


def _measure(run: Callable[[], None], go: str) -> None:
    """Freezes what exists, announces ``ready``, waits for ``go`` (instrumentation is on by
    then), runs the measured loop and leaves at once: the interpreter's teardown (every
    module, the server) would add millions of instructions to the count. callgrind still
    writes its totals at exit."""
    import gc

    gc.collect()
    gc.freeze()
    print("ready", flush=True)
    while not os.path.exists(go):
        time.sleep(0.1)
    run()
    sys.stdout.flush()
    os._exit(0)


def _child_w9(reverb, wl, workload: str, items: int, go: str) -> None:
    """W9/W9s: ``items`` vector steps of 16 environments through the batched observer."""
    length = 1 if workload == "W9" else wl.SEQ
    warm = WARM_UP // 10
    cols = wl.w9_steps(items + warm, wl.W9_ENVS, seed=9)
    server = reverb.Server([wl.build_table(reverb, wl.table_spec("uniform", "t"))])
    client = server.localhost_client()
    observer = reverb.observers.BatchedTrajectoryObserver(client, "t", length, num_envs=wl.W9_ENVS)
    wl.write_w9_observer(observer, {k: v[:warm] for k, v in cols.items()})
    measured = {k: v[warm:] for k, v in cols.items()}
    _measure(lambda: wl.write_w9_observer(observer, measured), go)


def _child_client_pattern(reverb, wl, workload: str, items: int, go: str) -> None:
    """WP (Acme's partial steps) and WS (a structured writer): ``items`` steps of W2's data."""
    steps = wl.w2_steps(items + WARM_UP, 2)
    server = reverb.Server([wl.build_table(reverb, wl.table_spec("uniform", "t"))])
    client = server.localhost_client()
    if workload == "WP":
        writer = client.trajectory_writer(5)
        wl.write_partial(writer, "t", steps[:WARM_UP])
        _measure(lambda: wl.write_partial(writer, "t", steps[WARM_UP:]), go)
    writer = client.structured_writer(wl.structured_configs(reverb, "t"))
    wl.write_structured(writer, steps[:WARM_UP])
    _measure(lambda: wl.write_structured(writer, steps[WARM_UP:]), go)


def count(workload: str, items: int, floor: bool, src: str | None) -> float:
    """Instructions per item of one run under callgrind."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "callgrind.out")
        go = os.path.join(tmp, "go")
        env = dict(os.environ)
        if src:
            env["PYTHONPATH"] = src
        cmd = [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            f"--callgrind-out-file={out}",
            sys.executable,
            __file__,
            "--child",
            workload,
            "--items",
            str(items),
            "--go",
            go,
        ] + (["--floor"] if floor else [])
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.strip() == b"ready":
                break
        else:
            proc.wait()
            raise RuntimeError(f"{workload}: the child ended before it was ready")
        subprocess.run(
            ["callgrind_control", "-i", "on", str(proc.pid)], check=True, capture_output=True
        )
        Path(go).touch()
        proc.stdout.read()
        if proc.wait() != 0:
            raise RuntimeError(f"{workload}: the child failed ({proc.returncode})")
        text = Path(out).read_text(errors="replace")
    m = re.search(r"^(?:summary|totals): (\d+)", text, re.M)
    if m is None:
        raise RuntimeError(f"{workload}: no total in callgrind's output")
    if workload in ("W9", "W9s"):  # per environment step
        sys.path.insert(0, str(HERE))
        import workloads as wl

        items *= wl.W9_ENVS
    return int(m.group(1)) / items


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--workloads", default=",".join(DEFAULT_WORKLOADS), help=f"of {', '.join(WORKLOADS)}"
    )
    ap.add_argument("--items", type=int, default=3_000)
    ap.add_argument("--src", help="a tree's src/ to measure instead of the installed package")
    ap.add_argument("--no-floor", action="store_true", help="skip the floors")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--floor", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--go", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _child(args.child, args.items, args.floor, args.go)
        return
    for tool in ("valgrind", "callgrind_control"):
        if shutil.which(tool) is None:
            sys.exit(f"instructions.py needs {tool} (apt install valgrind)")
    names = [w.strip() for w in args.workloads.split(",") if w.strip()]
    for w in names:
        if w not in WORKLOADS:
            sys.exit(f"--workloads: unknown {w!r} (one of {', '.join(WORKLOADS)})")
    print(f"instructions per item, {args.items:,} items ({args.src or 'installed ostinato'})")
    print("| workload | Ostinato | floor | Ostinato / floor |")
    print("|---|---:|---:|---:|")
    for w in names:
        ours = count(w, args.items, False, args.src)
        if w in FLOORS and not args.no_floor:
            fl = count(w, args.items, True, args.src)
            print(f"| {w} | {ours:,.0f} | {fl:,.0f} | {ours / fl:.1f}× |", flush=True)
        else:
            print(f"| {w} | {ours:,.0f} | | |", flush=True)


if __name__ == "__main__":
    main()
