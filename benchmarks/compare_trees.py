#!/usr/bin/env python3
"""Two versions of Ostinato side by side: the same benchmark scripts, alternating runs.

Runs ``core_bench.py``, ``net_bench.py``, ``checkpoint_bench.py`` and/or ``dataset_bench.py``
(``--impl ostinato``, one repeat per run) with ``PYTHONPATH`` set to the ``src/`` of each tree in
turn -- A, B, A, B, ... -- so that both see the same machine load, and prints the median of each
workload per tree and their ratio. Use it to check that a change slowed nothing down::

    git worktree add /tmp/before <commit>
    python benchmarks/compare_trees.py /tmp/before/src src --rounds 5
    python benchmarks/compare_trees.py /tmp/before/src src --benches core --workloads W1,W2

The benchmark scripts of *this* checkout are used for both trees (they use the public API only).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent

#: bench name -> (script, extra arguments, how to read its JSON into {workload: value})
BENCHES = {
    "core": ("core_bench.py", ["--repeat", "1"]),
    "net": ("net_bench.py", ["--repeat", "1"]),
    "checkpoint": ("checkpoint_bench.py", ["--repeat", "1"]),
    "dataset": ("dataset_bench.py", ["--repeat", "1", "--adapters", "numpy,torch"]),
}
QUICK = {
    "core": ["--quick"],
    "net": ["--quick"],
    "checkpoint": ["--items", "5000"],
    "dataset": ["--items", "5000", "--batches", "20"],
}
DEFAULT_WORKLOADS = {
    "core": "W1,W1t,W1F,W2,W4,W4f,W4b,W5,W5b",
    "net": "W1,W1t,W1F,W2,W3,W4,W4f,W4b,W5,W5b,W6",
}


def _values(bench: str, data: dict) -> dict[str, float]:
    """{workload: value} from a script's JSON (higher is better but for W7's seconds and MB)."""
    out: dict[str, float] = {}
    if bench in ("core", "net"):
        for name, r in data.get("results", {}).items():
            if isinstance(r, dict) and r.get("median") is not None:
                out[name] = float(r["median"])
    elif bench == "checkpoint":  # seconds and MB: lower is better
        res = data.get("results", {}).get("ostinato", {})
        for key in ("checkpoint_s", "restore_s", "size_mb", "serving_share"):
            if isinstance(res.get(key), dict):
                out[f"W7 {key}"] = float(res[key]["median"])
    elif bench == "dataset":
        for name, r in data.get("ostinato", {}).items():
            if isinstance(r, dict) and "median" in r:
                out[f"W8 {name}"] = float(r["median"])
    return out


def run_once(bench: str, src: str, workloads: str | None, quick: bool) -> dict[str, float]:
    script, extra = BENCHES[bench]
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "out.json")
        cmd = [sys.executable, str(HERE / script), "--impl", "ostinato", *extra, "--json", out]
        if workloads and bench in ("core", "net"):
            cmd += ["--workloads", workloads]
        if quick:
            cmd += QUICK[bench]
        env = dict(os.environ, PYTHONPATH=os.path.abspath(src))
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if proc.returncode != 0 or not os.path.exists(out):
            sys.stderr.write(proc.stderr[-3000:])
            raise SystemExit(f"{script} failed with PYTHONPATH={src}")
        with open(out) as f:
            return _values(bench, json.load(f))


def _fmt(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.4g}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tree_a", help="src/ directory of the first version (e.g. before a change)")
    ap.add_argument("tree_b", help="src/ directory of the second version")
    ap.add_argument("--benches", default="core,net", help="of: core, net, checkpoint, dataset")
    ap.add_argument(
        "--workloads", default=None, help="core/net workloads (default: the speed ones)"
    )
    ap.add_argument("--rounds", type=int, default=3, help="alternating runs per tree (median)")
    ap.add_argument("--quick", action="store_true", help="small sizes (a smoke test)")
    ap.add_argument("--json", default=None, help="write every run here")
    args = ap.parse_args()
    trees = {"A": args.tree_a, "B": args.tree_b}
    runs: dict[str, dict[str, dict[str, list[float]]]] = {}
    for bench in args.benches.split(","):
        runs[bench] = {"A": {}, "B": {}}
        wl = args.workloads or DEFAULT_WORKLOADS.get(bench)
        for r in range(args.rounds):
            for tag in ("A", "B") if r % 2 == 0 else ("B", "A"):
                vals = run_once(bench, trees[tag], wl, args.quick)
                for k, v in vals.items():
                    runs[bench][tag].setdefault(k, []).append(v)
                print(
                    f"[{bench} round {r + 1} {tag}] "
                    + ", ".join(f"{k} {v:,.1f}" for k, v in vals.items()),
                    file=sys.stderr,
                    flush=True,
                )
    print(f"| bench | workload | A: {args.tree_a} | B: {args.tree_b} | B/A | A runs | B runs |")
    print("|---|---|---:|---:|---:|---|---|")
    for bench, by_tree in runs.items():
        for k in sorted(set(by_tree["A"]) & set(by_tree["B"])):
            a, b = by_tree["A"][k], by_tree["B"][k]
            ma, mb = statistics.median(a), statistics.median(b)
            print(
                f"| {bench} | {k} | {_fmt(ma)} | {_fmt(mb)} | "
                f"{mb / ma if ma else float('nan'):.3f} | {', '.join(map(_fmt, a))} | "
                f"{', '.join(map(_fmt, b))} |"
            )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"trees": trees, "runs": runs}, f, indent=1)


if __name__ == "__main__":
    main()
