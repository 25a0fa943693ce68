"""Ports of a :class:`~ostinato.ray.group.ShardGroup`'s shards: checking the ``ports``
argument of :func:`~ostinato.ray.group.start_shards`, and drawing a free port on each shard's
node when none is given."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from ostinato import validate
from ostinato.ray.actor import free_port
from ostinato.validate import is_int


def _port_list(ports: int | Sequence[int] | None, n: int) -> list[int] | None:
    if ports is None:
        return None
    if isinstance(ports, int) and not isinstance(ports, bool):
        out = [ports + i for i in range(n)]
    elif isinstance(ports, Sequence) and not isinstance(ports, str):
        out = list(ports)
        if len(out) != n:
            raise ValueError(f"ports ({ports!r}) must give one port per shard ({n})")
    else:
        raise TypeError(f"ports ({ports!r}) must be None, a first port or a list of ports")
    for p in out:
        if not is_int(p) or not 0 < p <= validate.MAX_PORT:
            raise ValueError(f"ports ({ports!r}): {p!r} is not a port in 1..{validate.MAX_PORT}")
    if len(set(out)) != len(out):
        raise ValueError(f"ports ({ports!r}) must not repeat a port")
    return out


def _probe_ports(n: int, in_bundle: Callable[[int], Any], timeout: float | None) -> list[int]:
    """A free port on each bundle's node, different for bundles on the same node."""
    import ray

    probe = ray.remote(num_cpus=0)(free_port)
    ports: list[int | None] = [None] * n
    taken: dict[str, set[int]] = {}
    todo = list(range(n))
    deadline = None if timeout is None else time.monotonic() + timeout
    while todo:
        avoid = sorted(set().union(*taken.values())) if taken else []
        refs = {i: probe.options(scheduling_strategy=in_bundle(i)).remote(avoid) for i in todo}
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            found = ray.get(list(refs.values()), timeout=left)
        except ray.exceptions.GetTimeoutError:
            raise TimeoutError(
                f"could not find free ports on the shards' nodes within {timeout} s"
            ) from None
        todo = []
        for i, (node, port) in zip(refs, found):
            if port in taken.setdefault(node, set()):
                todo.append(i)  # two shards of one node drew the same port: draw again
            else:
                taken[node].add(port)
                ports[i] = port
    return [p for p in ports if p is not None]
