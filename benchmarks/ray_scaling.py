"""Replay shards on Ray: aggregate throughput for 1, 2, 4 shards, and the sharded client's cost
per shard for 1 to 100 shards.

Part ``ray`` (needs ``ostinato[ray]``): for each shard count, ``ostinato.ray.start_shards``
starts the shards as Ray actors; ``--writers`` writer actors (each its own process and client,
writer ``w`` on shard ``w % shards``) each write ``--items`` one-step items {obs f32[8], action
i32, reward f32} through a trajectory writer, then ``--samplers`` sampler actors each take
``--samples`` items with ``client.sample_batch(table, --batch)``. Actors connect and warm up
first, untimed, then start together at one wall-clock instant; aggregate items/s = all items /
(last end - first start). Tables are reset between repeats; the median of ``--repeat`` is
reported.

Part ``client`` (no Ray): one child process serves up to ``--max-shards`` servers (each on its
own port, two tables: ``dense`` with ``--fill`` items on every server, ``sparse`` with items on
server 0 only); this process times the sharded ``ostinato.Client`` over the first S of them for
each S in ``--shard-counts``: first call (connect to S servers), ``server_info`` (asks every
shard), ``sample_batch`` of 256 (one shard per call; with ``sparse``, the client skips the
shards that cannot answer at once: up to S round trips), and ``update_priorities`` of 256 keys
(sent only to the shard each key was sampled from when the client remembers it, otherwise to
every shard).

Output: a summary on stdout, progress on stderr, ``--json`` and ``--plot`` files.

    python benchmarks/ray_scaling.py                      # both parts, default sizes
    python benchmarks/ray_scaling.py --part ray --shards 1,2,4 --repeat 3
    python benchmarks/ray_scaling.py --part client --shard-counts 1,10,100
    python benchmarks/ray_scaling.py --quick              # a small, fast run (development)
    python benchmarks/ray_scaling.py --address auto       # join a running Ray cluster
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
TABLE = "replay"
CONFIG = {
    "tables": [
        {
            "table_name": TABLE,
            "sampler": {"uniform": True},
            "remover": {"fifo": True},
            "max_size": 10_000_000,
            "rate_limiter": {
                "samples_per_insert": 1.0,
                "min_size_to_sample": 1,
                "min_diff": -1e300,
                "max_diff": 1e300,
            },
        }
    ]
}


def log(msg: str) -> None:
    from rich.console import Console

    Console(stderr=True).log(msg)


def _git_commit() -> str | None:
    try:
        head = subprocess.run(
            ["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(HERE), "status", "--porcelain", "--", "../src"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        return head + ("+dirty src" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return None


def _machine() -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "loadavg_start": list(os.getloadavg()),
    }


# -- part 1: Ray shards ----------------------------------------------------------------------------
class Writer:
    """A writer process (a Ray actor): W1 steps, one item per step."""

    def prepare(self, group: Any, first_shard: int, n: int, seed: int) -> None:
        rng = np.random.default_rng(seed)
        self.client = group.client(first_shard=first_shard)
        self.steps = [
            {
                "obs": rng.standard_normal(8).astype(np.float32),
                "action": np.int32(i % 7),
                "reward": np.float32(i % 3),
            }
            for i in range(min(n, 4096))
        ]
        self.n = n
        self.writer = self.client.trajectory_writer(1)
        self._write(200)  # connect and warm up, untimed

    def _write(self, n: int) -> None:
        w, steps = self.writer, self.steps
        for i in range(n):
            w.append(steps[i % len(steps)])
            w.create_item(
                TABLE,
                1.0,
                {
                    "obs": w.history["obs"][-1],
                    "action": w.history["action"][-1],
                    "reward": w.history["reward"][-1],
                },
            )
        w.flush()

    def run(self, start_at: float) -> tuple[float, float, int]:
        time.sleep(max(0.0, start_at - time.time()))
        t0 = time.time()
        self._write(self.n)
        return t0, time.time(), self.n

    def close(self) -> None:
        self.writer.close()


class Sampler:
    """A sampler process (a Ray actor): ``sample_batch`` until it has its share."""

    def prepare(self, group: Any, first_shard: int) -> None:
        self.client = group.client(first_shard=first_shard)
        self.client.sample_batch(TABLE, 16, timeout=30)  # connect and warm up, untimed

    def run(self, start_at: float, n: int, batch: int) -> tuple[float, float, int]:
        time.sleep(max(0.0, start_at - time.time()))
        t0 = time.time()
        got = 0
        while got < n:
            got += len(self.client.sample_batch(TABLE, batch, timeout=30).info.key)
        return t0, time.time(), got


def _aggregate(results: list[tuple[float, float, int]]) -> float:
    start = min(r[0] for r in results)
    end = max(r[1] for r in results)
    return sum(r[2] for r in results) / (end - start)


def run_ray(args: argparse.Namespace) -> dict[str, Any]:
    import ray
    from ostinato.ray import start_shards

    src = str(HERE.parent / "src")
    path = os.pathsep.join(p for p in (src, str(HERE), os.environ.get("PYTHONPATH")) if p)
    init: dict[str, Any] = {
        "include_dashboard": False,
        "log_to_driver": False,
        "runtime_env": {"env_vars": {"PYTHONPATH": path}},
    }
    if args.address:
        init["address"] = args.address
    else:
        # Logical CPUs: every shard, writer and sampler gets a process; the machine's real
        # cores are what they share (see the report's machine line).
        init["num_cpus"] = max(args.shards) + args.writers + args.samplers + 2
    ray.init(**init)
    writer_cls = ray.remote(num_cpus=1)(Writer)
    sampler_cls = ray.remote(num_cpus=1)(Sampler)
    out: dict[str, Any] = {
        "shards": args.shards,
        "writers": args.writers,
        "samplers": args.samplers,
        "items_per_writer": args.items,
        "samples_per_sampler": args.samples,
        "batch": args.batch,
        "repeat": args.repeat,
        "insert": {},
        "sample": {},
        "runs": {},
        "ray_version": ray.__version__,
        "ray_nodes": len(ray.nodes()),
    }
    try:
        for n in args.shards:
            log(f"[ray] {n} shard(s): starting")
            group = start_shards(CONFIG, n, num_cpus=1)
            try:
                writers = [writer_cls.remote() for _ in range(args.writers)]
                samplers = [sampler_cls.remote() for _ in range(args.samplers)]
                ins, smp = [], []
                for r in range(args.repeat):
                    group.client().reset(TABLE)
                    ray.get(
                        [
                            w.prepare.remote(group, i % n, args.items, 1000 * r + i)
                            for i, w in enumerate(writers)
                        ]
                    )
                    start = time.time() + 1.0
                    res = ray.get([w.run.remote(start) for w in writers])
                    ins.append(_aggregate(res))
                    ray.get([w.close.remote() for w in writers])
                    ray.get([s.prepare.remote(group, i % n) for i, s in enumerate(samplers)])
                    start = time.time() + 1.0
                    res = ray.get([s.run.remote(start, args.samples, args.batch) for s in samplers])
                    smp.append(_aggregate(res))
                    log(
                        f"[ray] {n} shard(s), run {r + 1}/{args.repeat}: insert "
                        f"{ins[-1]:,.0f} items/s, sample {smp[-1]:,.0f} items/s"
                    )
                for a in writers + samplers:
                    ray.kill(a)
            finally:
                group.shutdown(timeout=30)
            out["insert"][str(n)] = statistics.median(ins)
            out["sample"][str(n)] = statistics.median(smp)
            out["runs"][str(n)] = {"insert": ins, "sample": smp}
    finally:
        ray.shutdown()
    return out


# -- part 2: the sharded client's cost per shard --------------------------------------------------
_SERVE = """
import sys, numpy as np, ostinato as reverb
n, fill = int(sys.argv[1]), int(sys.argv[2])
def tables():
    return [reverb.Table(name, reverb.selectors.Uniform(), reverb.selectors.Fifo(), 1_000_000,
                         reverb.rate_limiters.MinSize(1)) for name in ("dense", "sparse")]
