"""Plumbing shared by the benchmark scripts: repeats, medians, JSON, tables with targets,
the side-by-side run with dm-reverb in its own interpreter, and the common command line.

``core_bench.py`` (embedded) and ``net_bench.py`` (networked) describe themselves with a
:class:`Bench` and call :func:`main`. The workloads are in ``workloads.py``; where they run
(implementations, servers, child processes) is ``servers.py``.
"""

from __future__ import annotations

import argparse
import faulthandler
import gc
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
import servers  # noqa: E402
import workloads as wl  # noqa: E402
from servers import DEFAULT_REVERB_PYTHON, import_impl, log, pump, reverb_python  # noqa: E402

HANG_DUMP_SECONDS = 240
REVERB_CHILD_TIMEOUT = 3600
MEM_CHILD_TIMEOUT = 1800


@dataclass
class Ctx:
    """What a workload gets: the module, the mode, sizes and repeats, a way to get servers."""

    reverb: object
    impl: str
    mode: str  # "embedded" | "networked"
    sizes: wl.Sizes
    repeat: int
    sample_style: str = "timesteps"
    log: Callable[[str], None] = log

    def serve(self, specs: list[dict]) -> servers.Deployment:
        return servers.Deployment(self.reverb, self.impl, self.mode, specs)

    def settle(self) -> None:
        """Pause after a fill: Reverb's sampling right after heavy writer traffic is several
        times slower for ~1-2 s (server threads still busy). Applied to both."""
        gc.collect()
        time.sleep(self.sizes.settle_s)


# ---------------------------------------------------------------------------------------------
# Memory: each run in a fresh process
# ---------------------------------------------------------------------------------------------


def run_mem(ctx: Ctx, kind: str) -> dict:
    """MEM (W1 items, bytes/item beyond data) or MEM3 (W3 frames, resident / data bytes)."""
    n = ctx.sizes.mem_items if kind == "MEM" else ctx.sizes.mem3_items
    values, runs = [], []
    for r in range(ctx.repeat):
        cmd = [
            sys.executable,
            servers.__file__,
            "--impl",
            ctx.impl,
            "--mem-child",
            kind,
            "--mem-items",
            str(n),
            "--checkpoints",
            str(ctx.sizes.mem_checkpoints),
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=MEM_CHILD_TIMEOUT)
        if proc.returncode != 0:
            tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
            raise RuntimeError(f"{kind} child failed (rc={proc.returncode}):\n{tail}")
        res = json.loads(proc.stdout.strip().splitlines()[-1])
        runs.append(res)
        values.append(res["value"])
        what = (
            f"{res['value']:,.0f} bytes/item beyond data"
            if kind == "MEM"
            else f"{res['value']:.3f}x the frame bytes"
        )
        ctx.log(
            f"  {kind} run {r + 1}/{ctx.repeat}: {what} ({res['items']:,} items, RSS "
            f"{res['rss_before'] / 2**20:,.0f} -> {res['rss_after'] / 2**20:,.0f} MiB)"
        )
    unit = "bytes/item" if kind == "MEM" else "x data"
    return {
        "unit": unit,
        "values": values,
        "runs": runs,
        "params": {
            "items": n,
            "measured": "in a fresh process at this many items",
            "data_bytes_per_item": runs[0]["data_bytes_per_item"],
        },
    }


# ---------------------------------------------------------------------------------------------
# Running workloads
# ---------------------------------------------------------------------------------------------


def summarize(res: dict) -> dict:
    vals = res["values"]
    res.update(median=statistics.median(vals), min=min(vals), max=max(vals))
    return res


