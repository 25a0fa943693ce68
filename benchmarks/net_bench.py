#!/usr/bin/env python3
"""Networked throughput benchmark: ostinato vs. DeepMind Reverb, server in its own process.

Every workload starts a fresh server *process* (``reverb.Server(tables, port=...)``) on
localhost; the benchmark process talks to it through ``reverb.Client("localhost:PORT")``
(ostinato: ``in_process=False``, i.e. gRPC). The same user code runs against either
implementation:

    --impl ostinato   ->  ``import ostinato as reverb``
    --impl reverb     ->  ``import reverb``   (needs dm-reverb, see benchmarks/README.md)

Workloads:

    W1   insert_small        W1 steps (obs f32[8], action i32, reward f32), 1 item per step
    W2   insert_sequences    obs f32[64], one item of the last 10 steps per step
    W3   insert_large        obs uint8[84,84,4] (random bytes), 1 item per step, 5,000 steps; MB/s
    W4   sample_uniform      client.sample(table, num_samples=256) on 100k items, until 20k samples
    W4b  sample_uniform_batch  client.sample_batch(table, 256)                  (ostinato only)
    W5   sample_prioritized  sample 256 + mutate_priorities, Prioritized(0.6), 100k items
    W5b  prio_batch          sample_batch + update_priorities                   (ostinato only)
    W6   concurrent          2 writer threads (W1 steps, flush(block_until_num_items=5) after each
                             item) + 1 sampler thread, SampleToInsertRatio(1.0, 100, 100), 10 s;
                             inserts/s (W6) and samples/s (W6_samples)
    SCALE                    W1 and W4 from 1, 2, 4, 8 client *processes* against one server;
                             aggregate items/s; plotted to benchmarks/scaling.png

Examples:

    python benchmarks/net_bench.py --impl ostinato --repeat 3 --json out.json
    /opt/reverb-venv/bin/python benchmarks/net_bench.py --impl reverb --repeat 3
    python benchmarks/net_bench.py --compare-reverb          # both + comparison table + plot

The reverb interpreter used by --compare-reverb is $OSTINATO_REVERB_PYTHON
(default /opt/reverb-venv/bin/python).
"""

from __future__ import annotations

import argparse
import faulthandler
import gc
import json
import os
import platform
import queue
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
import core_bench as cb  # noqa: E402  (shared helpers: impl import, tables, W1 steps, fills)

DEFAULT_REVERB_PYTHON = cb.DEFAULT_REVERB_PYTHON
DEFAULT_PLOT = HERE / "scaling.png"

ALL_WORKLOADS = ["W1", "W2", "W3", "W4", "W4b", "W5", "W5b", "W6", "SCALE"]
OSTINATO_ONLY = {"W4b", "W5b"}

# Workload sizes.
W1_STEPS = 20_000
W2_STEPS = 20_000
W2_SEQ = 10
W3_STEPS = 5_000
W3_SHAPE = (84, 84, 4)
FILL_ITEMS = 100_000
SAMPLE_TOTAL = 20_000
SAMPLE_BATCH = 256
W6_SECONDS = 10.0
W6_WRITERS = 2
W6_MAX_PENDING = 5  # each writer: flush(block_until_num_items=5) after every item
W6_FLUSH_TIMEOUT_MS = 500  # so a writer notices the end of the run while the limiter blocks it
W6_SAMPLE_BATCH = 256
W6_STEP_POOL = 20_000  # pre-generated steps per writer, reused cyclically
SCALE_CLIENTS = [1, 2, 4, 8]
SCALE_W1_TOTAL = 40_000  # items over all client processes, split evenly
SCALE_W4_TOTAL = 20_000  # samples over all client processes, split evenly
SERVER_START_TIMEOUT = 180
WORKER_TIMEOUT = 300
HANG_DUMP_SECONDS = 240
REVERB_CHILD_TIMEOUT = 900

# Targets for --compare-reverb: ostinato / reverb >= value.
TARGETS = {
    "W1": 3.0,
    "W2": 3.0,
    "W3": 1.5,
    "W4": 10.0,
    "W4b": 10.0,
    "W5": 5.0,
    "W5b": 5.0,
    "W6": 3.0,
    "W6_samples": 3.0,
}
# Which reverb result an ostinato-only workload is compared against.
REVERB_BASELINE = {"W4b": "W4", "W5b": "W5"}
# Reverb 0.14 with its server in a separate process, as quoted in the issue (this machine).
ISSUE_REVERB = {
    "W1": 18_400,
    "W2": 17_800,
    "W3": 349,
    "W4": 5_000,
    "W5": 19.8,
    "W6": 3_300,
    "W6_samples": 3_300,
}

TITLES = {
    "W1": "insert_small",
    "W2": "insert_sequences",
    "W2_MBps": "insert_sequences MB/s",
    "W3": "insert_large",
    "W4": "sample_uniform",
    "W4b": "sample_uniform (batch)",
    "W5": "sample_prioritized",
    "W5b": "sample_prioritized (batch)",
    "W6": "concurrent inserts",
    "W6_samples": "concurrent samples",
}
TABLE_ORDER = ["W1", "W2", "W2_MBps", "W3", "W4", "W4b", "W5", "W5b", "W6", "W6_samples"]


def log(msg: str) -> None:
    print(f"[net_bench] {msg}", file=sys.stderr, flush=True)


cb.log = log  # core_bench helpers (fill_w1) log with our prefix


