"""What metrics cost the hot paths: W1 (insert) and W4 (sample) with metrics off and on, side
by side.

Each run is a fresh child process; the variants alternate within each round (their order
rotating), so that drift on a shared machine spreads over all of them. Per variant: the median
over rounds of each child's median of ``--inner`` timed runs, and the range.

Variants:
  off   ``reverb.Server(tables)``: the counters Ostinato keeps anyway (rate-limiter waits, chunk
        bytes, requests), nothing serving them.
  on    ``reverb.Server(tables, metrics_port=0)`` and a scraper GETting ``/metrics`` every
        ``--scrape-every`` seconds (default 0.5 s: 30x as often as Prometheus' default) for
        the whole run; embedded, the scraper is a thread of the benchmark process (so the scrape's
        HTTP client costs are charged too); networked, it scrapes the server process.
  base  like ``off`` with another source tree first on ``sys.path`` (``--baseline-src``, e.g.
        a checkout of the commit before the counters were added): what the counters cost.

  python benchmarks/metrics_overhead.py                       # embedded, W1 and W4, 5 rounds
  python benchmarks/metrics_overhead.py --mode networked --rounds 7
  python benchmarks/metrics_overhead.py --baseline-src /path/to/old/src --variants base,off,on
  python benchmarks/metrics_overhead.py --quick               # smoke test (not a measurement)

Workloads (``workloads.py``, see README.md): W1 = 20,000 W1 steps through one trajectory
writer, one squeezed item per step, then ``flush()``; W4 = ``client.sample(t, 256)`` on a table
of 100,000 W1t items until 20,000 samples (the table filled untimed, then one warm-up call).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"


def log(msg: str) -> None:
    print(f"[metrics_overhead] {msg}", file=sys.stderr, flush=True)


# -- the child: one run --------------------------------------------------------------------------
class _Scraper(threading.Thread):
    """GETs ``url`` every ``every`` seconds while ``active`` is set."""

    def __init__(self, url: str, every: float):
        super().__init__(daemon=True)
        self.url, self.every, self.count, self.bytes = url, every, 0, 0
        self.stop, self.active = threading.Event(), threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            if not self.active.wait(0.05):
                continue
            self.bytes += len(urllib.request.urlopen(self.url, timeout=10).read())
            self.count += 1
            self.stop.wait(self.every)


def _tables(reverb, names):
    return [
        reverb.Table(
            n,
            reverb.selectors.Uniform(),
            reverb.selectors.Fifo(),
            1_000_000,
            reverb.rate_limiters.MinSize(1),
        )
        for n in names
    ]


def serve_child(metrics: bool) -> int:
    """``--serve``: a server process for the networked mode; prints ``PORT p METRICS m``."""
    import ostinato as reverb

    names = [f"t{i}" for i in range(int(os.environ.get("OVERHEAD_TABLES", "8")))]
    server = reverb.Server(
        _tables(reverb, names), port=0, **({"metrics_port": 0} if metrics else {})
    )
    print(f"PORT {server.port} METRICS {getattr(server, 'metrics_port', None) or 0}", flush=True)
    sys.stdin.read()
    server.stop()
    os._exit(0)


class _Setup:
    """One variant's server (in this process or a child) and client, and its scraper."""

    def __init__(self, reverb, args, variant: str, names: list[str]):
        metrics = variant == "on"
        self.variant, self.proc, self.scraper = variant, None, None
        if args.mode == "embedded":
            self.server = reverb.Server(
                _tables(reverb, names), **({"metrics_port": 0} if metrics else {})
            )
            self.client = self.server.localhost_client()
            mport = getattr(self.server, "metrics_port", None)
        else:
            self.server = None
            self.proc = subprocess.Popen(
                [sys.executable, __file__, "--serve", "--variant", variant],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                env=os.environ.copy(),
            )
            words = self.proc.stdout.readline().split()
            port, mport = int(words[1]), int(words[3]) or None
            self.client = reverb.Client(f"localhost:{port}", in_process=False)
        if metrics:  # the scraper runs from the start; it pauses only while others are timed
            self.scraper = _Scraper(f"http://localhost:{mport}/metrics", args.scrape_every)
            self.scraper.active.set()
            self.scraper.start()
        self.tables = iter(names)
        self.values: list[float] = []

    def pause_scraper(self, paused: bool) -> None:
        if self.scraper is not None:
            (self.scraper.active.clear if paused else self.scraper.active.set)()

    def close(self) -> None:
        if self.scraper is not None:
            self.scraper.stop.set()
            self.scraper.join(15)
        self.client.close()
        if self.server is not None:
            self.server.stop()
        if self.proc is not None:
            self.proc.stdin.close()
            self.proc.wait(30)