def run_impl(bench: Bench, impl: str, ids: list[str], args) -> dict:
    reverb, ver = import_impl(impl)
    log(f"impl={impl} version={ver} module={getattr(reverb, '__file__', '?')} mode={bench.mode}")
    ctx = Ctx(reverb, impl, bench.mode, args.sizes, args.repeat, args.sample_style)
    out = {
        "impl": impl,
        "version": ver,
        "mode": bench.mode,
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "machine": platform.platform(),
        "cpu_count": os.cpu_count(),
        "repeat": args.repeat,
        "quick": args.quick,
        "sizes": asdict(args.sizes),
        "sample_style": args.sample_style,
        "pin_cpu": args.pin_cpu,
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "results": {},
    }
    if impl == "ostinato":
        out["commit"] = servers.git_commit()
    for wid in ids:
        w = wl.WORKLOADS[wid]
        if impl == "reverb" and w.ostinato_only:
            log(f"{wid}: skipped (ostinato-only API)")
            continue
        log(f"{wid} ({w.title}) ...")
        t0 = time.perf_counter()
        faulthandler.dump_traceback_later(HANG_DUMP_SECONDS, repeat=False, file=sys.stderr)
        try:
            if wid in bench.runners:
                res = bench.runners[wid](ctx, args)
            elif wid in ("MEM", "MEM3"):
                res = run_mem(ctx, wid)
            else:
                res = w.run(ctx)
        except Exception as e:  # noqa: BLE001 - logged; the other workloads still run
            log(f"{wid} FAILED: {e!r}")
            traceback.print_exc(file=sys.stderr)
            out["results"][wid] = {"error": f"{type(e).__name__}: {e}"}
            continue
        finally:
            faulthandler.cancel_dump_traceback_later()
        res["wall_seconds"] = time.perf_counter() - t0
        if res.get("kind") == "scaling":
            out["scaling"] = res
            continue
        extra = res.pop("extra", {})
        out["results"][wid] = summarize(res)
        for name, e in extra.items():
            out["results"][name] = summarize(e)
        log(f"{wid}: median {res['median']:,.2f} {res['unit']} ({res['wall_seconds']:.1f} s wall)")
    return out


def run_reverb_side(bench: Bench, ids: list[str], args) -> dict:
    """Runs the same script under dm-reverb's interpreter (its Reverb-runnable workloads, plus
    the baselines of Ostinato-only ones) and returns its JSON result."""
    py = reverb_python()
    want = {w for w in ids if not wl.WORKLOADS[w].ostinato_only}
    want |= {wl.WORKLOADS[w].baseline for w in ids if wl.WORKLOADS[w].baseline}
    rev_ids = [w for w in bench.allowed if w in want]
    with tempfile.TemporaryDirectory() as td:
        jpath = os.path.join(td, "reverb.json")
        cmd = [
            py,
            bench.script,
            "--impl",
            "reverb",
            "--workloads",
            ",".join(rev_ids),
            "--repeat",
            str(args.repeat),
            "--json",
            jpath,
            "--sample-style",
            args.sample_style,
            "--mem-items",
            str(args.sizes.mem_items),
            "--mem3-items",
            str(args.sizes.mem3_items),
        ]
        cmd += (["--quick"] if args.quick else []) + bench.child_args(args)
        log(f"running reverb side: {' '.join(cmd)}")
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        killer = threading.Timer(REVERB_CHILD_TIMEOUT, proc.kill)
        killer.daemon = True
        killer.start()
        suppressed = [0]
        pump(proc.stderr, "  (reverb) ", suppressed)
        rc = proc.wait()
        killer.cancel()
        if suppressed[0]:
            log(f"(suppressed {suppressed[0]} native reverb/TF log lines)")
        if rc != 0:
            raise SystemExit(f"reverb side failed with rc={rc}")
        with open(jpath) as f:
            return json.load(f)


# ---------------------------------------------------------------------------------------------
# Tables
# ---------------------------------------------------------------------------------------------


def fmt(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:,.1f}" if abs(v) >= 10 else f"{v:,.3g}"


def text_table(rows: list[tuple], hdr: tuple, left: tuple = (0,)) -> str:
    widths = [max(len(str(x[i])) for x in rows + [hdr]) for i in range(len(hdr))]
    lines = [
        "  ".join(
            str(c).ljust(w) if i in left else str(c).rjust(w)
            for i, (c, w) in enumerate(zip(row, widths))
        )
        for row in [hdr] + rows
    ]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


def markdown_table(rows: list[tuple], hdr: tuple, right: tuple = ()) -> str:
    out = [
        "| " + " | ".join(hdr) + " |",
        "|" + "|".join("---:" if i in right else "---" for i in range(len(hdr))) + "|",
    ]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


@dataclass(frozen=True)
class Target:
    """``ratio``: Ostinato / Reverb >= value; ``max``: Ostinato's own value <= value."""

    kind: str
    value: float
    text: str = ""

    def label(self) -> str:
        return self.text or (f"≥ {self.value:g}×" if self.kind == "ratio" else f"≤ {self.value:g}")