def is_native_noise(line: str) -> bool:
    """Reverb/TF native logging (very chatty, e.g. 'pending items is alarmingly high')."""
    return (
        line.startswith("[reverb/cc/")
        or "tensorflow/core" in line
        or line.startswith("To enable the following instructions")
        or "external/local_xla" in line
        or "cuda_" in line
    )


def _pump(stream, prefix: str) -> None:
    """Forwards a child's stderr to ours, dropping native Reverb/TF log lines."""
    for line in stream:
        if not is_native_noise(line):
            sys.stderr.write(prefix + line)
            sys.stderr.flush()


def _readline(proc: subprocess.Popen, timeout: float, what: str) -> str:
    """Next stdout line of a child, or RuntimeError after `timeout` s / on EOF."""
    q: queue.Queue = queue.Queue()

    def rd():
        try:
            q.put(proc.stdout.readline())
        except Exception as e:  # pragma: no cover
            q.put(e)

    threading.Thread(target=rd, daemon=True).start()
    try:
        line = q.get(timeout=timeout)
    except queue.Empty:
        raise RuntimeError(f"{what}: no answer within {timeout:.0f} s") from None
    if isinstance(line, Exception) or not line:
        raise RuntimeError(f"{what}: child exited (rc={proc.poll()})")
    return line.strip()


# --------------------------------------------------------------------------------------
# Server process
# --------------------------------------------------------------------------------------


def build_table(reverb, spec: dict):
    kind, name = spec["kind"], spec["name"]
    if kind == "uniform":
        return cb.uniform_table(reverb, name)
    if kind == "prioritized":
        return cb.prioritized_table(reverb, name)
    if kind == "ratio":
        return reverb.Table(
            name=name,
            sampler=reverb.selectors.Uniform(),
            remover=reverb.selectors.Fifo(),
            max_size=cb.TABLE_MAX_SIZE,
            rate_limiter=reverb.rate_limiters.SampleToInsertRatio(
                samples_per_insert=1.0, min_size_to_sample=100, error_buffer=100
            ),
        )
    raise ValueError(f"unknown table kind {kind!r}")


def serve_main(impl: str, spec_json: str) -> int:
    """`--serve`: runs a server until stdin is closed (EOF), printing `PORT n` first."""
    reverb, _ = cb.import_impl(impl)
    tables = [build_table(reverb, s) for s in json.loads(spec_json)]
    # ostinato: port 0 = pick a free port (host defaults to localhost); reverb: None = portpicker.
    server = reverb.Server(tables=tables, port=0 if impl == "ostinato" else None)
    print(f"PORT {server.port}", flush=True)
    try:
        sys.stdin.read()  # parent closes stdin (or dies) -> stop
    except KeyboardInterrupt:
        pass
    try:
        server.stop()
    finally:
        os._exit(0)  # skip slow interpreter/TF teardown


class ServerProc:
    """A server in a child process (same interpreter as this one)."""

    def __init__(self, impl: str, tables: list[dict], label: str):
        cmd = [sys.executable, os.path.abspath(__file__), "--impl", impl, "--serve",
               json.dumps(tables)]
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, bufsize=1,
        )
        threading.Thread(target=_pump, args=(self.proc.stderr, "  (server) "), daemon=True).start()
        try:
            line = _readline(self.proc, SERVER_START_TIMEOUT, f"{label} server start")
            if not line.startswith("PORT "):
                raise RuntimeError(f"{label} server: unexpected output {line!r}")
        except BaseException:
            self.proc.kill()
            raise
        self.port = int(line.split()[1])
        self.pid = self.proc.pid
        log(f"  {label}: server pid {self.pid} on localhost:{self.port} "
            f"(started in {time.perf_counter() - t0:.1f} s)")

    def stop(self) -> None:
        try:
            self.proc.stdin.close()
        except Exception:
            pass
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            log("  server did not stop within 20 s; killing it")
            self.proc.kill()
            self.proc.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def connect(reverb, impl: str, port: int):
    """A network client for the server at localhost:port (connection made, untimed)."""
    if impl == "ostinato":
        client = reverb.Client(f"localhost:{port}", in_process=False)
    else:
        client = reverb.Client(f"localhost:{port}")
    client.server_info()
    return client


def close_client(client) -> None:
    close = getattr(client, "close", None)
    if close is not None:
        try:
            close()
        except Exception:
            pass


def close_writer(w) -> None:
    try:
        w.close()
    except Exception as e:  # pragma: no cover
        log(f"  writer.close() failed: {e!r}")


def item_columns(w, trajectory_items: bool) -> dict:
    """The W1 item of the last step: squeezed (flat) or as a one-step trajectory."""
    h = w.history
    if trajectory_items:
        return {"obs": h["obs"][-1:], "action": h["action"][-1:], "reward": h["reward"][-1:]}
    return {"obs": h["obs"][-1], "action": h["action"][-1], "reward": h["reward"][-1]}


# --------------------------------------------------------------------------------------
# Workloads. Each returns {"unit": str, "values": [...], "params": {...}, ...}
# --------------------------------------------------------------------------------------


