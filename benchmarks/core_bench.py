#!/usr/bin/env python3
"""Core throughput / memory benchmark: ostinato vs. DeepMind Reverb.

The same user code runs against either implementation:

    --impl ostinato   ->  ``import ostinato as reverb``
    --impl reverb     ->  ``import reverb``   (needs dm-reverb, see benchmarks/README.md)

Workloads (each with its own embedded ``reverb.Server``):

    W1   insert_small        trajectory writer, 1 item per step (obs f32[8], action i32, reward f32)
    W2   insert_sequences    obs f32[64], one item of the last 10 steps per step
    W4   sample_uniform      client.sample(table, num_samples=256) on 100k items, until 20k samples
    W4b  sample_uniform_batch  client.sample_batch(table, batch_size=256)        (ostinato only)
    W5   sample_prioritized  sample 256 + mutate_priorities, Prioritized(0.6), 100k items
    W5b  prio_batch          sample_batch + update_priorities                   (ostinato only)
    MEM  memory_per_item     RSS growth per stored W1 item minus its 40 data bytes
                             (fresh subprocess per run)

Examples:

    python benchmarks/core_bench.py --impl ostinato --repeat 3 --json out.json
    /opt/reverb-venv/bin/python benchmarks/core_bench.py --impl reverb --repeat 3
    python benchmarks/core_bench.py --compare-reverb          # both + comparison table

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
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_REVERB_PYTHON = "/opt/reverb-venv/bin/python"

ALL_WORKLOADS = ["W1", "W2", "W4", "W4b", "W5", "W5b", "MEM"]
OSTINATO_ONLY = {"W4b", "W5b"}

# Workload sizes.
W1_STEPS = 20_000
W2_STEPS = 20_000
W2_SEQ = 10
FILL_ITEMS = 100_000
SAMPLE_TOTAL = 20_000
SAMPLE_BATCH = 256
W5_MAX_BATCHES = 100
W5_MIN_SECONDS = 1.0
W5_MAX_SECONDS = 3.0
MEM_ITEMS = 200_000
SETTLE_SECONDS = 1.5
HANG_DUMP_SECONDS = 90
REVERB_CHILD_TIMEOUT = 900
MEM_WARMUP_ITEMS = 1_000
W1_DATA_BYTES = 8 * 4 + 4 + 4  # obs f32[8] + action i32 + reward f32
TABLE_MAX_SIZE = 1_000_000

# Targets for --compare-reverb: (kind, value).  "speedup": ostinato/reverb >= value;
# "max": ostinato value <= value (absolute).
TARGETS = {
    "W1": ("speedup", 5.0),
    "W2": ("speedup", 5.0),
    "W4": ("speedup", 10.0),
    "W4b": ("speedup", 10.0),
    "W5": ("speedup", 10.0),
    "W5b": ("speedup", 10.0),
    "MEM": ("max", 500.0),
}
# Which reverb workload an ostinato-only workload is compared against.
REVERB_BASELINE = {"W4b": "W4", "W5b": "W5"}

TITLES = {
    "W1": "insert_small",
    "W2": "insert_sequences",
    "W2_MBps": "insert_sequences MB/s",
    "W4": "sample_uniform",
    "W4b": "sample_uniform (batch)",
    "W5": "sample_prioritized",
    "W5b": "sample_prioritized (batch)",
    "MEM": "bytes/item overhead",
}


def log(msg: str) -> None:
    print(f"[core_bench] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------
# Implementation loading
# --------------------------------------------------------------------------------------


def import_impl(name: str):
    """Returns (module used as ``reverb``, version string)."""
    if name == "reverb":
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        import reverb  # noqa: PLC0415

        try:
            from importlib.metadata import version

            ver = version("dm-reverb")
        except Exception:  # pragma: no cover
            ver = getattr(reverb, "__version__", "unknown")
        return reverb, ver
    if name == "ostinato":
        try:
            import ostinato as reverb  # noqa: PLC0415
        except ImportError:
            src = REPO_ROOT / "src"
            if str(src) not in sys.path:
                sys.path.insert(0, str(src))
            import ostinato as reverb  # noqa: PLC0415
        ver = getattr(reverb, "__version__", None)
        if ver is None:
            try:
                from importlib.metadata import version

                ver = version("ostinato")
            except Exception:
                ver = "unknown"
        return reverb, ver
    raise ValueError(f"unknown impl {name!r}")


# --------------------------------------------------------------------------------------
# Shared user code (identical for both implementations)
# --------------------------------------------------------------------------------------


def make_server(reverb, tables):
    server = reverb.Server(tables=tables)
    if hasattr(server, "localhost_client"):
        client = server.localhost_client()
    else:
        client = reverb.Client(f"localhost:{server.port}")
    return server, client


def stop_server(server) -> None:
    t0 = time.perf_counter()
    try:
        server.stop()
    except Exception as e:  # pragma: no cover
        log(f"server.stop() failed: {e!r}")
    dt = time.perf_counter() - t0
    if dt > 1.0:
        log(f"  (server.stop() took {dt:.1f} s)")


def uniform_table(reverb, name="uniform", max_size=TABLE_MAX_SIZE):
    return reverb.Table(
        name=name,
        sampler=reverb.selectors.Uniform(),
        remover=reverb.selectors.Fifo(),
        max_size=max_size,
        rate_limiter=reverb.rate_limiters.MinSize(1),
    )


def prioritized_table(reverb, name="prioritized", max_size=TABLE_MAX_SIZE):
    return reverb.Table(
        name=name,
        sampler=reverb.selectors.Prioritized(0.6),
        remover=reverb.selectors.Fifo(),
        max_size=max_size,
        rate_limiter=reverb.rate_limiters.MinSize(1),
    )


def w1_arrays(n: int, seed: int):
    rng = np.random.default_rng(seed)
    obs = rng.standard_normal((n, 8), dtype=np.float32)
    action = rng.integers(0, 16, size=n, dtype=np.int32)
    reward = rng.standard_normal(n, dtype=np.float32)
    return obs, action, reward


def w1_steps(n: int, seed: int):
    """Pre-generated W1 steps: independent arrays / numpy scalars per step."""
    obs, action, reward = w1_arrays(n, seed)
    return [
        {"obs": obs[i].copy(), "action": np.int32(action[i]), "reward": np.float32(reward[i])}
        for i in range(n)
    ]


def write_w1_items(w, table, steps, trajectory_items=False):
    """W1 user code: append a step, then one item referencing that step.

    trajectory_items=False: the W1 item (squeezed columns, history[col][-1]).
    trajectory_items=True: a one-step trajectory item (history[col][-1:]), which
    Reverb's client.sample() can split into timesteps (used to fill W4/W5 tables).
    """
    if trajectory_items:
        for step in steps:
            w.append(step)
            w.create_item(
                table,
                1.0,
                {
                    "obs": w.history["obs"][-1:],
                    "action": w.history["action"][-1:],
                    "reward": w.history["reward"][-1:],
                },
            )
    else:
        for step in steps:
            w.append(step)
            w.create_item(
                table,
                1.0,
                {
                    "obs": w.history["obs"][-1],
                    "action": w.history["action"][-1],
                    "reward": w.history["reward"][-1],
                },
            )


def fill_w1(client, table, n, seed, trajectory_items, chunk=10_000):
    """Untimed fill of `n` W1 items through a trajectory writer."""
    t0 = time.perf_counter()
    with client.trajectory_writer(num_keep_alive_refs=1) as w:
        done = 0
        while done < n:
            k = min(chunk, n - done)
            write_w1_items(w, table, w1_steps(k, seed + done), trajectory_items)
            done += k
        w.flush()
    log(f"  filled {n} items into {table!r} in {time.perf_counter() - t0:.1f} s")


def settle():
    """Pause after a fill: Reverb's sampling right after heavy writer traffic is several
    times slower for ~1-2 s (server threads still busy). Applied to both implementations."""
    gc.collect()
    time.sleep(SETTLE_SECONDS)


def sample_kwargs(style: str):
    # Reverb 0.14's client.sample(emit_timesteps=True) -- the default -- raises
    # TypeError for items with squeezed scalar columns, so the "flat" style asks for
    # emit_timesteps=False explicitly.
    return {} if style == "timesteps" else {"emit_timesteps": False}


def sample_key(s):
    # emit_timesteps=True yields a list of ReplaySample (one per timestep).
    if isinstance(s, list):
        s = s[0]
    return s.info.key


# --------------------------------------------------------------------------------------
# Workloads. Each returns a dict: {"unit": str, "values": [...], "params": {...}, ...}
# --------------------------------------------------------------------------------------


def run_w1(reverb, args):
    steps = w1_steps(W1_STEPS, seed=1)
    values = []
    for r in range(args.repeat):
        server, client = make_server(reverb, [uniform_table(reverb, "w1")])
        try:
            with client.trajectory_writer(num_keep_alive_refs=1) as w:
                t0 = time.perf_counter()
                write_w1_items(w, "w1", steps)
                w.flush()
                dt = time.perf_counter() - t0
        finally:
            stop_server(server)
        rate = len(steps) / dt
        values.append(rate)
        log(f"  W1 run {r + 1}/{args.repeat}: {rate:,.0f} items/s ({dt:.2f} s)")
    return {"unit": "items/s", "values": values, "params": {"steps": W1_STEPS}}


def run_w2(reverb, args):
    rng = np.random.default_rng(2)
    obs_all = rng.standard_normal((W2_STEPS, 64), dtype=np.float32)
    steps = [{"obs": obs_all[i].copy()} for i in range(W2_STEPS)]
    step_bytes = sum(s["obs"].nbytes for s in steps)
    items_rates, mb_rates = [], []
    for r in range(args.repeat):
        server, client = make_server(reverb, [uniform_table(reverb, "w2")])
        try:
            n_items = 0
            with client.trajectory_writer(num_keep_alive_refs=W2_SEQ) as w:
                t0 = time.perf_counter()
                for i, step in enumerate(steps):
                    w.append(step)
                    if i + 1 >= W2_SEQ:
                        w.create_item("w2", 1.0, {"obs": w.history["obs"][-W2_SEQ:]})
                        n_items += 1
                w.flush()
                dt = time.perf_counter() - t0
        finally:
            stop_server(server)
        items_rates.append(n_items / dt)
        mb_rates.append(step_bytes / dt / 1e6)
        log(
            f"  W2 run {r + 1}/{args.repeat}: {n_items / dt:,.0f} items/s, "
            f"{step_bytes / dt / 1e6:.2f} MB/s ({dt:.2f} s)"
        )
    return {
        "unit": "items/s",
        "values": items_rates,
        "params": {"steps": W2_STEPS, "seq_len": W2_SEQ, "step_bytes_total": step_bytes},
        "extra": {"W2_MBps": {"unit": "MB/s", "values": mb_rates}},
    }


def run_w4(reverb, args):
    server, client = make_server(reverb, [uniform_table(reverb, "w4")])
    try:
        fill_w1(client, "w4", FILL_ITEMS, seed=4, trajectory_items=args.sample_style == "timesteps")
        kw = sample_kwargs(args.sample_style)
        settle()
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
        # Shape check, outside timing.
        first = next(iter(client.sample("w4", num_samples=1, **kw)))
        shape = f"list[{len(first)}]" if isinstance(first, list) else type(first).__name__
    finally:
        stop_server(server)
    return {
        "unit": "items/s",
        "values": values,
        "params": {
            "items": FILL_ITEMS,
            "samples": SAMPLE_TOTAL,
            "num_samples": SAMPLE_BATCH,
            "sample_style": args.sample_style,
            "yielded": shape,
        },
    }


def run_w4b(reverb, args):
    server, client = make_server(reverb, [uniform_table(reverb, "w4b")])
    try:
        fill_w1(
            client, "w4b", FILL_ITEMS, seed=4, trajectory_items=args.sample_style == "timesteps"
        )
        settle()
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
        stop_server(server)
    return {
        "unit": "items/s",
        "values": values,
        "params": {"items": FILL_ITEMS, "samples": SAMPLE_TOTAL, "batch_size": SAMPLE_BATCH},
    }


def _timed_batches(step):
    """Runs `step()` until 100 batches (and >= 1 s) or 3 s; returns batches/s."""
    batches = 0
    t0 = time.perf_counter()
    while True:
        step()
        batches += 1
        el = time.perf_counter() - t0
        if (batches >= W5_MAX_BATCHES and el >= W5_MIN_SECONDS) or el >= W5_MAX_SECONDS:
            return batches, el


def run_w5(reverb, args):
    server, client = make_server(reverb, [prioritized_table(reverb, "w5")])
    rng = np.random.default_rng(5)
    kw = sample_kwargs(args.sample_style)
    try:
        fill_w1(client, "w5", FILL_ITEMS, seed=5, trajectory_items=args.sample_style == "timesteps")

        def step():
            keys = []
            for s in client.sample("w5", num_samples=SAMPLE_BATCH, **kw):
                keys.append(sample_key(s))
            prios = rng.uniform(0.01, 10.0, size=len(keys))
            client.mutate_priorities(
                "w5", updates={k: float(p) for k, p in zip(keys, prios, strict=True)}
            )

        settle()
        step()  # warm-up, untimed
        values = []
        for r in range(args.repeat):
            batches, el = _timed_batches(step)
            values.append(batches / el)
            log(
                f"  W5 run {r + 1}/{args.repeat}: {batches / el:,.1f} batches/s "
                f"({batches} batches, {el:.2f} s)"
            )
    finally:
        stop_server(server)
    return {
        "unit": "batches/s",
        "values": values,
        "params": {
            "items": FILL_ITEMS,
            "batch": SAMPLE_BATCH,
            "priority_exponent": 0.6,
            "sample_style": args.sample_style,
        },
    }


def run_w5b(reverb, args):
    server, client = make_server(reverb, [prioritized_table(reverb, "w5b")])
    rng = np.random.default_rng(5)
    try:
        fill_w1(
            client, "w5b", FILL_ITEMS, seed=5, trajectory_items=args.sample_style == "timesteps"
        )

        def step():
            b = client.sample_batch("w5b", batch_size=SAMPLE_BATCH)
            keys = b.info.key
            prios = rng.uniform(0.01, 10.0, size=len(keys))
            client.update_priorities("w5b", keys, prios)

        settle()
        step()  # warm-up, untimed
        values = []
        for r in range(args.repeat):
            batches, el = _timed_batches(step)
            values.append(batches / el)
            log(
                f"  W5b run {r + 1}/{args.repeat}: {batches / el:,.1f} batches/s "
                f"({batches} batches, {el:.2f} s)"
            )
    finally:
        stop_server(server)
    return {
        "unit": "batches/s",
        "values": values,
        "params": {"items": FILL_ITEMS, "batch": SAMPLE_BATCH, "priority_exponent": 0.6},
    }


# ---- MEM ------------------------------------------------------------------------------


def _rss_tree_bytes() -> int:
    """RSS of this process plus its descendants (an implementation may fork a server)."""
    try:
        import psutil  # noqa: PLC0415

        p = psutil.Process()
        total = p.memory_info().rss
        for c in p.children(recursive=True):
            try:
                total += c.memory_info().rss
            except psutil.Error:
                pass
        return total
    except ImportError:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _settled_rss() -> int:
    gc.collect()
    time.sleep(0.5)
    gc.collect()
    return _rss_tree_bytes()


def mem_child(reverb, n_items: int) -> dict:
    """Runs inside a fresh subprocess. Returns the measurement as a dict."""
    obs, action, reward = w1_arrays(n_items + MEM_WARMUP_ITEMS, seed=7)
    server, client = make_server(reverb, [uniform_table(reverb, "mem")])
    try:
        with client.trajectory_writer(num_keep_alive_refs=1) as w:

            def insert(lo, hi):
                for i in range(lo, hi):
                    w.append({"obs": obs[i].copy(), "action": action[i], "reward": reward[i]})
                    w.create_item(
                        "mem",
                        1.0,
                        {
                            "obs": w.history["obs"][-1],
                            "action": w.history["action"][-1],
                            "reward": w.history["reward"][-1],
                        },
                    )
                w.flush()

            # Warm-up: connections, threads, buffers -- fixed costs not per item.
            insert(0, MEM_WARMUP_ITEMS)
            before = _settled_rss()
            t0 = time.perf_counter()
            insert(MEM_WARMUP_ITEMS, MEM_WARMUP_ITEMS + n_items)
            dt = time.perf_counter() - t0
            after = _settled_rss()
        size = None
        try:
            info = client.server_info()
            size = int(info["mem"].current_size)
        except Exception:
            pass
    finally:
        stop_server(server)
    per_item = (after - before) / n_items
    return {
        "rss_before": before,
        "rss_after": after,
        "items": n_items,
        "table_size": size,
        "rss_per_item": per_item,
        "overhead_per_item": per_item - W1_DATA_BYTES,
        "insert_seconds": dt,
    }


def run_mem(impl, args):
    values, runs = [], []
    for r in range(args.repeat):
        cmd = [
            sys.executable,
            os.path.abspath(__file__),
            "--impl",
            impl,
            "--mem-child",
            "--mem-items",
            str(args.mem_items),
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        if proc.returncode != 0:
            tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
            raise RuntimeError(f"MEM child failed (rc={proc.returncode}):\n{tail}")
        res = json.loads(proc.stdout.strip().splitlines()[-1])
        runs.append(res)
        values.append(res["overhead_per_item"])
        log(
            f"  MEM run {r + 1}/{args.repeat}: {res['overhead_per_item']:,.0f} bytes/item beyond "
            f"data (RSS {res['rss_before'] / 2**20:.0f} -> {res['rss_after'] / 2**20:.0f} MiB, "
            f"{res['items']} items, table size {res['table_size']})"
        )
    return {
        "unit": "bytes/item",
        "values": values,
        "params": {"items": args.mem_items, "data_bytes_per_item": W1_DATA_BYTES},
        "runs": runs,
    }


WORKLOAD_FUNCS = {
    "W1": run_w1,
    "W2": run_w2,
    "W4": run_w4,
    "W4b": run_w4b,
    "W5": run_w5,
    "W5b": run_w5b,
}


# --------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------


def run_impl(impl: str, workloads, args) -> dict:
    reverb, ver = import_impl(impl)
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
        "pin_cpu": args.pin_cpu,
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "results": {},
    }
    for wl in workloads:
        if impl == "reverb" and wl in OSTINATO_ONLY:
            log(f"{wl}: skipped (ostinato-only API)")
            continue
        log(f"{wl} ({TITLES.get(wl, wl)}) ...")
        t0 = time.perf_counter()
        # If a workload hangs (seen once with Reverb: ~2 min stall in W5), show where.
        faulthandler.dump_traceback_later(HANG_DUMP_SECONDS, repeat=False, file=sys.stderr)
        try:
            res = run_mem(impl, args) if wl == "MEM" else WORKLOAD_FUNCS[wl](reverb, args)
        except Exception as e:
            log(f"{wl} FAILED: {e!r}")
            traceback.print_exc(file=sys.stderr)
            out["results"][wl] = {"error": f"{type(e).__name__}: {e}"}
            continue
        finally:
            faulthandler.cancel_dump_traceback_later()
        res["median"] = statistics.median(res["values"])
        res["min"], res["max"] = min(res["values"]), max(res["values"])
        for name, extra in res.pop("extra", {}).items():
            extra["median"] = statistics.median(extra["values"])
            extra["min"], extra["max"] = min(extra["values"]), max(extra["values"])
            out["results"][name] = extra
        res["wall_seconds"] = time.perf_counter() - t0
        out["results"][wl] = res
        log(f"{wl}: median {res['median']:,.1f} {res['unit']} ({res['wall_seconds']:.1f} s wall)")
    return out


def print_single(out: dict) -> None:
    print(f"\n{out['impl']} {out['version']} (python {out['python']}, median of {out['repeat']})")
    for name, res in out["results"].items():
        title = TITLES.get(name, name)
        if "error" in res:
            print(f"  {name:<8} {title:<28} ERROR: {res['error']}")
        else:
            print(
                f"  {name:<8} {title:<28} {res['median']:>14,.1f} {res['unit']:<11} "
                f"(min {res['min']:,.1f}, max {res['max']:,.1f})"
            )


def _fmt(v):
    if v is None:
        return "-"
    return f"{v:,.1f}" if abs(v) < 1000 else f"{v:,.0f}"


def compare_table(ost: dict, rev: dict) -> tuple[str, bool]:
    rows = []
    all_pass = True
    names = [
        n
        for n in ["W1", "W2", "W2_MBps", "W4", "W4b", "W5", "W5b", "MEM"]
        if n in ost["results"] or n in rev["results"]
    ]
    for name in names:
        o = ost["results"].get(name, {})
        base = REVERB_BASELINE.get(name, name)
        r = rev["results"].get(base, {})
        ov = o.get("median")
        rv = r.get("median")
        unit = o.get("unit") or r.get("unit") or ""
        label = f"{name} {TITLES.get(name, '')}" + (f" (vs reverb {base})" if base != name else "")
        ratio = target = verdict = "-"
        if name == "MEM":
            if ov is not None and rv is not None and ov > 0:
                ratio = f"{rv / ov:.1f}x less"
            target = "<= 500 B/item"
            if ov is not None:
                ok = ov <= TARGETS["MEM"][1]
                verdict = "PASS" if ok else "FAIL"
                all_pass &= ok
            else:
                verdict = "ERROR"
                all_pass = False
        elif name in TARGETS:
            t = TARGETS[name][1]
            target = f">= {t:g}x"
            if ov is not None and rv:
                ratio = f"{ov / rv:.2f}x"
                ok = ov / rv >= t
                verdict = "PASS" if ok else "FAIL"
                all_pass &= ok
            else:
                verdict = "ERROR"
                all_pass = False
        elif ov is not None and rv:
            ratio = f"{ov / rv:.2f}x"
        if "error" in o:
            ovs = "ERROR"
        else:
            ovs = _fmt(ov)
        rows.append(
            (label, ovs, _fmt(rv) if "error" not in r else "ERROR", unit, ratio, target, verdict)
        )
    hdr = ("workload", "ostinato", "reverb", "unit", "ratio", "target", "result")
    widths = [max(len(str(x[i])) for x in rows + [hdr]) for i in range(len(hdr))]
    lines = [
        "  ".join(
            str(c).ljust(w) if i in (0, 3, 5) else str(c).rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in [hdr] + rows
    ]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines), all_pass


def run_reverb_subprocess(workloads, args) -> dict:
    py = os.environ.get("OSTINATO_REVERB_PYTHON", DEFAULT_REVERB_PYTHON)
    if not os.path.exists(py):
        raise SystemExit(
            f"reverb python {py!r} not found; set OSTINATO_REVERB_PYTHON "
            "(see benchmarks/README.md, 'Comparing with dm-reverb')"
        )
    rev_wl = [w for w in workloads if w not in OSTINATO_ONLY]
    for w, base in REVERB_BASELINE.items():
        if w in workloads and base not in rev_wl:
            rev_wl.append(base)
    rev_wl = [w for w in ALL_WORKLOADS if w in rev_wl]
    with tempfile.TemporaryDirectory() as td:
        jpath = os.path.join(td, "reverb.json")
        cmd = [
            py,
            os.path.abspath(__file__),
            "--impl",
            "reverb",
            "--workloads",
            ",".join(rev_wl),
            "--repeat",
            str(args.repeat),
            "--json",
            jpath,
            "--sample-style",
            args.sample_style,
            "--mem-items",
            str(args.mem_items),
        ]
        log(f"running reverb side: {' '.join(cmd)}")
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        suppressed = 0
        killer = threading.Timer(REVERB_CHILD_TIMEOUT, proc.kill)
        killer.daemon = True
        killer.start()
        assert proc.stderr is not None
        for line in proc.stderr:
            # Reverb/TF native logging is very chatty (e.g. "pending items alarmingly high").
            if (
                line.startswith("[reverb/cc/")
                or "tensorflow/core" in line
                or line.startswith("To enable the following instructions")
            ):
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
    p.add_argument(
        "--workloads",
        default=None,
        help=f"comma-separated subset of {','.join(ALL_WORKLOADS)} (default: all "
        "that apply to the implementation)",
    )
    p.add_argument("--repeat", type=int, default=3, help="runs per workload; median reported")
    p.add_argument("--json", default=None, help="write results as JSON to this file")
    p.add_argument(
        "--compare-reverb",
        action="store_true",
        help="run ostinato here and dm-reverb via $OSTINATO_REVERB_PYTHON "
        f"(default {DEFAULT_REVERB_PYTHON}), then print a comparison table",
    )
    p.add_argument(
        "--reverb-json",
        default=None,
        help="with --compare-reverb: reuse a saved `--impl reverb --json` result "
        "instead of running reverb again",
    )
    p.add_argument(
        "--sample-style",
        choices=["timesteps", "flat"],
        default="timesteps",
        help="W4/W5 items: 'timesteps' = one-step trajectory items (history[c][-1:]) "
        "sampled with the default client.sample() (yields 1-element lists); "
        "'flat' = W1 items (history[c][-1]) sampled with emit_timesteps=False "
        "(Reverb cannot split squeezed scalar columns into timesteps)",
    )
    p.add_argument(
        "--pin-cpu",
        type=int,
        default=None,
        metavar="CPU",
        help="pin this process and its children (the reverb side in --compare-reverb, MEM "
        "subprocesses) to one CPU. On this 2-vCPU VM Reverb's sampling is bimodal unpinned "
        "(W4 ~10k or ~40k items/s, W5 ~40 or ~140 batches/s, cross-CPU thread hand-off); "
        "pinned it is steadily the fast mode",
    )
    p.add_argument("--mem-items", type=int, default=MEM_ITEMS, help=argparse.SUPPRESS)
    p.add_argument("--mem-child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.workloads:
        wl = [w.strip() for w in args.workloads.split(",") if w.strip()]
        bad = [w for w in wl if w not in ALL_WORKLOADS]
        if bad:
            p.error(f"unknown workloads {bad}; choose from {ALL_WORKLOADS}")
        args.workload_list = wl
    else:
        args.workload_list = list(ALL_WORKLOADS)
    if args.repeat < 1:
        p.error("--repeat must be >= 1")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)

    if args.mem_child:
        reverb, _ = import_impl(args.impl)
        print(json.dumps(mem_child(reverb, args.mem_items)), flush=True)
        return 0

    if args.pin_cpu is not None:
        os.sched_setaffinity(0, {args.pin_cpu})
        log(f"pinned to CPU {args.pin_cpu} (inherited by subprocesses)")

    t_start = time.perf_counter()
    if not args.compare_reverb:
        wl = [w for w in args.workload_list if not (args.impl == "reverb" and w in OSTINATO_ONLY)]
        out = run_impl(args.impl, wl, args)
        print_single(out)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(out, f, indent=2)
            log(f"wrote {args.json}")
        log(f"total {time.perf_counter() - t_start:.0f} s")
        return 0

    # --compare-reverb: ostinato here (MEM in subprocesses), reverb in its own venv.
    ost = run_impl("ostinato", args.workload_list, args)
    if args.reverb_json:
        with open(args.reverb_json) as f:
            rev = json.load(f)
        log(f"using saved reverb results from {args.reverb_json}")
    else:
        rev = run_reverb_subprocess(args.workload_list, args)
    table, all_pass = compare_table(ost, rev)
    pin = f"; pinned to CPU {args.pin_cpu}" if args.pin_cpu is not None else ""
    print(
        f"\nostinato {ost['version']} vs dm-reverb {rev['version']} "
        f"(median of {args.repeat}; {os.cpu_count()} CPUs{pin})\n"
    )
    print(table)
    print(f"\noverall: {'PASS' if all_pass else 'FAIL'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"ostinato": ost, "reverb": rev, "all_pass": all_pass}, f, indent=2)
        log(f"wrote {args.json}")
    log(f"total {time.perf_counter() - t_start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
