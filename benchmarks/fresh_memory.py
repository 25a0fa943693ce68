#!/usr/bin/env python3
"""What storing data in fresh memory costs on this machine, whoever stores it.

A server that stores what writers send puts it in memory it did not hold before, and on
Linux the first write to each new 4 KiB page traps into the kernel, which finds a page and
zeroes it. On a small VM that costs far more than copying the data. This script copies
``--mb`` MB of random bytes into a new anonymous mapping, four ways, and prints the time of
the set-up (``madvise``) and of the copy, and the page faults counted:

* plain: the copy faults each page in as it goes;
* ``MADV_POPULATE_WRITE``: every page faulted in by one call first (Linux 5.14+), then copied;
* ``MADV_HUGEPAGE``, with and without populating: 2 MiB pages where transparent huge pages
  are available (``/sys/kernel/mm/transparent_hugepage/enabled`` says ``madvise`` or
  ``always``, and ``AnonHugePages`` in ``/proc/meminfo`` grows).

Networked W3 stores 141 MB per run (5,000 frames of 28,224 bytes): the time printed here is
a floor under any server's time for it, however the bytes arrive::

    python benchmarks/fresh_memory.py --mb 141 --repeat 3
"""

from __future__ import annotations

import argparse
import mmap
import resource
import statistics
import time

import numpy as np

MADV_POPULATE_WRITE = getattr(mmap, "MADV_POPULATE_WRITE", 23)


def once(src: np.ndarray, huge: bool, populate: bool) -> tuple[float, float, int]:
    """(set-up seconds, copy seconds, page faults) of one copy into a new mapping."""
    n = len(src)
    faults0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    t0 = time.perf_counter()
    m = mmap.mmap(-1, n + (2 << 20))
    if huge and hasattr(mmap, "MADV_HUGEPAGE"):
        m.madvise(mmap.MADV_HUGEPAGE)
    if populate:
        try:
            m.madvise(MADV_POPULATE_WRITE)
        except OSError:  # an older kernel: the copy faults the pages in instead
            pass
    t1 = time.perf_counter()
    dst = np.frombuffer(m, dtype=np.uint8, count=n)
    dst[:] = src
    t2 = time.perf_counter()
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults0
    del dst
    m.close()
    return t1 - t0, t2 - t1, faults


def huge_pages_kb() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("AnonHugePages:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=float, default=141.0, help="MB to copy (default 141: W3)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per way, median reported")
    args = ap.parse_args()
    n = int(args.mb * 1e6)
    src = np.random.default_rng(0).integers(0, 256, n, dtype=np.uint8)
    src.copy()  # the source's own pages are in before anything is timed
    kb0 = huge_pages_kb()
    print(f"{args.mb:,.0f} MB into fresh memory, medians of {args.repeat} runs")
    print("| way | set-up ms | copy ms | total ms | faults | µs per fault (total) |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, huge, populate in (
        ("plain", False, False),
        ("MADV_POPULATE_WRITE", False, True),
        ("MADV_HUGEPAGE", True, False),
        ("MADV_HUGEPAGE + POPULATE_WRITE", True, True),
    ):
        runs = [once(src, huge, populate) for _ in range(args.repeat)]
        setup = statistics.median(r[0] for r in runs) * 1e3
        copy = statistics.median(r[1] for r in runs) * 1e3
        faults = int(statistics.median(r[2] for r in runs))
        per = (setup + copy) * 1e3 / faults if faults else float("nan")
        total = setup + copy
        print(f"| {name} | {setup:.1f} | {copy:.1f} | {total:.1f} | {faults:,} | {per:.2f} |")
    kb = huge_pages_kb()
    if kb is not None and kb0 is not None:  # numpy's own big arrays may be in huge pages
        print(f"AnonHugePages: {kb0:,} kB before the runs, {kb:,} kB after")
    # For comparison: the same bytes into memory that is already faulted in.
    dst = np.empty_like(src)
    dst[:] = src
    t0 = time.perf_counter()
    dst[:] = src
    print(f"the same copy into memory already in use: {(time.perf_counter() - t0) * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