def _insert_runs(reverb, impl, args, wl, steps, keep, make_item, unit_fn, tables_kind="uniform"):
    """Shared driver of W1/W2/W3: one server, one table per repeat, timed append+item+flush."""
    names = [f"{wl.lower()}_{r}" for r in range(args.repeat)]
    results = []
    with ServerProc(impl, [{"kind": tables_kind, "name": n} for n in names], wl) as srv:
        client = connect(reverb, impl, srv.port)
        try:
            for r, table in enumerate(names):
                gc.collect()
                w = client.trajectory_writer(num_keep_alive_refs=keep)
                n_items = 0
                t0 = time.perf_counter()
                for i, step in enumerate(steps):
                    w.append(step)
                    cols = make_item(w, i)
                    if cols is not None:
                        w.create_item(table, 1.0, cols)
                        n_items += 1
                w.flush()
                dt = time.perf_counter() - t0
                close_writer(w)
                results.append((n_items, dt))
                log(f"  {wl} run {r + 1}/{args.repeat}: {unit_fn(n_items, dt)} ({dt:.2f} s)")
        finally:
            close_client(client)
    return results


def run_w1(reverb, impl, args):
    steps = cb.w1_steps(W1_STEPS, seed=1)

    def make_item(w, i):
        return item_columns(w, trajectory_items=False)

    res = _insert_runs(reverb, impl, args, "W1", steps, 1, make_item,
                       lambda n, dt: f"{n / dt:,.0f} items/s")
    return {"unit": "items/s", "values": [n / dt for n, dt in res],
            "params": {"steps": W1_STEPS, "num_keep_alive_refs": 1}}


def run_w2(reverb, impl, args):
    rng = np.random.default_rng(2)
    obs_all = rng.standard_normal((W2_STEPS, 64), dtype=np.float32)
    steps = [{"obs": obs_all[i].copy()} for i in range(W2_STEPS)]
    step_bytes = sum(s["obs"].nbytes for s in steps)

    def make_item(w, i):
        return {"obs": w.history["obs"][-W2_SEQ:]} if i + 1 >= W2_SEQ else None

    res = _insert_runs(reverb, impl, args, "W2", steps, W2_SEQ, make_item,
                       lambda n, dt: f"{n / dt:,.0f} items/s, {step_bytes / dt / 1e6:.2f} MB/s")
    return {
        "unit": "items/s",
        "values": [n / dt for n, dt in res],
        "params": {"steps": W2_STEPS, "seq_len": W2_SEQ, "step_bytes_total": step_bytes},
        "extra": {"W2_MBps": {"unit": "MB/s", "values": [step_bytes / dt / 1e6 for _, dt in res]}},
    }


def run_w3(reverb, impl, args):
    rng = np.random.default_rng(3)
    obs_all = rng.integers(0, 256, size=(W3_STEPS, *W3_SHAPE), dtype=np.uint8)
    steps = [{"obs": obs_all[i].copy()} for i in range(W3_STEPS)]
    del obs_all
    step_bytes = sum(s["obs"].nbytes for s in steps)

    def make_item(w, i):
        return {"obs": w.history["obs"][-1]}

    res = _insert_runs(reverb, impl, args, "W3", steps, 1, make_item,
                       lambda n, dt: f"{step_bytes / dt / 1e6:,.1f} MB/s, {n / dt:,.0f} items/s")
    return {
        "unit": "MB/s",
        "values": [step_bytes / dt / 1e6 for _, dt in res],
        "params": {"steps": W3_STEPS, "obs": "uint8[84,84,4]", "step_bytes_total": step_bytes},
        "extra": {"W3_items": {"unit": "items/s", "values": [n / dt for n, dt in res]}},
    }


def _filled_server(reverb, impl, args, wl, kind, seed):
    srv = ServerProc(impl, [{"kind": kind, "name": wl.lower()}], wl)
    try:
        client = connect(reverb, impl, srv.port)
        cb.fill_w1(client, wl.lower(), FILL_ITEMS, seed=seed,
                   trajectory_items=args.sample_style == "timesteps")
        cb.settle()
    except BaseException:
        srv.stop()
        raise
    return srv, client


def run_w4(reverb, impl, args):
    srv, client = _filled_server(reverb, impl, args, "W4", "uniform", seed=4)
    kw = cb.sample_kwargs(args.sample_style)
    try:
        for _ in client.sample("w4", num_samples=SAMPLE_BATCH, **kw):  # warm-up, untimed
            pass
        values = []
        for r in range(args.repeat):
            n = 0
            t0 = time.perf_counter()
            while n < SAMPLE_TOTAL:
                for _s in client.sample("w4", num_samples=SAMPLE_BATCH, **kw):
                    pass
                n += SAMPLE_BATCH
            dt = time.perf_counter() - t0
            values.append(n / dt)
            log(f"  W4 run {r + 1}/{args.repeat}: {n / dt:,.0f} items/s ({dt:.2f} s)")
    finally:
        close_client(client)
        srv.stop()
    return {"unit": "items/s", "values": values,
            "params": {"items": FILL_ITEMS, "samples": SAMPLE_TOTAL, "num_samples": SAMPLE_BATCH,
                       "sample_style": args.sample_style}}


def run_w4b(reverb, impl, args):
    srv, client = _filled_server(reverb, impl, args, "W4b", "uniform", seed=4)
    try:
        client.sample_batch("w4b", batch_size=SAMPLE_BATCH)  # warm-up, untimed
        values = []
        for r in range(args.repeat):
            n = 0
            t0 = time.perf_counter()
            while n < SAMPLE_TOTAL:
                b = client.sample_batch("w4b", batch_size=SAMPLE_BATCH)
                n += len(b.info.key)
            dt = time.perf_counter() - t0
            values.append(n / dt)
            log(f"  W4b run {r + 1}/{args.repeat}: {n / dt:,.0f} items/s ({dt:.2f} s)")
    finally:
        close_client(client)
        srv.stop()
    return {"unit": "items/s", "values": values,
            "params": {"items": FILL_ITEMS, "samples": SAMPLE_TOTAL, "batch_size": SAMPLE_BATCH}}


