"""Tables and data shared by the dataset tests (embedded and networked)."""

from __future__ import annotations

import numpy as np

import ostinato as reverb

#: Tables for ``serve(TABLES_CODE)``. ``uniform`` has a signature of 3-step trajectories;
#: ``queue`` keeps order and deletes what it gives; ``nosig`` has no signature; ``empty``
#: is never written to; ``steps`` holds single steps described per step (legacy style).
TABLES_CODE = """
import numpy as np
import ostinato as reverb
SIG = {"obs": reverb.TensorSpec([3, 4], np.float32), "act": reverb.TensorSpec([3], np.int32)}
def _uniform(name, signature=None):
    return reverb.Table(name=name, sampler=reverb.selectors.Uniform(),
                        remover=reverb.selectors.Fifo(), max_size=10_000,
                        rate_limiter=reverb.rate_limiters.MinSize(1), signature=signature)
TABLES = [
    _uniform("uniform", SIG),
    _uniform("nosig"),
    _uniform("empty", SIG),
    _uniform("varlen"),
    reverb.Table.queue("queue", 1000, signature={"x": reverb.TensorSpec([], np.int64)}),
    reverb.Table(name="fifo_keep", sampler=reverb.selectors.Fifo(),
                 remover=reverb.selectors.Fifo(), max_size=1000,
                 rate_limiter=reverb.rate_limiters.MinSize(1)),
]
"""


def write_trajectories(
    client: reverb.Client, table: str, n: int, length: int = 3, offset: int = 0
) -> None:
    """Writes ``n`` items of ``length`` steps: obs[t] = step id, act[t] = step id."""
    with client.trajectory_writer(num_keep_alive_refs=length) as w:
        for i in range(n + length - 1):
            s = offset + i
            w.append({"obs": np.full(4, s, np.float32), "act": np.int32(s)})
            if i >= length - 1:
                w.create_item(
                    table,
                    1.0,
                    {"obs": w.history["obs"][-length:], "act": w.history["act"][-length:]},
                )
        w.flush()


def write_queue(client: reverb.Client, table: str, values) -> None:
    """Writes one single-step item ``{"x": v}`` per value (squeezed scalar column)."""
    with client.trajectory_writer(num_keep_alive_refs=1) as w:
        for v in values:
            w.append({"x": np.int64(v)})
            w.create_item(table, 1.0, {"x": w.history["x"][-1]})
        w.flush()


def write_varlen(client: reverb.Client, table: str, lengths) -> None:
    """Writes items whose single column has the given lengths (rows of shape [2])."""
    with client.trajectory_writer(num_keep_alive_refs=max(lengths)) as w:
        for ln in lengths:
            for t in range(ln):
                w.append({"v": np.full(2, t, np.float64)})
            w.create_item(table, 1.0, {"v": w.history["v"][-ln:]})
            w.end_episode()
        w.flush()


def table_size(client: reverb.Client, table: str) -> int:
    return client.server_info()[table].current_size


def samples_completed(client: reverb.Client, table: str) -> int:
    return client.server_info()[table].rate_limiter_info.sample_stats.completed
