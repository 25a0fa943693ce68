#!/usr/bin/env python3
"""Summarises a py-spy ``--format raw`` profile: top functions per process.

    py-spy record --subprocesses -r 200 -f raw -o prof.txt -- python benchmarks/net_bench.py ...
    python benchmarks/pyspy_summary.py prof.txt --match run_w4 --match ReplayService.sample

Each stack is attributed to its process (the benchmark client or the ``--serve`` server).
``--match S`` keeps only stacks containing S (any of several), which isolates a timed phase
(e.g. ``run_w4`` in the client, ``ReplayService.sample`` in the server). Shown per process:
samples, "self" time (leaf frame) and "total" time (frame anywhere on the stack), as a
percentage of that process's kept samples. Idle threads are not sampled by py-spy unless it
ran with ``--idle``.
"""

from __future__ import annotations

import argparse
import collections
import re


def _short(frame: str) -> str:
    # "func (path/to/file.py:123)" -> "func (file.py:123)"
    m = re.match(r"(.*) \((?:.*/)?([^/]+:\d+)\)$", frame)
    return f"{m.group(1)} ({m.group(2)})" if m else frame


def _func(frame: str) -> str:
    # "func (path/file.py:123)" -> "func (file.py)"  (lines merged)
    m = re.match(r"(.*) \((?:.*/)?([^/]+?):\d+\)$", frame)
    return f"{m.group(1)} ({m.group(2)})" if m else frame


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("raw", help="py-spy raw output (-f raw)")
    p.add_argument(
        "--match",
        action="append",
        default=[],
        help="keep stacks containing this substring (repeatable: any)",
    )
    p.add_argument("--top", type=int, default=15)
    p.add_argument("--lines", action="store_true", help="per source line instead of function")
    args = p.parse_args()

    per_proc: dict[str, list[tuple[list[str], int]]] = collections.defaultdict(list)
    with open(args.raw) as f:
        pending = ""
        for raw_line in f:
            # a process started with ``python -c "<multi-line code>"`` spans several lines
            line = pending + raw_line.rstrip("\n")
            stack, _, count = line.rpartition(" ")
            if not count.isdigit():
                pending = line + " "
                continue
            pending = ""
            frames = stack.split(";")
            procs = [fr for fr in frames if fr.startswith("process ")]
            frames = [fr for fr in frames if not fr.startswith("process ")]
            proc = procs[-1] if procs else "?"
            if "--serve" in proc or "_server.wait()" in proc:
                name = "server process"
            elif "--scale-worker" in proc:
                name = "client process (scale worker)"
            else:
                name = "benchmark (client) process"
            if args.match and not any(m in stack for m in args.match):
                continue
            per_proc[name].append((frames, int(count)))

    fmt = _short if args.lines else _func
    for name, stacks in per_proc.items():
        total = sum(c for _, c in stacks)
        self_c: collections.Counter = collections.Counter()
        incl: collections.Counter = collections.Counter()
        for frames, c in stacks:
            if not frames:
                continue
            self_c[fmt(frames[-1])] += c
            for fr in {fmt(x) for x in frames}:
                incl[fr] += c
        print(
            f"\n== {name}: {total} samples"
            + (f" (stacks matching {args.match})" if args.match else "")
        )
        print(f"  {'self %':>7}  function")
        for fn, c in self_c.most_common(args.top):
            print(f"  {100 * c / total:6.1f}%  {fn}")
        print(f"  {'total %':>7}  function (on the stack)")
        skip = (
            "Thread.",
            "_bootstrap",
            "<module>",
            "main (net_bench",
            "run_impl",
            "_worker (",
            "_WorkItem.run",
            "Thread.run",
        )
        shown = 0
        for fn, c in incl.most_common():
            if fn.startswith(skip) or any(s in fn for s in skip):
                continue
            print(f"  {100 * c / total:6.1f}%  {fn}")
            shown += 1
            if shown >= args.top:
                break
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