def _prio_runs(wl, args, step):
    step()  # warm-up, untimed
    values = []
    for r in range(args.repeat):
        batches, el = cb._timed_batches(step)
        values.append(batches / el)
        log(f"  {wl} run {r + 1}/{args.repeat}: {batches / el:,.1f} batches/s "
            f"({batches} batches, {el:.2f} s)")
    return values


def run_w5(reverb, impl, args):
    srv, client = _filled_server(reverb, impl, args, "W5", "prioritized", seed=5)
    rng = np.random.default_rng(5)
    kw = cb.sample_kwargs(args.sample_style)

    def step():
        keys = [cb.sample_key(s) for s in client.sample("w5", num_samples=SAMPLE_BATCH, **kw)]
        prios = rng.uniform(0.01, 10.0, size=len(keys))
        client.mutate_priorities(
            "w5", updates={k: float(p) for k, p in zip(keys, prios, strict=True)})

    try:
        values = _prio_runs("W5", args, step)
    finally:
        close_client(client)
        srv.stop()
    return {"unit": "batches/s", "values": values,
            "params": {"items": FILL_ITEMS, "batch": SAMPLE_BATCH, "priority_exponent": 0.6,
                       "sample_style": args.sample_style}}


def run_w5b(reverb, impl, args):
    srv, client = _filled_server(reverb, impl, args, "W5b", "prioritized", seed=5)
    rng = np.random.default_rng(5)

    def step():
        b = client.sample_batch("w5b", batch_size=SAMPLE_BATCH)
        keys = b.info.key
        client.update_priorities("w5b", keys, rng.uniform(0.01, 10.0, size=len(keys)))

    try:
        values = _prio_runs("W5b", args, step)
    finally:
        close_client(client)
        srv.stop()
    return {"unit": "batches/s", "values": values,
            "params": {"items": FILL_ITEMS, "batch": SAMPLE_BATCH, "priority_exponent": 0.6}}


# ---- W6 --------------------------------------------------------------------------------


def _w6_once(reverb, impl, port, table, args, seed):
    """2 writers + 1 sampler on a SampleToInsertRatio(1, 100, 100) table for W6_SECONDS.

    Counters are read at the end of the window; afterwards the sampler finishes its current
    `client.sample` call (the writers keep feeding it), then the writers stop and close
    without a final flush (their <= 5 pending items may be held by the rate limiter).
    """
    traj = args.sample_style == "timesteps"
    kw = cb.sample_kwargs(args.sample_style)
    deadline_exc = reverb.errors.DeadlineExceededError
    clients = [connect(reverb, impl, port) for _ in range(W6_WRITERS + 1)]
    steps = [cb.w1_steps(W6_STEP_POOL, seed=seed + k) for k in range(W6_WRITERS)]
    inserts = [0] * W6_WRITERS
    samples = [0]
    stop = threading.Event()
    sampler_done = threading.Event()
    failures: list[str] = []
    ready = threading.Barrier(W6_WRITERS + 2)

    def writer(k):
        try:
            w = clients[k].trajectory_writer(num_keep_alive_refs=1)
            pool = steps[k]
            n = len(pool)
            ready.wait()
            i = 0
            while not sampler_done.is_set():
                w.append(pool[i % n])
                i += 1
                w.create_item(table, 1.0, item_columns(w, traj))
                inserts[k] += 1
                while True:
                    try:
                        w.flush(block_until_num_items=W6_MAX_PENDING,
                                timeout_ms=W6_FLUSH_TIMEOUT_MS)
                        break
                    except deadline_exc:
                        if sampler_done.is_set():
                            break
            close_writer(w)
        except BaseException as e:  # noqa: BLE001
            failures.append(f"writer {k}: {e!r}")
            traceback.print_exc(file=sys.stderr)
            ready.abort()

    def sampler():
        try:
            c = clients[-1]
            ready.wait()
            while not stop.is_set():
                for _s in c.sample(table, num_samples=W6_SAMPLE_BATCH, **kw):
                    samples[0] += 1
        except BaseException as e:  # noqa: BLE001
            failures.append(f"sampler: {e!r}")
            traceback.print_exc(file=sys.stderr)
            ready.abort()
        finally:
            sampler_done.set()

    threads = [threading.Thread(target=writer, args=(k,), daemon=True) for k in range(W6_WRITERS)]
    threads.append(threading.Thread(target=sampler, daemon=True))
    for t in threads:
        t.start()
    try:
        ready.wait()
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < W6_SECONDS and not failures:
            time.sleep(0.05)
        ins, smp = sum(inserts), samples[0]
        dt = time.perf_counter() - t0
    finally:
        stop.set()
    for t in threads:
        t.join(timeout=60)
    if any(t.is_alive() for t in threads):
        failures.append("W6 threads did not finish within 60 s after the run")
    for c in clients:
        close_client(c)
    if failures:
        raise RuntimeError("; ".join(failures))
    return ins / dt, smp / dt, dt


