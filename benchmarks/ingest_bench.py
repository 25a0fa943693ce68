"""Offline RLDS ingestion: Ostinato's ``push_rlds_to_table`` vs TF-Agents' ``push_rlds_to_reverb``.

The same D4RL-like RLDS dataset on both sides -- a ``tf.data`` dataset of ``--episodes``
episodes of ``--steps`` steps (default 100 x 1,000: 100,000 steps), observation float32[17],
action float32[6], float32 reward and discount, the last step of each episode terminal, the
values from one seeded generator -- written as two-step items (``sequence_length=2``) into a
table (Uniform sampler, Fifo remover, max size 1,000,000, MinSize(1), the trajectory
signature):

* ``tfa``: TF-Agents 0.19's ``rlds_to_reverb.push_rlds_to_reverb`` through TF-Agents' own
  ``ReverbAddTrajectoryObserver(client, table, 2)`` into dm-reverb 0.14 (TensorFlow 2.15),
  then ``observer.flush()``; run with a python that has them (``--tfa-python``, default
  ``$OSTINATO_REVERB_TFA_PYTHON`` or ``/opt/reverb-venv/bin/python``).
* ``ours``: ``ostinato.rlds.push_rlds_to_table(data, client, table)`` (which flushes) with
  Ostinato on TensorFlow >= 2.18 (``--ours-python``, default this python).
* ``ours-observer`` (with ``--observer``): ``ostinato.rlds.push_rlds_to_reverb`` through an
  ``ostinato.observers.TrajectoryObserver`` -- TF-Agents' call with Ostinato's pieces.

Modes: ``embedded`` (the server in the pushing process: dm-reverb's client still goes through
gRPC on localhost, Ostinato's calls the table directly) and ``networked`` (the server in a
process of its own, started by the run; the client over gRPC). Only the push (and flush) is
timed, not building the dataset or starting processes.

``--sampler`` adds the networked question "does ingestion stall samplers?": an Ostinato
server process with a pre-filled table, a sampler process calling ``client.sample_batch(table,
256)`` in a loop, and the ingestion (ours) started after a quiet baseline; it reports items
sampled per second before and during ingestion, the longest gap between two batches in each
window, and the ingestion's own steps/s while sampled; ``--sampler-rates 0,5000`` repeats it
with the ingestion capped (``max_steps_per_second``).

Usage::

    python benchmarks/ingest_bench.py --compare --repeat 3            # the full comparison
    python benchmarks/ingest_bench.py --compare --repeat 3 --sampler --observer
    python benchmarks/ingest_bench.py --compare --episodes 10 --repeat 1   # a quick look
    python benchmarks/ingest_bench.py --side ours --mode embedded          # one run, JSON

``--compare`` runs every (mode, side) once per repetition, alternating sides, each run a
fresh process, and prints medians and the ratio ours / TF-Agents per mode. The machine should
be quiet: every process here competes for the same cores.
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

TABLE = "replay"
OBS_DIM, ACT_DIM = 17, 6
HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_TFA_PY = os.environ.get("OSTINATO_REVERB_TFA_PYTHON", "/opt/reverb-venv/bin/python")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# -- the dataset (built the same way on both sides) ------------------------------------------


def make_dataset(episodes: int, steps: int):
    """A ``tf.data.Dataset`` of RLDS episodes (dicts with a ``steps`` dataset)."""
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(0)
    first = np.zeros((episodes, steps), bool)
    first[:, 0] = True
    last = np.zeros((episodes, steps), bool)
    last[:, -1] = True
    columns = dict(
        observation=rng.standard_normal((episodes, steps, OBS_DIM), dtype=np.float32),
        action=rng.uniform(-1, 1, (episodes, steps, ACT_DIM)).astype(np.float32),
        reward=rng.standard_normal((episodes, steps), dtype=np.float32),
        discount=np.ones((episodes, steps), np.float32),
        is_first=first,
        is_last=last,
        is_terminal=last.copy(),
    )
    return tf.data.Dataset.from_tensor_slices(columns).map(
        lambda episode: {"steps": tf.data.Dataset.from_tensor_slices(episode)}
    )


def signature(side: str, data):
    if side == "tfa":
        from tf_agents.replay_buffers import rlds_to_reverb
        from tf_agents.specs import tensor_spec

        return tensor_spec.add_outer_dim(rlds_to_reverb.create_trajectory_data_spec(data))
    from ostinato import rlds

    return rlds.create_trajectory_data_signature(data)


def make_server(side: str, sig, port: int | None = None):
    if side == "tfa":
        import reverb
    else:
        import ostinato as reverb
    table = reverb.Table(
        TABLE,
        sampler=reverb.selectors.Uniform(),
        remover=reverb.selectors.Fifo(),
        max_size=1_000_000,
        rate_limiter=reverb.rate_limiters.MinSize(1),
        signature=sig,
    )
    return reverb.Server([table], port=port)


def make_client(side: str, address: str, networked: bool):
    if side == "tfa":
        import reverb

        return reverb.Client(address)
    import ostinato

    return ostinato.Client(address, in_process=not networked)


def push(side: str, data, client, rate: float | None = None) -> int:
    if side == "tfa":
        from tf_agents.replay_buffers import reverb_utils, rlds_to_reverb

        observer = reverb_utils.ReverbAddTrajectoryObserver(client, TABLE, 2)
        n = rlds_to_reverb.push_rlds_to_reverb(data, observer)
        observer.flush()
        return n
    from ostinato import rlds

    if side == "ours-observer":
        from ostinato import observers

        observer = observers.TrajectoryObserver(client, TABLE, 2)
        n = rlds.push_rlds_to_reverb(data, observer, progress=False)
        observer.flush()
        observer.close()
        return n
    return rlds.push_rlds_to_table(data, client, TABLE, progress=False, max_steps_per_second=rate)


# -- child processes -------------------------------------------------------------------------


def spawn(python: str, *args: str) -> subprocess.Popen:
    """A child running this script; it prints ``READY <port>`` when it is."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    proc = subprocess.Popen(
        [python, os.path.join(HERE, "ingest_bench.py"), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    line = proc.stdout.readline()
    if not line.startswith("READY"):
        proc.kill()
        raise RuntimeError(f"child {args} did not start: {line!r}")
    proc.port = int(line.split()[1])  # type: ignore[attr-defined]
    return proc


def serve(args) -> int:
    """``--serve SIDE``: a server with the table until stdin closes."""
    side = args.serve
    server = make_server(side, signature(side, make_dataset(1, 2)), port=None)
    print(f"READY {server.port}", flush=True)
    sys.stdin.read()
    server.stop()
    return 0


def sample_loop(args) -> int:
    """``--sample-port P``: samples batches until stdin closes; prints batch end times."""
    import ostinato

    client = ostinato.Client(f"localhost:{args.sample_port}", in_process=False)
    client.sample_batch(TABLE, args.batch_size)  # connected
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    print("READY 0", flush=True)
    times, sizes = [], []
    while not stop.is_set():
        batch = client.sample_batch(TABLE, args.batch_size, timeout=30)
        times.append(time.time())
        sizes.append(len(batch.info.key))
    print(json.dumps({"times": times, "sizes": sizes}), flush=True)
    return 0


def run_here(args) -> dict:
    """One timed push (``--side``, ``--mode``): returns steps/s."""
    data = make_dataset(args.episodes, args.steps)
    side = args.side
    networked = args.mode == "networked"
    proc = server = None
    if networked:
        proc = spawn(sys.executable, "--serve", "tfa" if side == "tfa" else "ours")
        address = f"localhost:{proc.port}"
    else:
        server = make_server(side, signature(side, data))
        address = f"localhost:{server.port}"
    client = make_client(side, address, networked)
    try:
        start = time.perf_counter()
        n = push(side, data, client)
        elapsed = time.perf_counter() - start
        size = client.server_info()[TABLE].current_size
    finally:
        if proc is not None:
            proc.stdin.close()
            proc.wait(timeout=60)
        if server is not None:
            server.stop()
    expected = args.episodes * (args.steps - 1)
    if n != args.episodes * args.steps or size != expected:
        raise RuntimeError(
            f"pushed {n} steps, table holds {size} items (expected "
            f"{args.episodes * args.steps} and {expected})"
        )
    return {
        "side": side,
        "mode": args.mode,
        "steps": n,
        "seconds": elapsed,
        "steps_per_s": n / elapsed,
    }


def run_sampler(args) -> dict:
    """Sampling throughput of a concurrent sampler before and during ingestion (ours)."""
    import numpy as np

    proc = spawn(sys.executable, "--serve", "ours")
    address = f"localhost:{proc.port}"
    sampler = None
    try:
        client = make_client("ours", address, networked=True)
        push("ours", make_dataset(5, args.steps), client)  # items to sample from
        sampler = spawn(
            sys.executable, "--sample-port", str(proc.port), "--batch-size", str(args.batch_size)
        )
        time.sleep(args.baseline)
        data = make_dataset(args.episodes, args.steps)
        start = time.time()
        n = push("ours", data, client, rate=args.max_rate or None)
        end = time.time()
        time.sleep(min(args.baseline, 2.0))
        sampler.stdin.close()
        result = json.loads(sampler.stdout.readline())
        sampler.wait(timeout=60)
        sampler = None
    finally:
        if sampler is not None:
            sampler.kill()
        proc.stdin.close()
        proc.wait(timeout=60)
    times, sizes = np.asarray(result["times"]), np.asarray(result["sizes"])

    def window(a: float, b: float) -> dict:
        inside = (times > a) & (times <= b)
        gaps = np.diff(times[(times > a - 1e-9) & (times <= b)])
        return {
            "items_per_s": float(sizes[inside].sum() / (b - a)),
            "batches": int(inside.sum()),
            "max_gap_ms": float(gaps.max() * 1000) if len(gaps) else None,
            "p99_gap_ms": float(np.percentile(gaps, 99) * 1000) if len(gaps) else None,
        }

    base = window(times[0] + 1.0, start)  # the first second: the sampler warming up
    during = window(start, end)
    return {
        "side": "ours",
        "mode": "sampler",
        "max_rate": args.max_rate,
        "steps": n,
        "ingest_steps_per_s": n / (end - start),
        "baseline": base,
        "during": during,
        "slowdown": 1 - during["items_per_s"] / base["items_per_s"],
    }


def child(python: str, args, side: str, mode: str) -> dict:
    cmd = [
        python,
        os.path.join(HERE, "ingest_bench.py"),
        "--side",
        side,
        "--mode",
        mode,
        "--episodes",
        str(args.episodes),
        "--steps",
        str(args.steps),
        "--baseline",
        str(args.baseline),
        "--batch-size",
        str(args.batch_size),
        "--max-rate",
        str(args.max_rate),
    ]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, env=env)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    if r.returncode != 0 or not lines:
        raise RuntimeError(f"{side}/{mode} failed:\n{r.stderr[-3000:]}")
    return json.loads(lines[-1])


