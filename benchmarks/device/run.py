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
                if r["line"] == key and r["obs_dtype"] == dtype
            }
            if not ms:
                continue
            peers = {p: ms[p] for p in PEERS if p in ms}
            best = min(peers, key=peers.get) if peers else None
            ours = ms.get("ostinato (torch)")
            ratio = f"{ours / peers[best]:.2f}×" if best and ours else "n/a"
            cells = [fmt(ms.get(i)) for i in impls]
            rows.append(
                f"| {label} | {dtype} | " + " | ".join(cells)
                + f" | {best or 'n/a'} | {ratio} |"
            )
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--peer-python", default=sys.executable)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--dtypes", default="uint8,float32")
    parser.add_argument("--impls", default=",".join(IMPLS))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", default=str(HERE / "results"))
    args = parser.parse_args()
    dtypes = args.dtypes.split(",")
    results: list[dict] = []
    load = {"before": os.getloadavg()}
    started = time.time()
    # The uniform and the prioritized lines run in separate processes, so that neither
    # buffer (6 GiB each with float32 observations) shares memory with the other.
    groups = ("sample,insert1,insert128", "per_step,per_insert1,per_insert128")
    for dtype in dtypes:
        for impl in args.impls.split(","):
            for lines in groups:
                script, extra, peer = IMPLS[impl]
                python = args.peer_python if peer else sys.executable
                cmd = [python, str(HERE / script), *extra, "--obs-dtype", dtype, "--lines", lines,
                       "--repeats", str(args.repeats), "--device", args.device]
                print("$", " ".join(cmd), file=sys.stderr, flush=True)
                env = dict(os.environ, RL_WARNINGS="0", PYTHONWARNINGS="ignore")
                out = subprocess.run(cmd, capture_output=True, text=True, env=env)
                if out.returncode != 0:
                    print(out.stderr[-3000:], file=sys.stderr)
                    continue
                for line in out.stdout.splitlines():
                    if line.startswith("{"):
                        results.append(json.loads(line))
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
    }
    out_dir = pathlib.Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{args.device}.json").write_text(json.dumps({"meta": meta, "results": results},
                                                            indent=1))
    md = table(results, dtypes)
    (out_dir / f"{args.device}.md").write_text(md + "\n")
    print(json.dumps(meta, indent=1))
    print(md)


if __name__ == "__main__":
    main()