servers = [reverb.Server(tables()) for _ in range(n)]
rng = np.random.default_rng(0)
for i, s in enumerate(servers):
    with s.localhost_client().trajectory_writer(1) as w:
        for j in range(fill):
            w.append({"obs": rng.standard_normal(8).astype(np.float32)})
            w.create_item("dense", 1.0, {"obs": w.history["obs"][-1]})
            if i == 0:
                w.create_item("sparse", 1.0, {"obs": w.history["obs"][-1]})
print(" ".join(str(s.port) for s in servers), flush=True)
sys.stdin.read()  # serve until the benchmark closes our stdin
"""


def _median_ms(fn: Any, reps: int) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


def run_client(args: argparse.Namespace) -> dict[str, Any]:
    import ostinato as reverb

    counts = args.shard_counts
    log(f"[client] starting {max(counts)} servers in a child process")
    proc = subprocess.Popen(
        [sys.executable, "-c", _SERVE, str(max(counts)), str(args.fill)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        if not line:
            raise SystemExit("the server process failed to start")
        addrs = [f"127.0.0.1:{p}" for p in line.split()]
        ops: dict[str, dict[str, float]] = {
            k: {}
            for k in (
                "connect",
                "server_info",
                "sample_dense",
                "sample_sparse",
                "update_one_shard",
                "update_spread",
                "update_unknown",
            )
        }
        reps = args.client_reps
        rng = np.random.default_rng(0)
        for s in counts:
            # Connecting: a fresh client's first call that reaches every shard.
            t0 = time.perf_counter()
            client = reverb.Client(addrs[:s], in_process=False, unavailable_timeout=10)
            client.server_info(timeout=30)
            ops["connect"][str(s)] = (time.perf_counter() - t0) * 1000
            ops["server_info"][str(s)] = _median_ms(lambda c=client: c.server_info(), reps)
            ops["sample_dense"][str(s)] = _median_ms(
                lambda c=client: c.sample_batch("dense", 256, timeout=10), reps
            )
            ops["sample_sparse"][str(s)] = _median_ms(
                lambda c=client: c.sample_batch("sparse", 256, timeout=10), reps
            )
            # Priority updates: keys of one sample call (one shard), keys from every shard
            # (the client remembers where each came from), and keys it never saw (sent to all).
            one = np.unique(client.sample_batch("dense", 256).info.key)
            spread = np.unique(
                np.concatenate(
                    [client.sample_batch("dense", max(1, 256 // s)).info.key for _ in range(s)]
                )
            )
            unknown = rng.integers(1, 2**63, 256, dtype=np.uint64)
            ops["update_one_shard"][str(s)] = _median_ms(
                lambda c=client, k=one: c.update_priorities("dense", k, np.ones(len(k))), reps
            )
            ops["update_spread"][str(s)] = _median_ms(
                lambda c=client, k=spread: c.update_priorities("dense", k, np.ones(len(k))), reps
            )
            ops["update_unknown"][str(s)] = _median_ms(
                lambda c=client, k=unknown: c.update_priorities("dense", k, np.ones(len(k))), reps
            )
            client.close()
            log(
                f"[client] {s:3d} shards: "
                + ", ".join(f"{k} {v[str(s)]:.2f} ms" for k, v in ops.items())
            )
    finally:
        proc.stdin.close()
        proc.wait(30)
    return {"shard_counts": counts, "fill": args.fill, "reps": reps, "ms": ops}


# -- report ----------------------------------------------------------------------------------------
def make_plot(result: dict[str, Any], path: str) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker
    except ImportError:
        log("matplotlib not installed: no plot (pip install matplotlib)")
        return None
    parts = [p for p in ("ray", "client") if p in result]
    fig, axes = plt.subplots(1, len(parts), figsize=(5.6 * len(parts), 4.2), squeeze=False)
    for ax, part in zip(axes[0], parts):
        r = result[part]
        if part == "ray":
            xs = r["shards"]
            for op, style in (
                ("insert", dict(color="tab:blue", marker="o")),
                ("sample", dict(color="tab:green", marker="s")),
            ):
                ys = [r[op][str(n)] for n in xs]
                ax.plot(
                    xs,
                    ys,
                    label=f"{op} ({r['writers'] if op == 'insert' else r['samplers']}"
                    f" {'writer' if op == 'insert' else 'sampler'} processes)",
                    **style,
                )
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
            ax.set_xticks(xs)
            ax.set_xticklabels([str(x) for x in xs])
            top = max(max(r["insert"].values()), max(r["sample"].values()))
            ax.set_ylim(0, top * 1.2)
            ax.yaxis.set_major_formatter(
                matplotlib.ticker.FuncFormatter(lambda v, _pos: f"{v / 1000:g}k")
            )
            ax.set_xlabel("shards (Ray actors)")
            ax.set_ylabel("items/s (all processes)")
            ax.set_title(f"Ray shards, one machine ({result['machine']['cpus']} CPUs)", fontsize=10)
        else:
            xs = r["shard_counts"]
            labels = {
                "server_info": "server_info (asks every shard)",
                "sample_dense": "sample_batch 256 (all shards have items)",
                "sample_sparse": "sample_batch 256 (only shard 0 has items)",
                "update_one_shard": "update 256 keys of one sample call",
                "update_spread": "update 256 keys from every shard",
                "update_unknown": "update 256 keys the client never sampled",
            }
            for op, label in labels.items():
                ax.plot(xs, [r["ms"][op][str(s)] for s in xs], marker=".", label=label)
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("shards")
            ax.set_ylabel("ms per call (median)")
            ax.set_title("Sharded client: cost of one call vs shards", fontsize=10)
        ax.grid(True, alpha=0.3, which="both")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    log(f"wrote plot {path}")
    return path


def summary(result: dict[str, Any]) -> str:
    lines = [f"machine: {result['machine']}", f"ostinato: {result['commit']}"]
    if "ray" in result:
        r = result["ray"]
        lines.append(
            f"Ray {r['ray_version']}, {r['ray_nodes']} node(s); {r['writers']} writers "
            f"x {r['items_per_writer']} items, {r['samplers']} samplers x "
            f"{r['samples_per_sampler']} samples (batch {r['batch']}); median of "
            f"{r['repeat']}"
        )
        lines.append("| shards | insert items/s | sample items/s |")
        lines.append("|---:|---:|---:|")
        for n in r["shards"]:
            lines.append(f"| {n} | {r['insert'][str(n)]:,.0f} | {r['sample'][str(n)]:,.0f} |")
    if "client" in result:
        c = result["client"]
        ops = list(c["ms"])
        lines.append("")
        lines.append("| shards | " + " | ".join(ops) + " |")
        lines.append("|---:|" + "---:|" * len(ops))
        for s in c["shard_counts"]:
            lines.append(
                f"| {s} | " + " | ".join(f"{c['ms'][op][str(s)]:.2f}" for op in ops) + " |"
            )
        lines.append("(ms per call, median)")
    return "\n".join(lines)


def _ints(text: str) -> list[int]:
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a comma-separated list of integers"
        ) from None
    if not out or min(out) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give positive integers")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--part", choices=["ray", "client", "both"], default="both")
    p.add_argument("--shards", type=_ints, default=[1, 2, 4], help="shard counts (Ray part)")
    p.add_argument("--writers", type=int, default=4, help="writer processes")
    p.add_argument("--items", type=int, default=10_000, help="items per writer")
    p.add_argument("--samplers", type=int, default=4, help="sampler processes")
    p.add_argument("--samples", type=int, default=25_000, help="items per sampler")
    p.add_argument("--batch", type=int, default=256, help="sample_batch size")
    p.add_argument("--repeat", type=int, default=3, help="runs per shard count (median)")
    p.add_argument("--address", default=None, help="Ray cluster to join (default: a local one)")
    p.add_argument(
        "--shard-counts",
        type=_ints,
        default=[1, 2, 4, 8, 16, 32, 64, 100],
        help="shard counts (client part)",
    )
    p.add_argument("--fill", type=int, default=1000, help="items per server (client part)")
    p.add_argument("--client-reps", type=int, default=30, help="calls timed per op and count")
    p.add_argument("--quick", action="store_true", help="small sizes, one run (development)")
    p.add_argument("--json", default=str(HERE / "results_ray_scaling.json"))
    p.add_argument("--plot", default=str(HERE / "ray_scaling.png"))
    p.add_argument("--no-plot", action="store_true")
    p.add_argument("--plot-from", default=None, help="only redraw the plot from a JSON result")
    args = p.parse_args(argv)
    if args.plot_from:
        make_plot(json.loads(Path(args.plot_from).read_text()), args.plot)
        return 0
    if args.quick:
        args.items, args.samples, args.repeat = 2000, 5000, 1
        args.shard_counts, args.client_reps, args.fill = [1, 4, 16], 5, 200
    result: dict[str, Any] = {
        "machine": _machine(),
        "commit": _git_commit(),
        "argv": sys.argv[1:] if argv is None else argv,
    }
    if args.part in ("ray", "both"):
        result["ray"] = run_ray(args)
    if args.part in ("client", "both"):
        result["client"] = run_client(args)
    result["machine"]["loadavg_end"] = list(os.getloadavg())
    print(summary(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
        log(f"wrote {args.json}")
    if not args.no_plot:
        make_plot(result, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