def run_child(args: argparse.Namespace) -> int:
    """One process, one or more variants (``--variant off,on``): a server each; the timed
    runs alternate between them (their order rotating), a variant's scraper paused while
    another variant is timed."""
    sys.path.insert(0, str(HERE))
    import workloads as wl

    import ostinato as reverb

    sizes = wl.QUICK if args.quick else wl.FULL
    # one fresh table per timed W1 run (a server has a handful of tables, as in real use)
    names = [f"t{i}" for i in range(args.inner + 2)]
    os.environ["OVERHEAD_TABLES"] = str(len(names))
    setups = [_Setup(reverb, args, v, names) for v in args.variant.split(",")]

    class Ctx:
        @staticmethod
        def log(msg):
            pass

    try:
        if args.workload == "W1":
            steps = wl.w1_steps(sizes.w1_steps, seed=1)

            def timed(s: _Setup) -> float:
                with s.client.trajectory_writer(num_keep_alive_refs=1) as w:
                    t0 = time.perf_counter()
                    n = wl.write_w1(w, next(s.tables), steps)
                    w.flush()
                    return n / (time.perf_counter() - t0)
        else:
            for s in setups:
                s.table = next(s.tables)
                wl.fill_w1(Ctx, s.client, s.table, sizes.fill_items, seed=4, trajectory=True)
            time.sleep(sizes.settle_s)
            for s in setups:
                wl.sample_loop(s.client, s.table, wl.BATCH)

            def timed(s: _Setup) -> float:
                t0 = time.perf_counter()
                n = wl.sample_loop(s.client, s.table, sizes.sample_total)
                return n / (time.perf_counter() - t0)

        for i in range(args.inner):
            order = setups[i % len(setups) :] + setups[: i % len(setups)]
            for s in order:
                for other in setups:
                    other.pause_scraper(other is not s)
                s.values.append(timed(s))
    finally:
        for s in setups:
            s.close()
    print(
        json.dumps(
            {
                s.variant: {
                    "values": s.values,
                    "median": statistics.median(s.values),
                    "scrapes": s.scraper.count if s.scraper else 0,
                }
                for s in setups
            }
            | {"ostinato": reverb.__file__}
        )
    )
    return 0


