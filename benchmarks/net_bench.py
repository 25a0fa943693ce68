#!/usr/bin/env python3
"""Networked benchmark: Ostinato vs. DeepMind Reverb, the server in its own process.

Every workload starts a server *process* (``reverb.Server(tables, port=...)``, launched through
``servers.py --serve``) on localhost; the benchmark process talks to it through
``reverb.Client("localhost:PORT")`` (Ostinato: ``in_process=False``, i.e. gRPC). The workloads
are the same functions as in ``core_bench.py`` (``workloads.py``), plus:

    W3     insert_large: obs uint8[84,84,4] (random bytes), 1 item per step, 5,000 steps; MB/s
    W3F    W3 into a full table (max_size = steps / 4, filled first): every frame evicts one
    W6     2 writer threads (W1 items, flush(block_until_num_items=5) after each) + 1 sampler
           thread, SampleToInsertRatio(1.0, 100, 100), 10 s; inserts/s (W6), samples/s
    WP     Acme's adders' writes (core_bench.py's WP), by --workloads
    SCALE  W1 and W4 from 1, 2, 4, 8 client *processes* against one server; aggregate items/s;
           plotted to benchmarks/scaling.png

Examples:

    python benchmarks/net_bench.py --impl ostinato --repeat 3 --json out.json
    /opt/reverb-venv/bin/python benchmarks/net_bench.py --impl reverb --repeat 3
    python benchmarks/net_bench.py --compare-reverb          # both + comparison table + plot
    python benchmarks/net_bench.py --compare-reverb --quick  # smoke test of everything

The reverb interpreter used by --compare-reverb is $OSTINATO_REVERB_PYTHON
(default /opt/reverb-venv/bin/python).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness
import servers
import workloads as wl
from harness import Target
from servers import log

DEFAULT_PLOT = Path(__file__).resolve().parent / "scaling.png"
DEFAULT = [
    "W1",
    "W1t",
    "W1F",
    "W2",
    "W3",
    "W3F",
    "W4",
    "W4f",
    "W4x2",
    "W4fx2",
    "W4b",
    "W5",
    "W5b",
    "W6",
    "W9",
    "W9s",
    "SCALE",
]
SCALE_CLIENTS, SCALE_CLIENTS_QUICK = [1, 2, 4, 8], [1, 2]
WORKER_TIMEOUT = 300
TARGETS = {
    **{w: Target("ratio", 4.0) for w in ("W1", "W2")},  # issue 25
    "W1F": Target("ratio", 4.0),  # W1's target, in a full table
    **{w: Target("ratio", 3.0) for w in ("W1t", "W3", "W6", "W6_samples")},
    **{w: Target("ratio", 15.0) for w in ("W4", "W4f", "W4x2", "W4fx2", "W4b")},
    **{w: Target("ratio", 10.0) for w in ("W5", "W5b")},
    **{w: Target("ratio", 8.0) for w in ("W9", "W9s")},
}


# ---- SCALE: client processes ------------------------------------------------------------------


def worker_main(impl: str, port: int, sample_style: str) -> int:
    """``--scale-worker``: one client process. Protocol (stdin/stdout, one JSON per line):

    parent: {"op": "W1"|"W4", "table": ..., "n": ..., "seed": ...}  -> worker: "PREPARED"
    parent: "GO" -> worker runs, answers {"n": ..., "t0": ..., "t1": ...} (time.monotonic,
    comparable across processes); parent: EOF -> exit.
    """
    reverb, _ = servers.import_impl(impl)
    client = servers.connect(reverb, impl, port)
    kw = {} if sample_style == "timesteps" else {"emit_timesteps": False}
    print("READY", flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        n, table = int(cmd["n"]), cmd["table"]
        if cmd["op"] == "W1":
            steps = wl.w1_steps(n, seed=int(cmd["seed"]))
            w = client.trajectory_writer(num_keep_alive_refs=1)
            print("PREPARED", flush=True)
            sys.stdin.readline()  # GO
            t0 = time.monotonic()
            wl.write_w1(w, table, steps)
            w.flush()
            t1 = time.monotonic()
            w.close()
        elif cmd["op"] == "W4":
            wl.sample_loop(client, table, wl.BATCH, **kw)  # warm-up
            print("PREPARED", flush=True)
            sys.stdin.readline()  # GO
            t0 = time.monotonic()
            n = wl.sample_loop(client, table, n, **kw)
            t1 = time.monotonic()
        else:
            raise ValueError(f"unknown op {cmd['op']!r}")
        print(json.dumps({"n": n, "t0": t0, "t1": t1}), flush=True)
    servers.close_client(client)
    os._exit(0)


class WorkerProc:
    def __init__(self, impl: str, port: int, idx: int, sample_style: str):
        cmd = [
            sys.executable,
            os.path.abspath(__file__),
            "--impl",
            impl,
            "--scale-worker",
            str(port),
            "--sample-style",
            sample_style,
        ]
        self.idx = idx
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        threading.Thread(
            target=servers.pump, args=(self.proc.stderr, f"  (client {idx}) "), daemon=True
        ).start()

    def expect(self, what: str) -> str:
        return servers.readline(self.proc, WORKER_TIMEOUT, f"client process {self.idx} ({what})")

    def send(self, line: str) -> None:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()


def _scale_point(workers, op: str, table: str, total: int, seed: int) -> tuple[float, float]:
    per = total // len(workers)
    for k, wp in enumerate(workers):
        wp.send(json.dumps({"op": op, "table": table, "n": per, "seed": seed + 1000 * k}))
    for wp in workers:
        if wp.expect("prepare") != "PREPARED":
            raise RuntimeError(f"client process {wp.idx}: bad answer")
    for wp in workers:
        wp.send("GO")
    res = [json.loads(wp.expect("run")) for wp in workers]
    wall = max(r["t1"] for r in res) - min(r["t0"] for r in res)
    return sum(r["n"] for r in res) / wall, wall


def run_scale(ctx: harness.Ctx, args) -> dict:
    clients, sizes = args.scale_clients, ctx.sizes
    out: dict[str, dict[str, list[float]]] = {"W1": {}, "W4": {}}
    specs = [wl.table_spec("uniform", "scale_w1"), wl.table_spec("uniform", "scale_w4")]
    workers: list[WorkerProc] = []
    with ctx.serve(specs) as dep:
        try:
            port = dep.proc.port
            t0 = time.perf_counter()
            workers = [WorkerProc(ctx.impl, port, i, ctx.sample_style) for i in range(max(clients))]
            for wp in workers:
                if wp.expect("start") != "READY":
                    raise RuntimeError(f"client process {wp.idx}: bad start")
            log(f"  {len(workers)} client processes ready in {time.perf_counter() - t0:.1f} s")
            for op, table, total in (
                ("W1", "scale_w1", sizes.scale_w1_total),
                ("W4", "scale_w4", sizes.scale_w4_total),
            ):
                if op == "W4":
                    wl.fill_w1(
                        ctx,
                        dep.client(),
                        table,
                        sizes.fill_items,
                        seed=40,
                        trajectory=ctx.sample_style == "timesteps",
                    )
                    ctx.settle()
                for n in clients:
                    vals = []
                    for r in range(args.scale_repeat):
                        gc.collect()
                        rate, wall = _scale_point(workers[:n], op, table, total, seed=7 + 100 * r)
                        vals.append(rate)
                        log(f"  SCALE {op} x{n} clients: {rate:,.0f} items/s ({wall:.2f} s)")
                    out[op][str(n)] = vals
        finally:
            for wp in workers:
                servers.stop_child(wp.proc)
    medians = {op: {n: statistics.median(v) for n, v in d.items()} for op, d in out.items()}
    return {
        "kind": "scaling",
        "unit": "items/s",
        "clients": clients,
        "values": out,
        "median": medians,
        "params": {
            "W1_total_items": sizes.scale_w1_total,
            "W4_total_samples": sizes.scale_w4_total,
            "repeat": args.scale_repeat,
            "sample_style": ctx.sample_style,
        },
    }


# ---- output: scaling table and plot ----------------------------------------------------------


def scaling_rows(ost: dict | None, rev: dict | None) -> list[tuple]:
    so, sr = (ost or {}).get("scaling"), (rev or {}).get("scaling")
    if not so and not sr:
        return []
    rows = []
    for op in ("W1", "W4"):
        for n in (so or sr)["clients"]:
            ov = so["median"][op].get(str(n)) if so else None
            rv = sr["median"][op].get(str(n)) if sr else None
            rows.append(
                (
                    op,
                    str(n),
                    harness.fmt(ov),
                    harness.fmt(rv),
                    f"{ov / rv:.2f}×" if ov and rv else "-",
                )
            )
    return rows


def make_plot(ost: dict | None, rev: dict | None, path: str) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker
    except ImportError:
        log("matplotlib not installed: no plot (pip install matplotlib)")
        return None
    series = [(d["impl"], d["version"], d["scaling"]) for d in (ost, rev) if d and d.get("scaling")]
    if not series:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    styles = {
        "ostinato": dict(color="tab:blue", marker="o"),
        "reverb": dict(color="tab:orange", marker="s", linestyle="--"),
    }
    titles = {
        "W1": "W1 insert_small (trajectory writer, 1 item/step)",
        "W4": "W4 sample_uniform (client.sample, 256/call)",
    }
    for ax, op in zip(axes, ("W1", "W4")):
        for impl, ver, sc in series:
            xs = [int(n) for n in sc["clients"]]
            ys = [sc["median"][op][str(n)] for n in xs]
            label = f"{impl} {ver}" if impl == "ostinato" else f"dm-reverb {ver}"
            ax.plot(xs, ys, label=label, **styles.get(impl, {}))
            for x, y in zip(xs, ys):
                ax.annotate(
                    f"{y / 1000:.1f}k",
                    (x, y),
                    textcoords="offset points",
                    xytext=(0, 6),
                    ha="center",
                    fontsize=8,
                )
        ax.set_xscale("log", base=2)
        ax.set_xticks([int(n) for n in series[0][2]["clients"]])
        ax.set_xticklabels([str(n) for n in series[0][2]["clients"]])
        top = max(sc["median"][op][str(n)] for _, _, sc in series for n in sc["clients"])
        ax.set_ylim(0, top * 1.18)
        ax.yaxis.set_major_formatter(
            matplotlib.ticker.FuncFormatter(lambda v, _pos: f"{v / 1000:g}k")
        )
        ax.set_xlabel("client processes")
        ax.set_ylabel("items/s (all clients)")
        ax.set_title(titles[op], fontsize=10)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(
        f"Networked mode, server in its own process, localhost, {os.cpu_count()} CPUs", fontsize=10
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    log(f"wrote plot {path}")
    return str(path)


def after(out: dict, rev: dict | None, args) -> None:
    """Prints the scaling table (markdown) and draws the plot, when SCALE ran. ``rev`` is
    None for a single implementation's run (``out`` is then Ostinato's or Reverb's)."""
    if not out.get("scaling") and not (rev or {}).get("scaling"):
        return
    print(f"\nscaling (aggregate items/s over client processes, median of {args.scale_repeat}):\n")
    if rev is None:
        sc = out["scaling"]
        rows = [
            (op, str(n), harness.fmt(sc["median"][op][str(n)]))
            for op in ("W1", "W4")
            for n in sc["clients"]
        ]
        hdr: tuple = ("workload", "clients", f"{out['impl']} items/s")
    else:
        rows = scaling_rows(out, rev)
        hdr = ("workload", "clients", "Ostinato items/s", "Reverb items/s", "ratio")
    print(harness.markdown_table(rows, hdr, right=tuple(range(1, len(hdr)))))
    if args.plot and not args.no_plot:
        pair = (out, rev) if rev is not None or out["impl"] == "ostinato" else (None, out)
        plot = make_plot(*pair, args.plot)
        if plot:
            print(f"\nplot: {plot}")


