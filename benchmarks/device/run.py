"""Runs every implementation (one process each) and writes a markdown table.

Usage (from the repository root)::

    python benchmarks/device/run.py --peer-python /path/to/venv/bin/python

``--peer-python`` is an interpreter that has flashbax, torchrl and cpprb (they are not
project dependencies; a separate venv keeps them from replacing the project's torch).
Writes ``benchmarks/device/results/<device>.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import CAPACITY, LINES, SAMPLE_BATCH  # noqa: E402

IMPLS = {
    "ostinato (torch)": ("bench_ostinato.py", ["--backend", "torch"], False),
    "ostinato (jax)": ("bench_ostinato.py", ["--backend", "jax"], False),
    "flashbax": ("bench_flashbax.py", [], True),
    "torchrl": ("bench_torchrl.py", [], True),
    "cpprb": ("bench_cpprb.py", [], True),
}
PEERS = ("flashbax", "torchrl", "cpprb")


def cpu_name() -> str:
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def versions(python: str) -> dict[str, str]:
    code = (
        "import importlib.metadata as m, json\n"
        "out = {}\n"
        "for p in ('torch', 'jax', 'flashbax', 'torchrl', 'cpprb', 'numpy'):\n"
        "    try: out[p] = m.version(p)\n"
        "    except m.PackageNotFoundError: pass\n"
        "print(json.dumps(out))"
    )
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def fmt(ms: float | None) -> str:
    if ms is None:
        return "n/a"
    return f"{ms * 1000:.1f} µs" if ms < 1 else f"{ms:.2f} ms"


def table(results: list[dict], dtypes: list[str]) -> str:
    impls = [i for i in IMPLS if any(r["impl"] == i for r in results)]
    head = "| line | obs | " + " | ".join(impls) + " | best peer | ostinato (torch) / best peer |"
    rows = [head, "|" + "---|" * (len(impls) + 4)]
    for dtype in dtypes:
        for key, label in LINES.items():
            ms = {
                r["impl"]: r["ms"]
                for r in results
                if r["line"] == key and r.get("obs_dtype") == dtype
            }
            if not ms:
                continue
            peers = {p: ms[p] for p in PEERS if p in ms}
            best = min(peers, key=peers.get) if peers else None
            ours = ms.get("ostinato (torch)")
            ratio = f"{ours / peers[best]:.2f}×" if best and ours else "n/a"
            cells = [fmt(ms.get(i)) for i in impls]
            rows.append(
                f"| {label} | {dtype} | " + " | ".join(cells) + f" | {best or 'n/a'} | {ratio} |"
            )
    return "\n".join(rows)


def run_bounded(cmd: list[str], timeout: float, failures: list[str], what: str) -> list[dict]:
    """Runs one benchmark process for at most ``timeout`` seconds; returns its JSON lines
    (also those printed before a timeout) and records a failure with its reason."""
    print("$", " ".join(cmd), file=sys.stderr, flush=True)
    env = dict(
        os.environ, RL_WARNINGS="0", PYTHONWARNINGS="ignore", XLA_PYTHON_CLIENT_PREALLOCATE="false"
    )
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
        stdout, stderr, code = out.stdout, out.stderr, out.returncode
    except subprocess.TimeoutExpired as exc:

        def text(b: bytes | str | None) -> str:
            return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")

        stdout, stderr, code = text(exc.stdout), text(exc.stderr), None
    rows = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    if code != 0:
        why = f"timed out after {timeout:.0f} s" if code is None else f"exit {code}"
        tail = stderr.strip().splitlines()[-1:] or [""]
        failures.append(f"{what}: {why} ({len(rows)} lines done) {tail[0][:300]}")
        print(stderr[-3000:], file=sys.stderr)
    return rows


def speedup(base: float, ours: float) -> str:
    """'2.56× faster' or '2.92× slower': the ratio always at least 1, with its direction."""
    if ours <= base:
        return f"{base / ours:.2f}× faster"
    return f"{ours / base:.2f}× slower"


def atari_table(results: list[dict]) -> str:
    """The bench_atari.py lines: one row per implementation."""
    rows = [r for r in results if r.get("bench") == "atari"]
    if not rows:
        return ""
    lines = ["per_step", "per_sample", "per_update", "per_insert1"]
    impls = list(dict.fromkeys(r["impl"] for r in rows))
    naive = next(
        (r["ms"] for r in rows if r["impl"] == "naive-torch" and r["line"] == "per_step"), None
    )
    out = [
        "| impl | " + " | ".join(lines) + " | step vs naive torch |",
        "|---|" + "---|" * (len(lines) + 1),
    ]
    for impl in impls:
        ms = {r["line"]: r["ms"] for r in rows if r["impl"] == impl}
        ratio = speedup(naive, ms["per_step"]) if naive and "per_step" in ms else "n/a"
        out.append(f"| {impl} | " + " | ".join(fmt(ms.get(k)) for k in lines) + f" | {ratio} |")
    return "Atari scale, 1,000,000 × (84, 84) uint8, batch 256\n\n" + "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--peer-python", default=sys.executable)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--dtypes", default="uint8,float32")
    parser.add_argument("--impls", default=",".join(IMPLS))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", default=str(HERE / "results"))
    parser.add_argument(
        "--timeout",
        type=float,
        default=150,
        help="seconds each benchmark process may run before it is stopped",
    )
    parser.add_argument(
        "--atari", default="", help="comma-separated bench_atari.py impls to run as well"
    )
    parser.add_argument("--name", default=None, help="results file name (default: device)")
    parser.add_argument(
        "--budget",
        type=float,
        default=3600,
        help="seconds for all processes together; later ones are skipped",
    )
    args = parser.parse_args()
    dtypes = args.dtypes.split(",")
    results: list[dict] = []
    failures: list[str] = []
    load = {"before": os.getloadavg()}
    started = time.time()
    # The uniform and the prioritized lines run in separate processes, so that neither
    # buffer (6 GiB each with float32 observations) shares memory with the other.
    groups = ("sample,insert1,insert128", "per_step,per_insert1,per_insert128")
    jobs: list[tuple[list[str], str]] = []
    for dtype in dtypes:
        for impl in args.impls.split(","):
            for lines in groups:
                script, extra, peer = IMPLS[impl]
                python = args.peer_python if peer else sys.executable
                cmd = [
                    python,
                    str(HERE / script),
                    *extra,
                    "--obs-dtype",
                    dtype,
                    "--lines",
                    lines,
                    "--repeats",
                    str(args.repeats),
                    "--device",
                    args.device,
                ]
                jobs.append((cmd, f"{impl} {lines}"))
    for impl in [i for i in args.atari.split(",") if i]:
        python = args.peer_python if impl == "flashbax" else sys.executable
        cmd = [python, str(HERE / "bench_atari.py"), "--impl", impl, "--repeats", str(args.repeats)]
        jobs.append((cmd, f"atari {impl}"))
    # Ours first, then the peers, alternating setups, so that a budget cut loses peers' lines.
    jobs.sort(key=lambda job: 0 if "ostinato" in job[1] or "naive" in job[1] else 1)
    deadline = started + args.budget
    for cmd, what in jobs:
        left = deadline - time.time()
        if left < 10:
            failures.append(f"{what}: not run, the {args.budget:.0f} s budget was spent")
            continue
        results.extend(run_bounded(cmd, min(args.timeout, left), failures, what))
    load["after"] = os.getloadavg()
    meta = {
        "device": args.device,
        "cpu": cpu_name(),
        "cores": os.cpu_count(),
        "setup": f"capacity {CAPACITY:,}, sample batch {SAMPLE_BATCH}, obs (32,32,3) "
        "+ action int32 + reward float32",
        "repeats": args.repeats,
        "versions": {"project": versions(sys.executable), "peers": versions(args.peer_python)},
        "loadavg": load,
        "seconds": round(time.time() - started),
        "failures": failures,
    }
    out_dir = pathlib.Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    name = args.name or args.device
    (out_dir / f"{name}.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    md = table(results, dtypes) + "\n\n" + atari_table(results)
    if failures:
        md += "\n\nDid not finish:\n" + "\n".join(f"* {f}" for f in failures)
    (out_dir / f"{name}.md").write_text(md + "\n")
    print(json.dumps(meta, indent=1))
    print(md)


if __name__ == "__main__":
    main()