COMPARE_HEADER = ("workload", "Ostinato", "Reverb", "ratio", "target", "met/short")


def compare_rows(bench: Bench, ost: dict, rev: dict) -> tuple[list[tuple], int, int]:
    """Rows for everything Ostinato ran, in run order; returns (rows, targets met, targets)."""
    rows, met, total = [], 0, 0
    for name, o in ost["results"].items():
        base = wl.WORKLOADS[name].baseline if name in wl.WORKLOADS else None
        r = rev["results"].get(base or name, {})
        title = wl.WORKLOADS[name].title if name in wl.WORKLOADS else wl.EXTRA_TITLES.get(name, "")
        unit = o.get("unit") or r.get("unit") or ""
        label = f"{name} {title}, {unit}" + (f" (Reverb: its {base})" if base else "")
        if name in ("MEM", "MEM3") and "params" in o:
            label += f", {o['params']['items']:,} {'items' if name == 'MEM' else 'frames'}"
        ov, rv = o.get("median"), r.get("median")
        t = bench.targets.get(name)
        ratio = "-"
        if ov is not None and rv:
            # Truncated, not rounded: a ratio short of its target never prints as the target.
            ratio = (
                f"{math.floor(rv / ov * 10) / 10:.1f}× less"
                if t is not None and t.kind == "max"
                else f"{math.floor(ov / rv * 100) / 100:.2f}×"
            )
        verdict = ""
        if t is not None:
            total += 1
            got = ov if t.kind == "max" else (ov / rv if ov is not None and rv else None)
            if got is None:
                verdict = "error" if ("error" in o or "error" in r) else "no Reverb result"
            elif (got <= t.value) if t.kind == "max" else (got >= t.value):
                verdict, met = "met", met + 1
            else:
                verdict = "**short**"
        rows.append(
            (
                label,
                "ERROR" if "error" in o else fmt(ov),
                "ERROR" if "error" in r else ("-" if not r else fmt(rv)),
                ratio,
                t.label() if t else "",
                verdict,
            )
        )
    return rows, met, total


def print_single(out: dict, markdown: bool) -> None:
    quick = ", --quick sizes: a smoke test, not a measurement" if out.get("quick") else ""
    print(
        f"\n{out['impl']} {out['version']}, {out['mode']} (python {out['python']}, median of "
        f"{out['repeat']}{quick})"
    )
    rows = []
    for name, res in out["results"].items():
        if "error" in res:
            rows.append((name, "ERROR: " + res["error"][:80], "", "", ""))
        else:
            rows.append((name, fmt(res["median"]), fmt(res["min"]), fmt(res["max"]), res["unit"]))
    hdr = ("workload", "median", "min", "max", "unit")
    print(markdown_table(rows, hdr, right=(1, 2, 3)) if markdown else text_table(rows, hdr, (0, 4)))


# ---------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------


@dataclass
class Bench:
    """What a benchmark script runs and how it judges it."""

    name: str
    script: str
    mode: str
    default: list[str]
    allowed: list[str]
    targets: dict[str, Target]
    runners: dict[str, Callable] = field(default_factory=dict)  # id -> fn(ctx, args)
    add_args: Callable[[argparse.ArgumentParser], None] = lambda p: None
    child_args: Callable[[argparse.Namespace], list[str]] = lambda a: []
    after: Callable[[dict, dict | None, argparse.Namespace], None] = lambda o, r, a: None


