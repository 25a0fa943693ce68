#!/usr/bin/env python3
"""Embedded-server benchmark: Ostinato vs. DeepMind Reverb, the same user code on both.

    --impl ostinato   ->  ``import ostinato as reverb``
    --impl reverb     ->  ``import reverb``   (needs dm-reverb, see benchmarks/README.md)

Each workload gets its own ``reverb.Server(tables=[...])`` in this process and
``server.localhost_client()``. Workloads (definitions and exact user code in ``workloads.py``
and benchmarks/README.md):

    W1     insert_small, item history[c][-1] (squeezed)           W1t  same, history[c][-1:]
    W1F    W1 into a full table (max_size = steps / 4, filled first): every item evicts one
    W2     insert_sequences, 3 columns, items history[c][-10:]
    W4     client.sample(table, num_samples=256), emit_timesteps=True (default), W1t items
    W4f    same with emit_timesteps=False on W1 items           W4x2 / W4fx2: 2 sampler threads
    W4b    client.sample_batch(table, batch_size=256)                       (Ostinato only)
    W5     sample 256 + mutate_priorities, Prioritized(0.6)
    W5b    sample_batch + update_priorities                                  (Ostinato only)
    MEM    resident bytes per stored W1 item beyond its 40 data bytes, 1,000,000 items
    MEM3   resident bytes / data bytes of stored W3 frames (uint8[84,84,4]), 5,000 frames
    W9r    client.sample(table, 256, emit_timesteps=False) from W9s's items (by --workloads)
    WP     Acme's adders' writes: each W2 step in 2 appends (observation first,
           partial_step=True), 5-step items of 4 columns (by --workloads)
    (W3 and W6 of net_bench.py run here too when named with --workloads.)

Examples:

    python benchmarks/core_bench.py --impl ostinato --repeat 3 --json out.json
    /opt/reverb-venv/bin/python benchmarks/core_bench.py --impl reverb --repeat 3
    python benchmarks/core_bench.py --compare-reverb          # both + comparison table
    python benchmarks/core_bench.py --compare-reverb --quick  # smoke test of everything

The reverb interpreter used by --compare-reverb is $OSTINATO_REVERB_PYTHON
(default /opt/reverb-venv/bin/python).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness
from harness import Target

DEFAULT = [
    "W1",
    "W1t",
    "W1F",
    "W2",
    "W4",
    "W4f",
    "W4x2",
    "W4fx2",
    "W4b",
    "W5",
    "W5b",
    "W9",
    "W9s",
    "MEM",
    "MEM3",
]
ALLOWED = DEFAULT + ["W3", "W3F", "W6", "W9r", "WP"]
SAMPLE_TARGET = Target("ratio", 10.0)
TARGETS = {
    "W1": Target("ratio", 6.0),  # issue 25
    "W1t": Target("ratio", 5.0),
    "W1F": Target("ratio", 6.0),  # W1's target, in a replay buffer's steady state
    "W2": Target("ratio", 6.0),  # issue 25
    **{w: SAMPLE_TARGET for w in ("W4", "W4f", "W4x2", "W4fx2", "W4b", "W5", "W5b")},
    "W9": Target("ratio", 20.0),
    "W9s": Target("ratio", 20.0),
    "MEM": Target("max", 500.0, "≤ 500 B"),
    "MEM3": Target("max", 1.2, "≤ 1.2× data"),
}

BENCH = harness.Bench(
    name="core_bench",
    script=os.path.abspath(__file__),
    mode="embedded",
    default=DEFAULT,
    allowed=ALLOWED,
    targets=TARGETS,
)


def main(argv=None) -> int:
    return harness.main(BENCH, harness.parse_args(BENCH, __doc__.split("\n\n")[0], argv))


if __name__ == "__main__":
    sys.exit(main())