def compare(args) -> int:
    sides = ["tfa", "ours"] + (["ours-observer"] if args.observer else [])
    results: dict[tuple[str, str], list[dict]] = {}
    sampler_runs: list[dict] = []
    for rep in range(args.repeat):
        for mode in args.modes:
            order = sides if rep % 2 == 0 else sides[::-1]
            for side in order:
                python = args.tfa_python if side == "tfa" else args.ours_python
                r = child(python, args, side, mode)
                log(
                    f"rep {rep + 1}/{args.repeat} {mode:9s} {side:13s} "
                    f"{r['steps_per_s']:10,.0f} steps/s ({r['seconds']:.2f} s)"
                )
                results.setdefault((mode, side), []).append(r)
        for rate in args.sampler_rates if args.sampler else []:
            r = child(
                args.ours_python,
                argparse.Namespace(**{**vars(args), "max_rate": rate}),
                "ours",
                "sampler",
            )
            log(
                f"rep {rep + 1}/{args.repeat} sampler (max rate {rate or 'none'}): "
                f"{r['baseline']['items_per_s']:,.0f} -> "
                f"{r['during']['items_per_s']:,.0f} items/s while ingesting "
                f"({r['ingest_steps_per_s']:,.0f} steps/s); max gap "
                f"{r['baseline']['max_gap_ms']:.0f} -> {r['during']['max_gap_ms']:.0f} ms"
            )
            sampler_runs.append(r)
    summary: dict = {
        "episodes": args.episodes,
        "steps": args.steps,
        "repeat": args.repeat,
        "median_steps_per_s": {},
        "ratio_ours_to_tfa": {},
    }
    print(
        f"\n{args.episodes} episodes x {args.steps} steps, sequence_length=2, "
        f"median of {args.repeat}:"
    )
    for mode in args.modes:
        med = {
            side: statistics.median(r["steps_per_s"] for r in results[(mode, side)])
            for side in sides
        }
        summary["median_steps_per_s"][mode] = med
        ratios = {side: med[side] / med["tfa"] for side in sides if side != "tfa"}
        summary["ratio_ours_to_tfa"][mode] = ratios
        cells = "  ".join(f"{side} {med[side]:,.0f}" for side in sides)
        print(
            f"  {mode:9s} steps/s: {cells}  ->  ours/tfa "
            + ", ".join(f"{side} {x:.1f}x" for side, x in ratios.items())
        )
    for rate in args.sampler_rates if args.sampler else []:
        runs = [r for r in sampler_runs if r["max_rate"] == rate]

        def med(f, runs=runs):
            return statistics.median(f(r) for r in runs)

        s = {
            "baseline_items_per_s": med(lambda r: r["baseline"]["items_per_s"]),
            "during_items_per_s": med(lambda r: r["during"]["items_per_s"]),
            "slowdown": med(lambda r: r["slowdown"]),
            "baseline_max_gap_ms": med(lambda r: r["baseline"]["max_gap_ms"]),
            "during_max_gap_ms": med(lambda r: r["during"]["max_gap_ms"]),
            "during_p99_gap_ms": med(lambda r: r["during"]["p99_gap_ms"]),
            "ingest_steps_per_s": med(lambda r: r["ingest_steps_per_s"]),
        }
        summary.setdefault("sampler", {})[str(rate or "none")] = s
        print(
            f"  sampler (networked, batches of {args.batch_size}, ingestion max rate "
            f"{rate or 'none'}): "
            f"{s['baseline_items_per_s']:,.0f} items/s before, "
            f"{s['during_items_per_s']:,.0f} during ingestion ({s['slowdown']:.0%} slower); "
            f"longest gap {s['baseline_max_gap_ms']:.0f} ms before, "
            f"{s['during_max_gap_ms']:.0f} ms during (p99 {s['during_p99_gap_ms']:.0f} ms); "
            f"ingestion {s['ingest_steps_per_s']:,.0f} steps/s while sampled"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "summary": summary,
                    "runs": {f"{m}/{s}": r for (m, s), r in results.items()},
                    "sampler_runs": sampler_runs,
                },
                f,
                indent=1,
            )
    return 0


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--compare", action="store_true", help="run both sides side by side")
    p.add_argument("--side", choices=["tfa", "ours", "ours-observer"], default="ours")
    p.add_argument("--mode", choices=["embedded", "networked", "sampler"], default="embedded")
    p.add_argument(
        "--modes", default="embedded,networked", type=lambda s: [m for m in s.split(",") if m]
    )
    p.add_argument("--episodes", type=int, default=100)
    p.add_argument("--steps", type=int, default=1000, help="steps per episode")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument(
        "--observer",
        action="store_true",
        help="also time push_rlds_to_reverb through Ostinato's TrajectoryObserver",
    )
    p.add_argument(
        "--sampler",
        action="store_true",
        help="also measure a concurrent sampler's slowdown while ingesting",
    )
    p.add_argument(
        "--sampler-rates",
        default="0",
        type=lambda s: [float(x) for x in s.split(",") if x],
        help="ingestion rate caps (steps/s) to measure the sampler with; 0: none",
    )
    p.add_argument("--max-rate", type=float, default=0.0, help=argparse.SUPPRESS)
    p.add_argument(
        "--baseline",
        type=float,
        default=6.0,
        help="seconds the sampler runs before ingestion starts",
    )
    p.add_argument("--batch-size", type=int, default=256, help="sampler batch size")
    p.add_argument("--tfa-python", default=DEFAULT_TFA_PY)
    p.add_argument("--ours-python", default=sys.executable)
    p.add_argument("--json", help="write the results here")
    p.add_argument("--serve", choices=["tfa", "ours"], help=argparse.SUPPRESS)
    p.add_argument("--sample-port", type=int, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    if args.serve:
        return serve(args)
    if args.sample_port:
        return sample_loop(args)
    if args.compare:
        return compare(args)
    result = run_sampler(args) if args.mode == "sampler" else run_here(args)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