# ---- command line --------------------------------------------------------------------------------


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--scale-clients",
        default=None,
        help="client process counts for SCALE (default 1,2,4,8; 1,2 with --quick)",
    )
    p.add_argument(
        "--scale-repeat",
        type=int,
        default=None,
        help="runs per SCALE point, median reported (default 3; 1 with --quick)",
    )
    p.add_argument(
        "--plot",
        default=None,
        help=f"where SCALE's PNG goes (default {DEFAULT_PLOT}; none with --quick)",
    )
    p.add_argument("--no-plot", action="store_true", help="do not write the SCALE plot")
    p.add_argument(
        "--plot-from",
        default=None,
        metavar="JSON",
        help="only redraw the plot (--plot) from a saved --json result, then exit",
    )
    p.add_argument("--scale-worker", type=int, default=None, help=argparse.SUPPRESS)


def child_args(args) -> list[str]:
    return [
        "--scale-clients",
        ",".join(map(str, args.scale_clients)),
        "--scale-repeat",
        str(args.scale_repeat),
        "--no-plot",
    ]


BENCH = harness.Bench(
    name="net_bench",
    script=os.path.abspath(__file__),
    mode="networked",
    default=DEFAULT,
    allowed=DEFAULT + ["WP"],
    targets=TARGETS,
    runners={"SCALE": run_scale},
    add_args=add_args,
    child_args=child_args,
    after=after,
)


