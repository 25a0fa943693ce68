"""Actor scale: N paced writers over P processes feeding one server while a learner samples.

The deployment Reverb is built for: a server in its own process; writers spread over P actor
processes, each writer appending one step and creating one item every ``--period`` seconds
(through the public client API); one sampler process taking batches of 256; and a probe that
opens a fresh client every 0.2 s and times ``server_info()``. Reported per run: items
through per second against the paced rate, probe latency p50/p99/max (and p99 leaving out the
first second, when every writer opens its stream at once), sample-call latency p50/p99, the
server's thread count, RSS (at the end and the peak of a timeline sampled every ``--every``
seconds), the CPU seconds of the server and of the writer processes, and writer errors.

    python benchmarks/actor_scale.py --impl ostinato --writers 32,128,256 --processes 8
    python benchmarks/actor_scale.py --compare --writers 32,128,256   # + dm-reverb, alternated
    python benchmarks/actor_scale.py --compare --writers 256 --server-cpus 0 --client-cpus 1

On one small machine the actors' own CPU use decides how much is left for the server;
``--server-cpus``/``--client-cpus`` pin them apart, as when actors run on other hosts.

The soak (an hour, 64 writers over 4 processes, the server's timeline every 30 s):

    python benchmarks/actor_scale.py --writers 64 --processes 4 --seconds 3600 --every 30 \\
        --out soak

``--compare`` runs dm-reverb under ``$OSTINATO_REVERB_PYTHON`` (see benchmarks/README.md).
Results: ``results_OUT.json`` and ``.md`` beside this file (``--out``, default actor_scale).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from servers import import_impl, readline, reverb_python, stop_child  # noqa: E402

TABLE = [{"name": "t", "kind": "uniform", "max_size": 1_000_000, "min_size": 1}]


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def _proc_status(pid: int) -> dict[str, int]:
    out = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("Threads", "VmRSS"):
                out[key] = int(value.split()[0])
    except OSError:
        pass
    return out


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds a process has used so far (Linux)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _client(reverb, impl: str, port: int):
    if impl == "ostinato":
        return reverb.Client(f"localhost:{port}", in_process=False)
    return reverb.Client(f"localhost:{port}")


def writer_child(impl: str, port: int, n: int, period: float, seconds: float) -> None:
    """A writer process: ``n`` writers, each one item per ``period``; prints JSON."""
    import numpy as np

    reverb, _ = import_impl(impl)
    client = _client(reverb, impl, port)
    writers = [client.trajectory_writer(num_keep_alive_refs=1) for _ in range(n)]
    print("ready", flush=True)
    sys.stdin.readline()  # go
    start = time.monotonic()
    steps = int(seconds / period)
    created, errors = 0, 0
    for step in range(steps):
        for w in writers:
            try:
                # A (1,) column: dm-reverb's Client.sample fails on scalar columns
                # ("len() of unsized object").
                w.append({"x": np.full((1,), step, np.float32)})
                w.create_item("t", 1.0, {"x": w.history["x"][-1]})
                created += 1
            except Exception:  # noqa: BLE001 - counted, reported
                errors += 1
        lag = start + (step + 1) * period - time.monotonic()
        if lag > 0:
            time.sleep(lag)
    elapsed = time.monotonic() - start
    for w in writers:
        try:
            w.flush(timeout_ms=60_000)
            w.close()
        except Exception:  # noqa: BLE001
            errors += 1
    cpu = os.times()
    print(
        json.dumps(
            {"created": created, "errors": errors, "elapsed": elapsed, "cpu": cpu.user + cpu.system}
        ),
        flush=True,
    )
    os._exit(0)


def sampler_child(impl: str, port: int, seconds: float) -> None:
    """Samples batches of 256 for ``seconds``; prints the call latencies as JSON."""
    reverb, _ = import_impl(impl)
    client = _client(reverb, impl, port)
    print("ready", flush=True)
    sys.stdin.readline()
    lat = []
    error = None
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t0 = time.monotonic()
        try:
            list(client.sample("t", num_samples=256))
        except Exception as e:  # noqa: BLE001 - the table may still be empty
            error = f"{type(e).__name__}: {e}"[:300]
            time.sleep(0.01)
            continue
        lat.append(time.monotonic() - t0)
    print(json.dumps({"latencies": lat, "error": error}), flush=True)
    os._exit(0)


def _pinned(cpus: str | None) -> list[str]:
    return ["taskset", "-c", cpus] if cpus else []


def one_run(
    impl: str,
    writers: int,
    processes: int,
    period: float,
    seconds: float,
    *,
    server_cpus: str | None = None,
    client_cpus: str | None = None,
    every: float = 5.0,
) -> dict:
    """One measurement with this interpreter's implementation.

    ``server_cpus``/``client_cpus`` pin the server and the writer processes (taskset lists,
    e.g. "0" and "1"; the sampler and the probe are not pinned); ``every`` is the period of
    the server's RSS/threads/CPU timeline, in seconds.
    """
    reverb, version = import_impl(impl)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    me = [sys.executable, __file__, "--impl", impl]
    server = subprocess.Popen(
        [
            *_pinned(server_cpus),
            sys.executable,
            str(HERE / "servers.py"),
            "--impl",
            impl,
            "--serve",
            json.dumps(TABLE),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    port = int(readline(server, 180, "server start").split()[1])
    # Each probe is a fresh client (a new channel), but this process's first one would also
    # pay for importing gRPC (Ostinato imports it on first use; dm-reverb at import), which is
    # not the server's answer time: one call before the writers start.
    _client(reverb, impl, port).server_info(timeout=30)
    per = [writers // processes + (i < writers % processes) for i in range(processes)]
    kids = [
        subprocess.Popen(
            _pinned(client_cpus)
            + me
            + ["--writer-child", str(port), str(n), str(period), str(seconds)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
        )
        for n in per
        if n
    ]
    sampler = subprocess.Popen(
        me + ["--sampler-child", str(port), str(seconds)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    try:
        for k in [*kids, sampler]:
            readline(k, 300, "child start")
        for k in [*kids, sampler]:
            k.stdin.write("go\n")
            k.stdin.flush()
        go = time.monotonic()
        probes: list[tuple[float, float]] = []  # (seconds after go, latency)
        timeline: list[dict] = []
        unanswered = 0
        stop = threading.Event()

        def probe() -> None:
            nonlocal unanswered
            while not stop.is_set():
                t0 = time.monotonic()
                try:
                    c = _client(reverb, impl, port)
                    c.server_info(timeout=10)
                    probes.append((t0 - go, time.monotonic() - t0))
                except Exception:  # noqa: BLE001 - no answer within 10 s
                    unanswered += 1
                stop.wait(0.2)

        def monitor() -> None:
            while not stop.wait(every):
                st = _proc_status(server.pid)
                timeline.append(
                    {
                        "t": round(time.monotonic() - go, 1),
                        "rss_mb": (st.get("VmRSS") or 0) // 1024,
                        "threads": st.get("Threads"),
                        "cpu_s": _cpu_seconds(server.pid),
                    }
                )

        threads = [threading.Thread(target=f, daemon=True) for f in (probe, monitor)]
        for t in threads:
            t.start()
        results = [json.loads(readline(k, seconds + 240, "writer end")) for k in kids]
        stop.set()
        for t in threads:
            t.join(15)
        sampled = json.loads(readline(sampler, 120, "sampler end"))
        samples = sampled["latencies"]
        status = _proc_status(server.pid)
        server_cpu = _cpu_seconds(server.pid)
        info = _client(reverb, impl, port).server_info()["t"]
        size = info.current_size
        # Items the table took in (not its size: a long run outgrows max_size and evicts).
        inserted = int(info.rate_limiter_info.insert_stats.completed)
    finally:
        for k in [*kids, sampler]:
            if k.poll() is None:
                k.kill()
        stop_child(server)
    elapsed = max(r["elapsed"] for r in results)
    paced = writers / period
    lat = [x for _, x in probes]
    settled = [x for t, x in probes if t >= 1.0]  # after the start-up burst of stream opens
    return {
        "impl": impl,
        "version": version,
        "writers": writers,
        "processes": processes,
        "period": period,
        "seconds": seconds,
        "server_cpus": server_cpus,
        "client_cpus": client_cpus,
        "paced_per_s": paced,
        "created_per_s": sum(r["created"] for r in results) / elapsed,
        "stored_per_s": min(inserted, sum(r["created"] for r in results)) / elapsed,
        "stored": inserted,
        "table_size": size,
        "writer_errors": sum(r["errors"] for r in results),
        "probe_p50": _pct(lat, 0.5),
        "probe_p99": _pct(lat, 0.99),
        "probe_max": max(lat, default=None),
        "probes": len(lat),
        "probe_p99_after_1s": _pct(settled, 0.99),
        "probes_unanswered": unanswered,
        "probe_series": [(round(t, 2), round(x * 1000, 1)) for t, x in probes],
        "sample_p50": _pct(samples, 0.5),
        "sample_p99": _pct(samples, 0.99),
        "samples": len(samples),
        "sample_error": sampled.get("error"),
        "server_cpu_s": server_cpu,
        "writers_cpu_s": sum(r.get("cpu", 0) for r in results),
        "server_threads": status.get("Threads"),
        "server_rss_mb": (status.get("VmRSS") or 0) // 1024,
        "timeline": timeline,
    }


def _ms(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 1000:.0f} ms"


def _num(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1f}"


def table(rows: list[dict]) -> str:
    out = [
        "| impl | writers / processes | CPUs: server / clients | items/s stored (of paced) "
        "| server_info p50 / p99 / max | p99 after 1 s | unanswered | sample p50 / p99 "
        "| server threads | RSS end / peak | CPU s: server / writers | writer errors |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        peak = max([x["rss_mb"] for x in r.get("timeline", [])] + [r["server_rss_mb"]])
        out.append(
            f"| {r['impl']} {r['version']} | {r['writers']} / {r['processes']} | "
            f"{r.get('server_cpus') or 'any'} / {r.get('client_cpus') or 'any'} | "
            f"{r['stored_per_s']:.0f} of {r['paced_per_s']:.0f} "
            f"({100 * r['stored_per_s'] / r['paced_per_s']:.0f}%) | "
            f"{_ms(r['probe_p50'])} / {_ms(r['probe_p99'])} / {_ms(r['probe_max'])} | "
            f"{_ms(r.get('probe_p99_after_1s'))} | "
            f"{r['probes_unanswered']} | {_ms(r['sample_p50'])} / {_ms(r['sample_p99'])} | "
            f"{r['server_threads']} | {r['server_rss_mb']} / {peak} MB | "
            f"{_num(r.get('server_cpu_s'))} / {_num(r.get('writers_cpu_s'))} | "
            f"{r['writer_errors']} |"
        )
    return "\n".join(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--impl", default="ostinato", choices=["ostinato", "reverb"])
    p.add_argument("--compare", action="store_true", help="also dm-reverb, alternated")
    p.add_argument("--writers", default="32,128,256", help="writer counts, comma-separated")
    p.add_argument("--processes", type=int, default=8, help="writer processes (at most)")
    p.add_argument("--period", type=float, default=0.2, help="seconds between a writer's items")
    p.add_argument("--seconds", type=float, default=10.0, help="length of each run")
    p.add_argument("--repeat", type=int, default=1, help="runs per point (alternated)")
    p.add_argument(
        "--server-cpus",
        default=None,
        help="pin the server process to these CPUs (taskset list, e.g. 0)",
    )
    p.add_argument(
        "--client-cpus", default=None, help="pin the writer processes to these CPUs (e.g. 1)"
    )
    p.add_argument(
        "--every",
        type=float,
        default=5.0,
        help="seconds between samples of the server's RSS, threads and CPU",
    )
    p.add_argument(
        "--out",
        default="actor_scale",
        help="results go to benchmarks/results_OUT.{json,md} (default actor_scale)",
    )
    p.add_argument("--one", action="store_true", help="one run, JSON on stdout (internal)")
    p.add_argument("--writer-child", nargs=4, default=None, help=argparse.SUPPRESS)
    p.add_argument("--sampler-child", nargs=2, default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if not args.out or "/" in args.out or args.out.startswith("."):
        # Checked now, not after minutes of runs: the name goes into results_OUT.{json,md}.
        p.error(f"--out {args.out!r}: a name (results_OUT.json goes beside this file), not a path")
    if args.writer_child:
        port, n, period, seconds = args.writer_child
        writer_child(args.impl, int(port), int(n), float(period), float(seconds))
        return
    if args.sampler_child:
        sampler_child(args.impl, int(args.sampler_child[0]), float(args.sampler_child[1]))
        return
    counts = [int(x) for x in args.writers.split(",")]
    if args.one:
        print(
            json.dumps(
                one_run(
                    args.impl,
                    counts[0],
                    args.processes,
                    args.period,
                    args.seconds,
                    server_cpus=args.server_cpus,
                    client_cpus=args.client_cpus,
                    every=args.every,
                )
            )
        )
        return
    rows = []
    impls = ["ostinato", "reverb"] if args.compare else [args.impl]
    pins = [
        f"--{k}={v}"
        for k, v in (("server-cpus", args.server_cpus), ("client-cpus", args.client_cpus))
        if v
    ]
    for n in counts:
        procs = max(1, min(args.processes, n))
        for _ in range(args.repeat):
            for impl in impls:
                py = reverb_python() if impl == "reverb" else sys.executable
                cmd = [
                    py,
                    __file__,
                    "--impl",
                    impl,
                    "--one",
                    "--writers",
                    str(n),
                    "--processes",
                    str(procs),
                    "--period",
                    str(args.period),
                    "--seconds",
                    str(args.seconds),
                    "--every",
                    str(args.every),
                    *pins,
                ]
                print("$", " ".join(cmd), file=sys.stderr, flush=True)
                out = subprocess.run(cmd, capture_output=True, text=True)
                lines = [x for x in out.stdout.splitlines() if x.startswith("{")]
                if out.returncode or not lines:
                    print(out.stderr[-3000:], file=sys.stderr)
                    continue
                rows.append(json.loads(lines[-1]))
                print(table(rows[-1:]).splitlines()[-1], file=sys.stderr, flush=True)
    md = table(rows)
    (HERE / f"results_{args.out}.json").write_text(json.dumps(rows, indent=1))
    (HERE / f"results_{args.out}.md").write_text(md + "\n")
    print(md)


if __name__ == "__main__":
    main()
