#!/usr/bin/env python3
"""What a writer pays per large row (a W3 frame) in its column chunker, on fresh memory and on
memory the allocator hands out again.

A writer copies each frame into the chunk being filled; a chunk of frames is new memory
(``core.pages.empty``). Where the process freed earlier chunks (a networked writer's, once the
server acknowledged them) the allocator gives that memory out again, already in memory; where
it keeps every chunk (an embedded table, or a writer far ahead of its server) each chunk is
memory the process never held, and its pages fault in. This script appends 5,000 uint8[84,84,4]
frames to a ``ColumnChunker`` twice per round: keeping every chunk (fresh memory: rounds keep
theirs too) and dropping each chunk once filled (recycled memory), and reports the median
microseconds per frame of each, for each tree given, alternating trees round by round:

    python benchmarks/frame_chunks.py                          # the installed package
    python benchmarks/frame_chunks.py /tmp/before/src src      # two trees, alternated

Each tree runs in a fresh process per round. Timed (not counted): on a shared VM quote medians.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

FRAMES = 5_000
SHAPE = (84, 84, 4)

_CHILD = """
import sys, time, json
if {src!r}:
    sys.path.insert(0, {src!r})
import numpy as np
from ostinato.writers.chunker import ColumnChunker
frames = np.random.default_rng(8).integers(0, 256, size=({n}, *{shape!r}), dtype=np.uint8)
out = {{"fresh": [], "recycled": []}}
kept = []
for rep in range({reps}):
    c = ColumnChunker(("obs",), 1)
    chunks = []
    t = time.perf_counter()
    for f in frames:
        chunks.append(c.append(f, 0).chunk)
    out["fresh"].append((time.perf_counter() - t) / {n} * 1e6)
    kept.append(chunks)  # never freed: the next repetition needs fresh memory too
    c = ColumnChunker(("obs",), 1)
    t = time.perf_counter()
    for f in frames:
        c.append(f, 0)
    out["recycled"].append((time.perf_counter() - t) / {n} * 1e6)
print(json.dumps(out))
"""


def run_once(src: str, reps: int) -> dict[str, list[float]]:
    code = _CHILD.format(src=src, n=FRAMES, shape=SHAPE, reps=reps)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trees", nargs="*", help="src/ directories (default: the installed package)")
    ap.add_argument("--rounds", type=int, default=3, help="processes per tree, alternated")
    ap.add_argument("--reps", type=int, default=5, help="repetitions per process")
    args = ap.parse_args()
    trees = args.trees or [""]
    got: dict[str, dict[str, list[float]]] = {t: {"fresh": [], "recycled": []} for t in trees}
    for r in range(args.rounds):
        for t in trees:
            res = run_once(t, args.reps)
            for k in res:
                got[t][k] += res[k]
            print(
                f"[round {r + 1}] {t or 'installed'}: fresh {statistics.median(res['fresh']):.2f},"
                f" recycled {statistics.median(res['recycled']):.2f} us/frame",
                flush=True,
            )
    print("| tree | fresh memory, µs/frame (median [min-max]) | recycled memory, µs/frame |")
    print("|---|---:|---:|")
    for t in trees:
        cells = []
        for k in ("fresh", "recycled"):
            v = got[t][k]
            cells.append(f"{statistics.median(v):.2f} [{min(v):.2f}-{max(v):.2f}]")
        print(f"| {t or 'installed'} | {cells[0]} | {cells[1]} |")


if __name__ == "__main__":
    main()