def main(argv=None) -> int:
    args = harness.parse_args(BENCH, __doc__.split("\n\n")[0], argv)
    servers.set_log_prefix(BENCH.name)
    if args.scale_worker is not None:
        return worker_main(args.impl, args.scale_worker, args.sample_style)
    try:
        clients = args.scale_clients or ",".join(
            map(str, SCALE_CLIENTS_QUICK if args.quick else SCALE_CLIENTS)
        )
        args.scale_clients = sorted({int(x) for x in clients.split(",") if x.strip()})
    except ValueError:
        raise SystemExit("--scale-clients must be comma-separated integers") from None
    if not args.scale_clients or min(args.scale_clients) < 1:
        raise SystemExit("--scale-clients must be positive integers")
    if args.scale_repeat is None:
        args.scale_repeat = 1 if args.quick else 3
    if args.scale_repeat < 1:
        raise SystemExit("--scale-repeat must be >= 1")
    if args.plot is None and not args.quick:
        args.plot = str(DEFAULT_PLOT)
    if args.plot_from:
        with open(args.plot_from) as f:
            saved = json.load(f)
        if "ostinato" in saved or "reverb" in saved:
            ost, rev = saved.get("ostinato"), saved.get("reverb")
        else:
            ost, rev = (saved, None) if saved.get("impl") == "ostinato" else (None, saved)
        if not make_plot(ost, rev, args.plot or str(DEFAULT_PLOT)):
            raise SystemExit(f"no scaling results in {args.plot_from}")
        return 0
    return harness.main(BENCH, args)


if __name__ == "__main__":
    sys.exit(main())
