#!/usr/bin/env python3
"""W8 dataset benchmark: batched, prefetching streams from a replay table, items per second.

Table (the W2 table): 100,000 items of 10 steps of ``obs`` float32[64] (one item per append,
``history["obs"][-10:]``), Uniform sampler, signature ``{"obs": TensorSpec([10, 64])}``.
Each run builds an iterator, takes one untimed warm-up batch, then times 200 batches of 256.

Adapters (``--impl ostinato``):

    numpy   ostinato.datasets.numpy(client, "w8", batch_size=256)
    tf      ostinato.TrajectoryDataset.from_table_signature(addr, "w8", IN_FLIGHT).batch(256)
    torch   DataLoader(ostinato.datasets.TorchDataset(client, "w8", 256), batch_size=None)
    jax     ostinato.datasets.JaxIterator(client, "w8", 256)  (device arrays; waits for the
            last transfer before stopping the clock)

``--impl reverb`` (dm-reverb's interpreter) runs ``tf`` with ``reverb.TrajectoryDataset``.

Modes: ``embedded`` (server in the process that samples) and ``networked`` (server in its
own process on localhost, filled over the network; ostinato clients use gRPC). Every adapter
runs in a fresh process, so that no framework's threads linger into another's run. Besides
items per second of wall time, each run reports items per CPU-second of the sampling process
(less sensitive to other load on the machine).

Examples:

    python benchmarks/dataset_bench.py                          # ostinato, all adapters
    python benchmarks/dataset_bench.py --adapters numpy --modes embedded --repeat 1
    /opt/reverb-venv/bin/python benchmarks/dataset_bench.py --impl reverb
    python benchmarks/dataset_bench.py --compare-reverb --json w8.json   # both + table

Targets (``--compare-reverb``; Reverb's figure is measured in the same session, or the issue's
reference figures with ``--reverb-reference``): numpy >= 5x Reverb embedded and >= 2x
networked; tf >= 1x Reverb in both modes; torch and jax within 20% of numpy (>= 0.8x).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
import harness  # noqa: E402  (tables)
import servers  # noqa: E402  (impl import, reverb interpreter)
import workloads as wl  # noqa: E402  (the fill: W2-style items of 10 steps of obs f32[64])

ITEMS = 100_000
SEQ = 10
OBS_DIM = 64
BATCH = 256
BATCHES = 200
IN_FLIGHT = 256  # max_in_flight_samples_per_worker for the tf.data datasets (both impls)
#: Reverb 0.14 TrajectoryDataset.from_table_signature on the reference machine (the issue).
REVERB_REFERENCE = {"embedded": 61_500.0, "networked": 25_400.0}


def log(msg: str) -> None:
    print(f"[dataset_bench] {msg}", file=sys.stderr, flush=True)


def import_impl(name: str):
    return servers.import_impl(name)[0]


def w8_table(reverb):
    if hasattr(reverb, "TensorSpec"):
        spec = reverb.TensorSpec([SEQ, OBS_DIM], np.float32)
    else:
        import tensorflow as tf

        spec = tf.TensorSpec([SEQ, OBS_DIM], tf.float32)
    return reverb.Table(
        name="w8",
        sampler=reverb.selectors.Uniform(),
        remover=reverb.selectors.Fifo(),
        max_size=1_000_000,
        rate_limiter=reverb.rate_limiters.MinSize(1),
        signature={"obs": spec},
    )


def fill(client, items: int) -> None:
    t0 = time.perf_counter()
    wl.fill_obs_sequences(client, "w8", items, seed=8, seq=SEQ)
    log(f"  filled {items:,} items in {time.perf_counter() - t0:.1f} s")


# -- servers ------------------------------------------------------------------------------------
def serve_forever(impl: str) -> None:
    """Child process: serve the W8 table until stdin closes."""
    reverb = import_impl(impl)
    server = reverb.Server(tables=[w8_table(reverb)])
    print("PORT", server.port, flush=True)
    sys.stdin.read()
    server.stop()


class Deployment:
    """A filled W8 server: in this process (embedded) or in a child process (networked)."""

    def __init__(self, reverb, impl: str, mode: str, items: int):
        self.reverb, self.mode, self.child, self.server = reverb, mode, None, None
        if mode == "embedded":
            self.server = reverb.Server(tables=[w8_table(reverb)])
            port = self.server.port
        else:
            self.child = subprocess.Popen(
                [sys.executable, __file__, "--impl", impl, "--serve"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            line = self.child.stdout.readline()
            if not line.startswith("PORT "):
                raise RuntimeError(f"server process failed to start: {line!r}")
            port = int(line.split()[1])
        self.address = f"localhost:{port}"
        fill(self.client(), items)
        time.sleep(1.0)

    @classmethod
    def attach(cls, reverb, address: str) -> Deployment:
        """A deployment served elsewhere (networked runs in a child process)."""
        dep = cls.__new__(cls)
        dep.reverb, dep.mode, dep.child, dep.server = reverb, "networked", None, None
        dep.address = address
        return dep

    def client(self):
        if self.mode == "networked" and self.reverb.__name__ == "ostinato":
            return self.reverb.Client(self.address, in_process=False)
        return self.reverb.Client(self.address)

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
        if self.child is not None:
            self.child.stdin.close()
            try:
                self.child.wait(30)
            except subprocess.TimeoutExpired:
                self.child.kill()


# -- adapters -----------------------------------------------------------------------------------
def make_iterator(reverb, adapter: str, dep: Deployment, in_flight: int):
    """Returns (iterator, finish) where finish(last_batch) waits for outstanding work."""

    def nothing(batch):
        return None

    if adapter == "tf":
        cls = getattr(reverb, "TrajectoryDataset", None)
        if cls is None:  # before ostinato exported it at the top level
            from ostinato.datasets import TrajectoryDataset as cls
        ds = cls.from_table_signature(
            dep.address, "w8", max_in_flight_samples_per_worker=in_flight
        ).batch(BATCH)
        return iter(ds), nothing
    import ostinato.datasets as datasets

    if adapter == "numpy":
        return datasets.numpy(dep.client(), "w8", batch_size=BATCH), nothing
    if adapter == "torch":
        import torch

        ds = datasets.TorchDataset(dep.client(), "w8", batch_size=BATCH)
        return iter(torch.utils.data.DataLoader(ds, batch_size=None)), nothing
    if adapter == "jax":
        it = datasets.JaxIterator(dep.client(), "w8", batch_size=BATCH)

        def finish(batch):
            batch.data["obs"].block_until_ready()

        return it, finish
    raise ValueError(f"unknown adapter {adapter!r}")


def run_once(
    reverb, adapter: str, dep: Deployment, batches: int, in_flight: int
) -> tuple[float, float]:
    """One timed run; returns (items/s of wall time, items/s of this process's CPU time)."""
    it, finish = make_iterator(reverb, adapter, dep, in_flight)
    next(it)  # warm-up: connection, first request
    c0 = time.process_time()
    t0 = time.perf_counter()
    batch = None
    for _ in range(batches):
        batch = next(it)
    finish(batch)
    dt = time.perf_counter() - t0
    cpu = time.process_time() - c0
    close = getattr(it, "close", None)
    if close is not None:
        close()
    del it
    return batches * BATCH / dt, batches * BATCH / cpu


def run_child(args) -> dict:
    """Runs one adapter in this (fresh) process, against ``--address`` or an embedded server."""
    reverb = import_impl(args.impl)
    mode = args.modes[0]
    if mode == "embedded":
        dep = Deployment(reverb, args.impl, mode, args.items)
    else:
        dep = Deployment.attach(reverb, args.address)
    values, cpu = [], []
    try:
        for r in range(args.repeat):
            rate, cpu_rate = run_once(reverb, args.child, dep, args.batches, args.in_flight)
            values.append(rate)
            cpu.append(cpu_rate)
            log(
                f"  {args.impl} {args.child:5s} {mode:9s} run {r + 1}/{args.repeat}: "
                f"{rate:,.0f} items/s ({cpu_rate:,.0f} per CPU-second of this process)"
            )
    finally:
        dep.stop()
    return {
        "unit": "items/s",
        "values": values,
        "cpu_values": cpu,
        "median": statistics.median(values),
    }


def run_impl(args) -> dict:
    """Runs every adapter, each in a fresh process (so no framework's threads linger into
    another's run), against one server per mode."""
    adapters = ["tf"] if args.impl == "reverb" else args.adapters
    results: dict = {}
    for mode in args.modes:
        dep = None
        if mode == "networked":
            log(f"{args.impl} {mode}: starting a server process")
            dep = Deployment(import_impl(args.impl), args.impl, mode, args.items)
        try:
            for adapter in adapters:
                cmd = [
                    sys.executable,
                    __file__,
                    "--impl",
                    args.impl,
                    "--child",
                    adapter,
                    "--modes",
                    mode,
                    "--repeat",
                    str(args.repeat),
                    "--batches",
                    str(args.batches),
                    "--items",
                    str(args.items),
                    "--in-flight",
                    str(args.in_flight),
                ]
                if dep is not None:
                    cmd += ["--address", dep.address]
                res = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
                for line in res.stderr.splitlines():
                    if line.startswith("[dataset_bench]"):
                        print(line, file=sys.stderr, flush=True)
                if res.returncode != 0:
                    log(f"{adapter} {mode} failed: {res.stderr[-3000:]}")
                    continue
                results[f"{adapter}/{mode}"] = json.loads(res.stdout)
        finally:
            if dep is not None:
                dep.stop()
    return results


# -- comparison ---------------------------------------------------------------------------------
def compare(ours: dict, theirs: dict, modes: list[str], reference: bool) -> list[str]:
    rows = []
    for key, r in ours.items():
        adapter, mode = key.split("/")
        value = r["median"]
        if adapter in ("numpy", "tf"):
            if reference:
                base, label = (
                    REVERB_REFERENCE[mode],
                    f"Reverb (issue) {REVERB_REFERENCE[mode]:,.0f}",
                )
            else:
                ref = theirs.get(f"tf/{mode}")
                if ref is None:
                    continue
                base, label = ref["median"], f"Reverb {ref['median']:,.0f}"
            need = {
                "numpy": {"embedded": 5.0, "networked": 2.0},
                "tf": {"embedded": 1.0, "networked": 1.0},
            }
            target = need[adapter][mode]
        else:
            ref = ours.get(f"numpy/{mode}")
            if ref is None:
                continue
            base, label, target = ref["median"], f"numpy {ref['median']:,.0f}", 0.8
        ratio = value / base
        verdict = "PASS" if ratio >= target else "FAIL"
        rows.append(
            (adapter, mode, f"{value:,.0f}", label, f"{ratio:.2f}x", f">= {target}x", verdict)
        )
    hdr = ("adapter", "mode", "ostinato items/s", "baseline", "ratio", "target", "verdict")
    return harness.markdown_table(rows, hdr, right=(2, 4)).splitlines()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--impl", choices=["ostinato", "reverb"], default="ostinato")
    p.add_argument("--adapters", default="numpy,tf,torch,jax")
    p.add_argument("--modes", default="embedded,networked")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--batches", type=int, default=BATCHES)
    p.add_argument("--items", type=int, default=ITEMS)
    p.add_argument("--in-flight", type=int, default=IN_FLIGHT)
    p.add_argument("--json", help="write results here")
    p.add_argument(
        "--compare-reverb",
        action="store_true",
        help="also run Reverb (in $OSTINATO_REVERB_PYTHON) and print a table",
    )
    p.add_argument(
        "--reverb-reference",
        action="store_true",
        help="compare with the issue's Reverb figures instead of running Reverb",
    )
    p.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--address", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.serve:
        serve_forever(args.impl)
        return
    args.adapters = [a for a in args.adapters.split(",") if a]
    args.modes = [m for m in args.modes.split(",") if m]
    if args.child:
        print(json.dumps(run_child(args)), flush=True)
        return
    out = {
        "machine": {"cpus": os.cpu_count(), "loadavg": os.getloadavg()},
        "params": {
            "items": args.items,
            "batch": BATCH,
            "batches": args.batches,
            "in_flight_tf": args.in_flight,
            "repeat": args.repeat,
        },
    }
    out[args.impl] = run_impl(args)
    theirs: dict = {}
    if args.compare_reverb and args.impl == "ostinato":
        cmd = [
            servers.reverb_python(),
            __file__,
            "--impl",
            "reverb",
            "--repeat",
            str(args.repeat),
            "--modes",
            ",".join(args.modes),
            "--batches",
            str(args.batches),
            "--items",
            str(args.items),
            "--in-flight",
            str(args.in_flight),
            "--json",
            "/dev/stdout",
        ]
        log("running Reverb: " + " ".join(cmd))
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
        for line in res.stderr.splitlines():
            if line.startswith("[dataset_bench]"):
                print(line, file=sys.stderr)
        if res.returncode != 0:
            log(f"Reverb run failed ({res.returncode}): {res.stderr[-2000:]}")
        else:
            theirs = json.loads(res.stdout[res.stdout.index("{") :])["reverb"]
            out["reverb"] = theirs
    summary = [
        f"W8 dataset, {args.items:,} items of {SEQ} x float32[{OBS_DIM}], {args.batches} "
        f"batches of {BATCH}, median of {args.repeat}; loadavg {os.getloadavg()[0]:.2f}",
        "",
    ]
    for impl in ("ostinato", "reverb"):
        for key, r in out.get(impl, {}).items():
            vals = ", ".join(f"{v:,.0f}" for v in r["values"])
            cpu = statistics.median(r.get("cpu_values") or [float("nan")])
            summary.append(
                f"{impl:8s} {key:18s} {r['median']:>10,.0f} items/s   ({vals}); "
                f"{cpu:,.0f} per CPU-second"
            )
    if args.impl == "ostinato" and (theirs or args.reverb_reference):
        summary += [""] + compare(out["ostinato"], theirs, args.modes, args.reverb_reference)
    if args.json:
        text = json.dumps(out, indent=2)
        if args.json == "/dev/stdout":
            print(text, flush=True)
            return
        Path(args.json).write_text(text)
    print("\n".join(summary))


if __name__ == "__main__":
    main()