def run_w6(reverb, impl, args):
    names = [f"w6_{r}" for r in range(args.repeat)]
    ins_rates, smp_rates = [], []
    with ServerProc(impl, [{"kind": "ratio", "name": n} for n in names], "W6") as srv:
        for r, table in enumerate(names):
            gc.collect()
            ir, sr, dt = _w6_once(reverb, impl, srv.port, table, args, seed=60 + 10 * r)
            ins_rates.append(ir)
            smp_rates.append(sr)
            log(f"  W6 run {r + 1}/{args.repeat}: {ir:,.0f} inserts/s, {sr:,.0f} samples/s "
                f"({dt:.1f} s)")
    return {
        "unit": "inserts/s",
        "values": ins_rates,
        "params": {"writers": W6_WRITERS, "samplers": 1, "seconds": W6_SECONDS,
                   "flush_block_until_num_items": W6_MAX_PENDING,
                   "sample_num_samples": W6_SAMPLE_BATCH,
                   "rate_limiter": "SampleToInsertRatio(1.0, 100, 100)",
                   "sample_style": args.sample_style},
        "extra": {"W6_samples": {"unit": "samples/s", "values": smp_rates}},
    }


# ---- SCALE: client processes --------------------------------------------------------------


def worker_main(impl: str, port: int, sample_style: str) -> int:
    """`--scale-worker`: one client process. Protocol (stdin/stdout, one JSON per line):

    parent: {"op": "W1"|"W4", "table": ..., "n": ..., "seed": ...}  -> worker: "PREPARED"
    parent: "GO"  -> worker runs, answers {"n": ..., "t0": ..., "t1": ...} (time.monotonic,
    comparable across processes);  parent: EOF -> exit.
    """
    reverb, _ = cb.import_impl(impl)
    client = connect(reverb, impl, port)
    kw = cb.sample_kwargs(sample_style)
    print("READY", flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        n, table = int(cmd["n"]), cmd["table"]
        if cmd["op"] == "W1":
            steps = cb.w1_steps(n, seed=int(cmd["seed"]))
            w = client.trajectory_writer(num_keep_alive_refs=1)
            print("PREPARED", flush=True)
            sys.stdin.readline()  # GO
            t0 = time.monotonic()
            for step in steps:
                w.append(step)
                w.create_item(table, 1.0, item_columns(w, trajectory_items=False))  # W1 item
            w.flush()
            t1 = time.monotonic()
            close_writer(w)
        elif cmd["op"] == "W4":
            for _ in client.sample(table, num_samples=SAMPLE_BATCH, **kw):  # warm-up
                pass
            print("PREPARED", flush=True)
            sys.stdin.readline()  # GO
            t0 = time.monotonic()
            done = 0
            while done < n:
                k = min(SAMPLE_BATCH, n - done)
                for _s in client.sample(table, num_samples=k, **kw):
                    pass
                done += k
            t1 = time.monotonic()
        else:
            raise ValueError(f"unknown op {cmd['op']!r}")
        print(json.dumps({"n": n, "t0": t0, "t1": t1}), flush=True)
    close_client(client)
    os._exit(0)


class WorkerProc:
    def __init__(self, impl: str, port: int, idx: int, sample_style: str):
        cmd = [sys.executable, os.path.abspath(__file__), "--impl", impl, "--scale-worker",
               str(port), "--sample-style", sample_style]
        self.idx = idx
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, bufsize=1,
        )
        threading.Thread(target=_pump, args=(self.proc.stderr, f"  (client {idx}) "),
                         daemon=True).start()

    def expect(self, what: str) -> str:
        return _readline(self.proc, WORKER_TIMEOUT, f"client process {self.idx} ({what})")

    def send(self, line: str) -> None:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def stop(self) -> None:
        try:
            self.proc.stdin.close()
        except Exception:
            pass
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


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


def run_scale(reverb, impl, args):
    clients = args.scale_clients
    srv = ServerProc(impl, [{"kind": "uniform", "name": "scale_w1"},
                            {"kind": "uniform", "name": "scale_w4"}], "SCALE")
    workers: list[WorkerProc] = []
    out: dict[str, dict[str, list[float]]] = {"W1": {}, "W4": {}}
    try:
        client = connect(reverb, impl, srv.port)
        t0 = time.perf_counter()
        workers = [WorkerProc(impl, srv.port, i, args.sample_style) for i in range(max(clients))]
        for wp in workers:
            if wp.expect("start") != "READY":
                raise RuntimeError(f"client process {wp.idx}: bad start")
        log(f"  {len(workers)} client processes ready in {time.perf_counter() - t0:.1f} s")
        for op, table, total in (("W1", "scale_w1", SCALE_W1_TOTAL),
                                 ("W4", "scale_w4", SCALE_W4_TOTAL)):
            if op == "W4":
                cb.fill_w1(client, table, FILL_ITEMS, seed=40,
                           trajectory_items=args.sample_style == "timesteps")
                cb.settle()
            for n in clients:
                vals = []
                for r in range(args.scale_repeat):
                    gc.collect()
                    rate, wall = _scale_point(workers[:n], op, table, total, seed=7 + 100 * r)
                    vals.append(rate)
                    log(f"  SCALE {op} x{n} clients: {rate:,.0f} items/s ({wall:.2f} s)")
                out[op][str(n)] = vals
        close_client(client)
    finally:
        for wp in workers:
            wp.stop()
        srv.stop()
    medians = {op: {n: statistics.median(v) for n, v in d.items()} for op, d in out.items()}
    return {"unit": "items/s", "clients": clients, "values": out, "median": medians,
            "params": {"W1_total_items": SCALE_W1_TOTAL, "W4_total_samples": SCALE_W4_TOTAL,
                       "repeat": args.scale_repeat, "sample_style": args.sample_style}}