def parse_args(bench: Bench, description: str, argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--impl", choices=["ostinato", "reverb"], default="ostinato")
    p.add_argument(
        "--workloads",
        default=None,
        help=f"comma-separated subset of {','.join(bench.allowed)} (default: "
        f"{','.join(bench.default)})",
    )
    p.add_argument(
        "--repeat",
        type=int,
        default=None,
        help="runs per workload, median reported (default 3; 1 with --quick)",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="small sizes, for a smoke test of every workload (not a measurement)",
    )
    p.add_argument("--json", default=None, help="write results as JSON to this file")
    p.add_argument(
        "--compare-reverb",
        action="store_true",
        help="run ostinato here and dm-reverb via $OSTINATO_REVERB_PYTHON (default "
        f"{DEFAULT_REVERB_PYTHON}), then print the comparison as a markdown table",
    )
    p.add_argument(
        "--reverb-json",
        default=None,
        help="with --compare-reverb: reuse a saved `--impl reverb --json` result",
    )
    p.add_argument(
        "--markdown",
        action="store_true",
        help="single implementation: print the summary as markdown (the comparison "
        "table is always markdown)",
    )
    p.add_argument(
        "--sample-style",
        choices=["timesteps", "flat"],
        default="timesteps",
        help="items of W4b/W5/W5b/W6/SCALE: 'timesteps' = one-step trajectories "
        "(history[c][-1:]) sampled with the default client.sample(); 'flat' = W1 "
        "items (history[c][-1]) sampled with emit_timesteps=False (dm-reverb cannot "
        "split squeezed columns into timesteps). W4/W4f name their style",
    )
    p.add_argument(
        "--pin-cpu",
        type=int,
        default=None,
        metavar="CPU",
        help="pin this process and its children (servers, the reverb side, MEM runs) to one CPU",
    )
    p.add_argument(
        "--mem-items",
        type=int,
        default=None,
        help=f"W1 items stored by MEM (default {wl.FULL.mem_items:,}; "
        f"{wl.QUICK.mem_items:,} with --quick)",
    )
    p.add_argument(
        "--mem3-items",
        type=int,
        default=None,
        help=f"W3 frames stored by MEM3 (default {wl.FULL.mem3_items:,})",
    )
    bench.add_args(p)
    args = p.parse_args(argv)
    ids = (
        [w.strip() for w in args.workloads.split(",") if w.strip()]
        if args.workloads
        else list(bench.default)
    )
    bad = [w for w in ids if w not in bench.allowed]
    if bad:
        p.error(f"unknown workloads {bad}; choose from {bench.allowed}")
    args.workload_list = ids
    if args.repeat is None:
        args.repeat = 1 if args.quick else 3
    if args.repeat < 1:
        p.error("--repeat must be >= 1")
    sizes = wl.QUICK if args.quick else wl.FULL
    args.sizes = replace(
        sizes,
        mem_items=args.mem_items or sizes.mem_items,
        mem3_items=args.mem3_items or sizes.mem3_items,
    )
    return args


def main(bench: Bench, args: argparse.Namespace) -> int:
    servers.set_log_prefix(bench.name)
    if args.pin_cpu is not None:
        os.sched_setaffinity(0, {args.pin_cpu})
        log(f"pinned to CPU {args.pin_cpu} (inherited by subprocesses)")
    t_start = time.perf_counter()
    if not args.compare_reverb:
        ids = [
            w
            for w in args.workload_list
            if not (args.impl == "reverb" and wl.WORKLOADS[w].ostinato_only)
        ]
        out = run_impl(bench, args.impl, ids, args)
        print_single(out, args.markdown)
        bench.after(out, None, args)
        _write_json(args.json, out)
        log(f"total {time.perf_counter() - t_start:.0f} s")
        return 0
    ost = run_impl(bench, "ostinato", args.workload_list, args)
    if args.reverb_json:
        with open(args.reverb_json) as f:
            rev = json.load(f)
        log(f"using saved reverb results from {args.reverb_json}")
    else:
        rev = run_reverb_side(bench, args.workload_list, args)
    rows, met, total = compare_rows(bench, ost, rev)
    commit = f" @ {ost['commit']}" if ost.get("commit") else ""
    pin = f"; pinned to CPU {args.pin_cpu}" if args.pin_cpu is not None else ""
    quick = "; --quick sizes: SMOKE TEST, NOT A MEASUREMENT" if args.quick else ""
    print(
        f"\n{bench.mode}: Ostinato {ost['version']}{commit} vs dm-reverb {rev['version']} "
        f"(median of {args.repeat}; {os.cpu_count()} CPUs{pin}{quick})\n"
    )
    print(markdown_table(rows, COMPARE_HEADER, right=(1, 2, 3)))
    print(f"\ntargets met: {met} of {total}")
    bench.after(ost, rev, args)
    _write_json(
        args.json,
        {
            "mode": bench.mode,
            "ostinato": ost,
            "reverb": rev,
            "targets_met": met,
            "targets": total,
            "table": markdown_table(rows, COMPARE_HEADER, right=(1, 2, 3)),
        },
    )
    log(f"total {time.perf_counter() - t_start:.0f} s")
    return 0


def _write_json(path: str | None, obj: dict) -> None:
    if path:
        with open(path, "w") as f:
            json.dump(obj, f, indent=2)
        log(f"wrote {path}")