# -- the parent: rounds of alternating children ---------------------------------------------------
def one_run(args: argparse.Namespace, variants: list[str], workload: str) -> dict:
    """A child process running ``variants`` (interleaved) -> {variant: {values, median,
    scrapes}}. ``base`` runs alone, from ``--baseline-src``."""
    env = os.environ.copy()
    base = variants == ["base"]
    src = args.baseline_src if base else str(SRC)
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    cmd = [
        sys.executable,
        __file__,
        "--child",
        "--variant",
        "off" if base else ",".join(variants),
        "--mode",
        args.mode,
        "--workload",
        workload,
        "--inner",
        str(args.inner),
        "--scrape-every",
        str(args.scrape_every),
    ] + (["--quick"] if args.quick else [])
    if args.nice:
        cmd = ["nice", "-n", str(args.nice), *cmd]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    if out.returncode != 0:
        raise RuntimeError(f"{variants} {workload} failed:\n{out.stderr[-3000:]}")
    res = json.loads(out.stdout.strip().splitlines()[-1])
    if base:
        if not res["ostinato"].startswith(args.baseline_src):
            raise RuntimeError(f"baseline run imported {res['ostinato']}, not --baseline-src")
        res["base"] = res.pop("off")
    res.pop("ostinato")
    return res


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mode", choices=["embedded", "networked"], default="embedded")
    p.add_argument("--workloads", default="W1,W4")
    p.add_argument(
        "--variants",
        default="off,on",
        help="comma-separated from off, on, base (base needs --baseline-src)",
    )
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument(
        "--inner", type=int, default=5, help="timed runs of each variant per child process"
    )
    p.add_argument("--scrape-every", type=float, default=0.5)
    p.add_argument("--baseline-src", help="source tree for the 'base' variant")
    p.add_argument("--quick", action="store_true", help="small sizes: a smoke test")
    p.add_argument("--nice", type=int, default=0, help="run children under nice -n N")
    p.add_argument("--out", help="write the results as JSON here")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--variant", default="off", help=argparse.SUPPRESS)
    p.add_argument("--workload", default="W1", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.serve:
        return serve_child(args.variant == "on")
    if args.child:
        return run_child(args)
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    if "base" in variants and not args.baseline_src:
        p.error("the base variant needs --baseline-src")
    if args.baseline_src:
        args.baseline_src = str(Path(args.baseline_src).resolve())
    workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    inner = [v for v in variants if v != "base"]  # interleaved in one process
    values: dict[str, dict[str, list[float]]] = {w: {v: [] for v in variants} for w in workloads}
    medians: dict[str, dict[str, list[float]]] = {w: {v: [] for v in variants} for w in workloads}
    pairs: dict[str, list[float]] = {w: [] for w in workloads}  # adjacent on/off runs
    scrapes = {w: 0 for w in workloads}
    for r in range(args.rounds):
        for workload in workloads:
            groups = [
                g
                for g in ([inner[r % len(inner) :] + inner[: r % len(inner)]] if inner else [])
                + ([["base"]] if "base" in variants else [])
            ]
            if r % 2:
                groups.reverse()
            for group in groups:
                res = one_run(args, group, workload)
                for v, got in res.items():
                    values[workload][v] += got["values"]
                    medians[workload][v].append(got["median"])
                    scrapes[workload] += got["scrapes"]
                    log(
                        f"round {r + 1}/{args.rounds} {workload} {v}: median {got['median']:,.0f}"
                        f" items/s of {len(got['values'])} runs"
                        + (f" ({got['scrapes']} scrapes)" if v == "on" else "")
                    )
                if "on" in res and "off" in res:
                    pairs[workload] += [
                        a / b for a, b in zip(res["on"]["values"], res["off"]["values"])
                    ]
    lines = [
        f"mode={args.mode} rounds={args.rounds} inner={args.inner} "
        f"scrape_every={args.scrape_every}s quick={args.quick} cpus={os.cpu_count()}",
        f"{'workload':8} {'variant':8} {'median items/s':>15} {'min':>10} {'max':>10} {'runs':>5}",
    ]
    summary: dict[str, dict[str, dict[str, float]]] = {}
    for workload in workloads:
        summary[workload] = {}
        for v in variants:
            vals = values[workload][v]
            summary[workload][v] = {
                "median": statistics.median(vals),
                "min": min(vals),
                "max": max(vals),
                "runs": len(vals),
            }
            lines.append(
                f"{workload:8} {v:8} {statistics.median(vals):>15,.0f} "
                f"{min(vals):>10,.0f} {max(vals):>10,.0f} {len(vals):>5}"
            )
        ps = pairs[workload]
        if ps:
            summary[workload]["on/off"] = {
                "median": statistics.median(ps),
                "min": min(ps),
                "max": max(ps),
                "pairs": len(ps),
            }
            lines.append(
                f"{workload:8} on/off, adjacent runs in one process: median "
                f"{statistics.median(ps):.3f} (range {min(ps):.3f}..{max(ps):.3f}, "
                f"{len(ps)} pairs; {scrapes[workload]} scrapes)"
            )
        if "base" in variants and "off" in variants:
            rs = [b / o for b, o in zip(medians[workload]["base"], medians[workload]["off"])]
            summary[workload]["base/off"] = {
                "median": statistics.median(rs),
                "min": min(rs),
                "max": max(rs),
                "rounds": len(rs),
            }
            lines.append(
                f"{workload:8} base/off, per-round medians: median "
                f"{statistics.median(rs):.3f} (range {min(rs):.3f}..{max(rs):.3f})"
            )
    print("\n".join(lines))
    if args.out:
        Path(args.out).write_text(
            json.dumps({"args": vars(args), "values": values, "summary": summary}, indent=2)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