WORKLOAD_FUNCS = {
    "W1": run_w1,
    "W2": run_w2,
    "W3": run_w3,
    "W4": run_w4,
    "W4b": run_w4b,
    "W5": run_w5,
    "W5b": run_w5b,
    "W6": run_w6,
    "SCALE": run_scale,
}


# --------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------


def _git_commit() -> str | None:
    try:
        head = subprocess.run(["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(HERE), "status", "--porcelain", "--", "../src"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return (head + ("+dirty src" if dirty else "")) or None
    except Exception:
        return None


def run_impl(impl: str, workloads, args) -> dict:
    reverb, ver = cb.import_impl(impl)
    log(f"impl={impl} version={ver} module={getattr(reverb, '__file__', '?')}")
    out = {
        "impl": impl,
        "version": ver,
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "machine": platform.platform(),
        "cpu_count": os.cpu_count(),
        "repeat": args.repeat,
        "sample_style": args.sample_style,
        "mode": "network (server in a separate process, localhost)",
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "results": {},
    }
    if impl == "ostinato":
        out["commit"] = _git_commit()
    for wl in workloads:
        if impl == "reverb" and wl in OSTINATO_ONLY:
            log(f"{wl}: skipped (ostinato-only API)")
            continue
        log(f"{wl} ({TITLES.get(wl, wl)}) ...")
        t0 = time.perf_counter()
        faulthandler.dump_traceback_later(HANG_DUMP_SECONDS, repeat=False, file=sys.stderr)
        try:
            res = WORKLOAD_FUNCS[wl](reverb, impl, args)
        except Exception as e:
            log(f"{wl} FAILED: {e!r}")
            traceback.print_exc(file=sys.stderr)
            out["results"][wl] = {"error": f"{type(e).__name__}: {e}"}
            continue
        finally:
            faulthandler.cancel_dump_traceback_later()
        res["wall_seconds"] = time.perf_counter() - t0
        if wl == "SCALE":
            out["scaling"] = res
            log(f"SCALE done ({res['wall_seconds']:.1f} s wall)")
            continue
        res["median"] = statistics.median(res["values"])
        res["min"], res["max"] = min(res["values"]), max(res["values"])
        for name, extra in res.pop("extra", {}).items():
            extra["median"] = statistics.median(extra["values"])
            extra["min"], extra["max"] = min(extra["values"]), max(extra["values"])
            out["results"][name] = extra
        out["results"][wl] = res
        log(f"{wl}: median {res['median']:,.1f} {res['unit']} ({res['wall_seconds']:.1f} s wall)")
    return out


def _fmt(v):
    if v is None:
        return "-"
    return f"{v:,.1f}" if abs(v) < 1000 else f"{v:,.0f}"


def print_single(out: dict) -> None:
    print(f"\n{out['impl']} {out['version']} (python {out['python']}, median of {out['repeat']}, "
          "networked: server in a separate process)")
    for name in TABLE_ORDER + [n for n in out["results"] if n not in TABLE_ORDER]:
        res = out["results"].get(name)
        if res is None:
            continue
        title = TITLES.get(name, name)
        if "error" in res:
            print(f"  {name:<11} {title:<28} ERROR: {res['error']}")
        else:
            print(f"  {name:<11} {title:<28} {res['median']:>12,.1f} {res['unit']:<10} "
                  f"(min {res['min']:,.1f}, max {res['max']:,.1f})")
    sc = out.get("scaling")
    if sc:
        print(f"  SCALE (aggregate items/s over client processes, median of "
              f"{sc['params']['repeat']}):")
        for op in ("W1", "W4"):
            cells = ", ".join(f"{n}: {_fmt(sc['median'][op].get(str(n)))}" for n in sc["clients"])
            print(f"    {op}: {cells}")


def compare_rows(ost: dict, rev: dict) -> tuple[list[tuple], bool]:
    rows, all_pass = [], True
    # Rows for what ostinato ran (failed runs included); reverb-only baselines are not rows.
    names = [n for n in TABLE_ORDER if n in ost["results"]]
    for name in names:
        o = ost["results"].get(name, {})
        base = REVERB_BASELINE.get(name, name)
        r = rev["results"].get(base, {})
        ov, rv = o.get("median"), r.get("median")
        unit = o.get("unit") or r.get("unit") or ""
        label = f"{name} {TITLES.get(name, '')}" + (f" (vs reverb {base})" if base != name else "")
        ratio = target = verdict = "-"
        if name in TARGETS:
            target = f">= {TARGETS[name]:g}x"
            if ov is not None and rv:
                ok = ov / rv >= TARGETS[name]
                verdict = "PASS" if ok else "FAIL"
                all_pass &= ok
            else:
                verdict = "ERROR"
                all_pass = False
        if ov is not None and rv:
            ratio = f"{ov / rv:.2f}x"
        rows.append((
            label,
            "ERROR" if "error" in o else _fmt(ov),
            "ERROR" if "error" in r else _fmt(rv),
            _fmt(ISSUE_REVERB.get(base)),
            unit, ratio, target, verdict,
        ))
    return rows, all_pass


HEADER = ("workload", "ostinato", "reverb", "reverb (issue)", "unit", "ratio", "target", "result")


def text_table(rows, hdr=HEADER, left=(0, 4, 6)) -> str:
    widths = [max(len(str(x[i])) for x in rows + [hdr]) for i in range(len(hdr))]
    lines = ["  ".join(str(c).ljust(w) if i in left else str(c).rjust(w)
                       for i, (c, w) in enumerate(zip(row, widths, strict=True)))
             for row in [hdr] + rows]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


def markdown_table(rows, hdr=HEADER) -> str:
    out = ["| " + " | ".join(hdr) + " |", "|" + "|".join(" --- " for _ in hdr) + "|"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def scaling_rows(ost: dict, rev: dict | None) -> list[tuple]:
    so = ost.get("scaling")
    sr = (rev or {}).get("scaling")
    if not so:  # only when ostinato ran SCALE
        return []
    clients = so["clients"]
    rows = []
    for op in ("W1", "W4"):
        for n in clients:
            ov = so["median"][op].get(str(n)) if so else None
            rv = sr["median"][op].get(str(n)) if sr else None
            rows.append((op, str(n), _fmt(ov), _fmt(rv), f"{ov / rv:.2f}x" if ov and rv else "-"))
    return rows


SCALE_HEADER = ("workload", "clients", "ostinato items/s", "reverb items/s", "ratio")


def make_plot(ost: dict | None, rev: dict | None, path: str) -> str | None:
    try:
        import matplotlib  # noqa: PLC0415

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
        import matplotlib.ticker  # noqa: PLC0415
    except ImportError:
        log("matplotlib not installed: no plot (pip install matplotlib)")
        return None
    series = [(d["impl"], d["version"], d["scaling"]) for d in (ost, rev) if d and d.get("scaling")]
    if not series:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    styles = {"ostinato": dict(color="tab:blue", marker="o"),
              "reverb": dict(color="tab:orange", marker="s", linestyle="--")}
    titles = {"W1": "W1 insert_small (trajectory writer, 1 item/step)",
              "W4": "W4 sample_uniform (client.sample, 256/call)"}
    for ax, op in zip(axes, ("W1", "W4"), strict=True):
        for impl, ver, sc in series:
            xs = [int(n) for n in sc["clients"]]
            ys = [sc["median"][op][str(n)] for n in xs]
            label = f"{impl} {ver}" if impl == "ostinato" else f"dm-reverb {ver}"
            ax.plot(xs, ys, label=label, **styles.get(impl, {}))
            for x, y in zip(xs, ys, strict=True):
                ax.annotate(f"{y / 1000:.1f}k", (x, y), textcoords="offset points",
                            xytext=(0, 6), ha="center", fontsize=8)
        ax.set_xscale("log", base=2)
        ax.set_xticks([int(n) for n in series[0][2]["clients"]])
        ax.set_xticklabels([str(n) for n in series[0][2]["clients"]])
        top = max(sc["median"][op][str(n)] for _, _, sc in series for n in sc["clients"])
        ax.set_ylim(0, top * 1.18)
        ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(
            lambda v, _pos: f"{v / 1000:g}k"))
        ax.set_xlabel("client processes")
        ax.set_ylabel("items/s (all clients)")
        ax.set_title(titles[op], fontsize=10)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"Networked mode, server in its own process, localhost, "
                 f"{os.cpu_count()} CPUs", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    log(f"wrote plot {path}")
    return str(path)


def run_reverb_subprocess(workloads, args) -> dict:
    py = os.environ.get("OSTINATO_REVERB_PYTHON", DEFAULT_REVERB_PYTHON)
    if not os.path.exists(py):
        raise SystemExit(f"reverb python {py!r} not found; set OSTINATO_REVERB_PYTHON "
                         "(see benchmarks/README.md, 'Comparing with dm-reverb')")
    rev_wl = [w for w in workloads if w not in OSTINATO_ONLY]
    for w, base in REVERB_BASELINE.items():
        if w in workloads and base not in rev_wl:
            rev_wl.append(base)
    rev_wl = [w for w in ALL_WORKLOADS if w in rev_wl]
    with tempfile.TemporaryDirectory() as td:
        jpath = os.path.join(td, "reverb.json")
        cmd = [py, os.path.abspath(__file__), "--impl", "reverb", "--workloads", ",".join(rev_wl),
               "--repeat", str(args.repeat), "--json", jpath, "--sample-style", args.sample_style,
               "--scale-clients", ",".join(map(str, args.scale_clients)),
               "--scale-repeat", str(args.scale_repeat), "--no-plot"]
        log(f"running reverb side: {' '.join(cmd)}")
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        suppressed = 0
        killer = threading.Timer(REVERB_CHILD_TIMEOUT, proc.kill)
        killer.daemon = True
        killer.start()
        for line in proc.stderr:
            if is_native_noise(line):
                suppressed += 1
                continue
            sys.stderr.write("  (reverb) " + line)
        rc = proc.wait()
        killer.cancel()
        if suppressed:
            log(f"(suppressed {suppressed} native reverb/TF log lines)")
        if rc != 0:
            raise SystemExit(f"reverb side failed with rc={rc}")
        with open(jpath) as f:
            return json.load(f)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--impl", choices=["ostinato", "reverb"], default="ostinato")
    p.add_argument("--workloads", default=None,
                   help=f"comma-separated subset of {','.join(ALL_WORKLOADS)} (default: all that "
                   "apply to the implementation)")
    p.add_argument("--repeat", type=int, default=3, help="runs per workload; median reported")
    p.add_argument("--json", default=None, help="write results as JSON to this file")
    p.add_argument("--compare-reverb", action="store_true",
                   help="run ostinato here and dm-reverb via $OSTINATO_REVERB_PYTHON "
                   f"(default {DEFAULT_REVERB_PYTHON}), then print a comparison table")
    p.add_argument("--reverb-json", default=None,
                   help="with --compare-reverb: reuse a saved `--impl reverb --json` result")
    p.add_argument("--sample-style", choices=["timesteps", "flat"], default="timesteps",
                   help="W4/W5/W6/SCALE items: 'timesteps' = one-step trajectory items "
                   "(history[c][-1:]) sampled with the default client.sample(); 'flat' = W1 "
                   "items (history[c][-1]) sampled with emit_timesteps=False (Reverb cannot split "
                   "squeezed scalar columns into timesteps)")
    p.add_argument("--scale-clients", default=",".join(map(str, SCALE_CLIENTS)),
                   help="client process counts for SCALE (default %(default)s)")
    p.add_argument("--scale-repeat", type=int, default=3,
                   help="runs per SCALE point; median reported (default %(default)s)")
    p.add_argument("--plot", default=str(DEFAULT_PLOT),
                   help="where SCALE's PNG goes (default %(default)s)")
    p.add_argument("--no-plot", action="store_true", help="do not write the SCALE plot")
    p.add_argument("--plot-from", default=None, metavar="JSON",
                   help="only redraw the plot (--plot) from a saved --compare-reverb or --impl "
                   "--json result, then exit")
    p.add_argument("--markdown", action="store_true",
                   help="also print the comparison tables as markdown")
    p.add_argument("--serve", default=None, help=argparse.SUPPRESS)
    p.add_argument("--scale-worker", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.workloads:
        wl = [w.strip() for w in args.workloads.split(",") if w.strip()]
        bad = [w for w in wl if w not in ALL_WORKLOADS]
        if bad:
            p.error(f"unknown workloads {bad}; choose from {ALL_WORKLOADS}")
        args.workload_list = wl
    else:
        args.workload_list = list(ALL_WORKLOADS)
    if args.repeat < 1 or args.scale_repeat < 1:
        p.error("--repeat and --scale-repeat must be >= 1")
    try:
        args.scale_clients = sorted({int(x) for x in args.scale_clients.split(",") if x.strip()})
    except ValueError:
        p.error("--scale-clients must be comma-separated integers")
    if not args.scale_clients or min(args.scale_clients) < 1:
        p.error("--scale-clients must be positive integers")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.serve is not None:
        return serve_main(args.impl, args.serve)
    if args.scale_worker is not None:
        return worker_main(args.impl, args.scale_worker, args.sample_style)

    if args.plot_from:
        with open(args.plot_from) as f:
            saved = json.load(f)
        if "ostinato" in saved or "reverb" in saved:
            ost, rev = saved.get("ostinato"), saved.get("reverb")
        else:
            ost, rev = (saved, None) if saved.get("impl") == "ostinato" else (None, saved)
        if not make_plot(ost, rev, args.plot):
            raise SystemExit(f"no scaling results in {args.plot_from}")
        return 0

    t_start = time.perf_counter()
    if not args.compare_reverb:
        wl = [w for w in args.workload_list if not (args.impl == "reverb" and w in OSTINATO_ONLY)]
        out = run_impl(args.impl, wl, args)
        print_single(out)
        if out.get("scaling") and not args.no_plot:
            out["plot"] = make_plot(out if args.impl == "ostinato" else None,
                                    out if args.impl == "reverb" else None, args.plot)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(out, f, indent=2)
            log(f"wrote {args.json}")
        log(f"total {time.perf_counter() - t_start:.0f} s")
        return 0

    ost = run_impl("ostinato", args.workload_list, args)
    if args.reverb_json:
        with open(args.reverb_json) as f:
            rev = json.load(f)
        log(f"using saved reverb results from {args.reverb_json}")
    else:
        rev = run_reverb_subprocess(args.workload_list, args)
    rows, all_pass = compare_rows(ost, rev)
    srows = scaling_rows(ost, rev)
    commit = f" @ {ost['commit']}" if ost.get("commit") else ""
    print(f"\nostinato {ost['version']}{commit} vs dm-reverb {rev['version']}, networked (server in a "
          f"separate process, localhost; median of {args.repeat}; {os.cpu_count()} CPUs)\n")
    if rows:
        print(text_table(rows))
    if srows:
        print("\nscaling (aggregate over client processes, median of "
              f"{ost['scaling']['params']['repeat']}):\n")
        print(text_table(srows, SCALE_HEADER, left=(0,)))
    plot = None
    if srows and not args.no_plot:
        plot = make_plot(ost, rev, args.plot)
        if plot:
            print(f"\nplot: {plot}")
    if args.markdown:
        if rows:
            print("\n" + markdown_table(rows))
        if srows:
            print("\n" + markdown_table(srows, SCALE_HEADER))
    if rows:
        print(f"\noverall: {'PASS' if all_pass else 'FAIL'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"ostinato": ost, "reverb": rev, "all_pass": all_pass, "plot": plot}, f,
                      indent=2)
        log(f"wrote {args.json}")
    log(f"total {time.perf_counter() - t_start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
