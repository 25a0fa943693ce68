#!/usr/bin/env python3
"""Ostinato against dm-reverb, each in its faster mode, in alternated runs.

On a small VM dm-reverb's sampling runs in one of two modes from run to run (see "Noise" in
``benchmarks/README.md``); pinned to one CPU it is steadily in its fast mode, while its inserts
are faster unpinned. A single ``--compare-reverb`` run can therefore catch it at its slowest
and overstate our ratios. This script makes the comparison honest:

* every run is a fresh process of ``core_bench.py`` or ``net_bench.py`` (``--repeat 1``);
* each round runs every *side* -- Ostinato and dm-reverb, each unpinned and pinned to one CPU
  (``--pin-cpu``) -- in an order that rotates from round to round, so all sides see the same
  machine load;
* per workload each implementation is credited with its faster mode (the higher median over
  the rounds), and the table names that mode;
* it prints medians, the spread of the runs (min-max), the ratio of the medians, and the
  range of the ratio from Ostinato's slowest run against dm-reverb's fastest to the reverse.

Examples::

    python benchmarks/versus_reverb.py --benches core --rounds 3
    python benchmarks/versus_reverb.py --benches net --workloads W1,W2,W3 --rounds 3 \\
        --json benchmarks/results_versus_net.json

dm-reverb's interpreter is ``$OSTINATO_REVERB_PYTHON`` (see ``benchmarks/README.md``). The
targets are those of the benchmark scripts (``core_bench.TARGETS``, ``net_bench.TARGETS``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import core_bench  # noqa: E402
import net_bench  # noqa: E402
import servers  # noqa: E402
import workloads as wl  # noqa: E402

BENCHES = {
    "core": (core_bench.BENCH, "W1,W1t,W1F,W2,W4,W4f,W4b,W5,W5b"),
    "net": (net_bench.BENCH, "W1,W1t,W1F,W2,W3,W3F,W4,W4f,W4b,W5,W5b,W6"),
}
MODES = ("unpinned", "pinned")
#: Longest a single benchmark process may run before it is killed (its run then counts as
#: missing: dm-reverb pinned to one CPU sometimes spins for minutes in a writer's flush).
RUN_TIMEOUT = 900


def _run(bench, impl: str, mode: str, workloads: list[str], args) -> dict[str, dict]:
    """One fresh benchmark process; returns its JSON ``results`` ({workload: summary})."""
    ids = [w for w in workloads if not (impl == "reverb" and wl.WORKLOADS[w].ostinato_only)]
    if impl == "reverb":  # the baselines of Ostinato-only workloads
        ids += [
            b
            for w in workloads
            if (b := wl.WORKLOADS[w].baseline) and b not in ids and b in bench.allowed
        ]
    py = servers.reverb_python() if impl == "reverb" else sys.executable
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "out.json")
        cmd = [py, bench.script, "--impl", impl, "--repeat", "1", "--json", out]
        cmd += ["--workloads", ",".join(ids), "--sample-style", args.sample_style]
        if bench.mode == "networked":
            cmd += ["--no-plot"]
        if mode == "pinned":
            cmd += ["--pin-cpu", str(args.pin_cpu)]
        if args.quick:
            cmd += ["--quick"]
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(
                cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT, check=False
            )
        except subprocess.TimeoutExpired:
            servers.log(f"{bench.mode} {impl} {mode}: no result in {RUN_TIMEOUT} s, run missing")
            return {}
        if proc.returncode != 0 or not os.path.exists(out):
            sys.stderr.write(proc.stderr[-3000:])
            servers.log(f"{bench.mode} {impl} {mode} failed (rc={proc.returncode}), run missing")
            return {}
        with open(out) as f:
            results = json.load(f)["results"]
        servers.log(
            f"{bench.mode} {impl} {mode} ({time.perf_counter() - t0:.0f} s): "
            + ", ".join(f"{k} {v['median']:,.1f}" for k, v in results.items() if "median" in v)
        )
        return results


def _fmt(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:,.1f}" if abs(x) >= 10 else f"{x:.3g}"


def _best(runs: dict[str, list[float]]) -> tuple[str, list[float]] | None:
    """The mode with the higher median, and its runs."""
    have = [(statistics.median(v), m, v) for m, v in runs.items() if v]
    if not have:
        return None
    _, mode, vals = max(have)
    return mode, vals


def table(bench, runs: dict, workloads: list[str], units: dict[str, str]) -> tuple[str, int, int]:
    """The markdown comparison, and (targets met, targets)."""
    hdr = (
        "workload",
        "Ostinato: median (mode) [runs min-max]",
        "dm-reverb: median (mode) [runs min-max]",
        "ratio of medians",
        "ratio range",
        "target",
        "met/short",
    )
    rows, met, total = [], 0, 0
    names = [n for n in runs["ostinato"] if n.split("_")[0] in workloads or n in workloads]
    for name in names:
        base = wl.WORKLOADS[name].baseline if name in wl.WORKLOADS else None
        o = _best(runs["ostinato"].get(name, {}))
        r = _best(runs["reverb"].get(base or name, {}))
        if o is None:
            continue
        unit = wl.WORKLOADS[name].title if name in wl.WORKLOADS else wl.EXTRA_TITLES.get(name, "")
        label = f"{name} {unit}, {units.get(name, '')}" + (f" (Reverb: its {base})" if base else "")
        oc = f"{_fmt(statistics.median(o[1]))} ({o[0]}) [{_fmt(min(o[1]))}-{_fmt(max(o[1]))}]"
        t = bench.targets.get(name)
        if r is None:
            rows.append((label, oc, "-", "-", "-", t.label() if t else "", ""))
            continue
        rc = f"{_fmt(statistics.median(r[1]))} ({r[0]}) [{_fmt(min(r[1]))}-{_fmt(max(r[1]))}]"
        ratio = statistics.median(o[1]) / statistics.median(r[1])
        lo, hi = min(o[1]) / max(r[1]), max(o[1]) / min(r[1])
        verdict = ""
        if t is not None and t.kind == "ratio":
            total += 1
            if ratio >= t.value:
                met += 1
                verdict = "met"
            else:
                verdict = f"**short** by {100 * (1 - ratio / t.value):.0f}%"
        # Truncated, not rounded: a ratio short of its target never prints as the target.
        rows.append(
            (
                label,
                oc,
                rc,
                f"{math.floor(ratio * 100) / 100:.2f}×",
                f"{lo:.2f}-{hi:.2f}×",
                t.label() if t and t.kind == "ratio" else "",
                verdict,
            )
        )
    lines = ["| " + " | ".join(hdr) + " |", "|---|---:|---:|---:|---:|---|---|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines), met, total


def modes_table(runs: dict) -> str:
    """Every side's median per workload (which mode is faster, and by how much)."""
    names = sorted(set(runs["ostinato"]) | set(runs["reverb"]))
    lines = [
        "| workload | Ostinato unpinned | Ostinato pinned | dm-reverb unpinned "
        "| dm-reverb pinned |",
        "|---|---:|---:|---:|---:|",
    ]
    for n in names:
        cells = []
        for impl in ("ostinato", "reverb"):
            for m in MODES:
                v = runs[impl].get(n, {}).get(m)
                cells.append(_fmt(statistics.median(v)) if v else "-")
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--benches", default="core", help="core and/or net (comma-separated)")
    ap.add_argument("--workloads", default=None, help="default: the speed workloads of each")
    ap.add_argument("--rounds", type=int, default=3, help="runs per side (medians of these)")
    ap.add_argument(
        "--modes",
        default=",".join(MODES),
        help="modes each implementation runs in: unpinned, pinned (default both)",
    )
    ap.add_argument("--pin-cpu", type=int, default=0, help="the CPU of the pinned mode")
    ap.add_argument("--sample-style", choices=["timesteps", "flat"], default="timesteps")
    ap.add_argument("--quick", action="store_true", help="small sizes (a smoke test)")
    ap.add_argument("--json", default=None, help="write every run and the tables here")
    args = ap.parse_args()
    if args.rounds < 1:
        ap.error("--rounds must be >= 1")
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not modes or any(m not in MODES for m in modes):
        ap.error(f"--modes: choose from {MODES}, got {args.modes!r}")
    servers.set_log_prefix("versus_reverb")
    sides = [(impl, m) for m in modes for impl in ("ostinato", "reverb")]
    report: dict = {"rounds": args.rounds, "modes": modes, "benches": {}}
    for name in args.benches.split(","):
        if name not in BENCHES:
            ap.error(f"--benches: unknown {name!r}; choose from {sorted(BENCHES)}")
        bench, default = BENCHES[name]
        workloads = (args.workloads or default).split(",")
        bad = [w for w in workloads if w not in bench.allowed]
        if bad:
            ap.error(f"--workloads: {bad} are not {name} workloads ({bench.allowed})")
        runs: dict[str, dict[str, dict[str, list[float]]]] = {"ostinato": {}, "reverb": {}}
        units: dict[str, str] = {}
        for r in range(args.rounds):
            k = r % len(sides)
            for impl, mode in sides[k:] + sides[:k]:  # a rotated order each round
                for wid, res in _run(bench, impl, mode, workloads, args).items():
                    if "median" in res:
                        units[wid] = res.get("unit", "")
                        runs[impl].setdefault(wid, {}).setdefault(mode, []).append(res["median"])
        md, met, total = table(bench, runs, workloads, units)
        quick = "; --quick sizes: SMOKE TEST, NOT A MEASUREMENT" if args.quick else ""
        print(
            f"\n{bench.mode}: {args.rounds} alternated rounds, modes {', '.join(modes)} "
            f"(pinned: CPU {args.pin_cpu}); {os.cpu_count()} CPUs{quick}\n"
        )
        print(md)
        print(f"\ntargets met: {met} of {total}\n")
        print(modes_table(runs))
        report["benches"][name] = {"runs": runs, "table": md, "met": met, "targets": total}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
