"""Short garbage-collector pauses in a process that exists to serve tables.

CPython starts a *full* collection each time the objects that survived earlier ones have grown
by a quarter, and each one visits every object the collector tracks. Tables keep their items'
trajectories untracked (:mod:`ostinato.core.untrack`), but a server process still holds
tracked objects per chunk and per stream. Measured (``benchmarks/gc_pauses.py``: 1.5 million
W1 items inserted over gRPC into a server process): before the items were untracked, 17 full
collections took 1.7 s of the server's time, the longest 245 ms, and ``server_info`` answered
in 100 ms at p99; with them untracked, 35 took 1.1 s, the longest 63 ms, p99 53 ms.

:func:`keep_gc_pauses_short` freezes (``gc.freeze()``) whatever survives each full
collection. Frozen objects are not visited again, so the next full collection looks only at
what arrived since: in the same runs, 188 ms in all, the longest 19 ms, ``server_info`` p99
33 ms, and inserts 11% faster (items tracked); 34 ms, the longest 7 ms, p99 27 ms, inserts 8%
faster (items untracked).

What freezing changes, and what it does not:

* Frozen objects are still freed the moment nothing refers to them (reference counting):
  evicted items and their chunks go as before; they form no reference cycles.
* *Cycles* among frozen objects that become garbage later (a closed stream's state, say) are
  not collected while frozen. Every ``unfreeze_every`` seconds (default 600) everything is
  unfrozen, so the next full collection visits all of it once -- one long pause per interval
  instead of one per quarter's growth -- frees those cycles and freezes the rest again.

It is process-wide: ``ostinato-server`` (``--no-gc-freeze`` turns it off), Ray shard
processes and ``Server.wait()`` with no timeout (the end of a dedicated replay-server script;
``OSTINATO_GC_FREEZE=0`` turns it off) use it. An embedded server that the program does not
wait on for good does not, since it would freeze the program's other objects too.
"""

from __future__ import annotations

import gc
import threading
import time
from typing import Any

from ostinato.validate import positive_number

#: Seconds between unfreezes (then one full collection visits every object once).
DEFAULT_UNFREEZE_EVERY = 600.0

_lock = threading.Lock()
_active: GcPauses | None = None


class GcPauses:
    """The policy installed by :func:`keep_gc_pauses_short`; :meth:`stats` reports the full
    collections seen since, :meth:`stop` removes it (and unfreezes)."""

    def __init__(self, unfreeze_every: float | None) -> None:
        self.unfreeze_every = unfreeze_every
        self._full = 0
        self._seconds = 0.0
        self._longest = 0.0
        self._unfreezes = 0
        self._started: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            self._started = time.perf_counter()
            return
        if self._started is not None:
            took = time.perf_counter() - self._started
            self._started = None
            self._full += 1
            self._seconds += took
            self._longest = max(self._longest, took)
        # The collection is over: what survived it is long-lived; later ones skip it.
        gc.freeze()

    def _unfreeze_loop(self) -> None:
        assert self.unfreeze_every is not None
        while not self._stop.wait(self.unfreeze_every):
            gc.unfreeze()
            self._unfreezes += 1

    def stats(self) -> dict[str, float]:
        """``full_collections``, their ``full_seconds`` in all, the ``longest_seconds``, the
        ``unfreezes`` so far and the objects ``frozen`` now."""
        return {
            "full_collections": self._full,
            "full_seconds": self._seconds,
            "longest_seconds": self._longest,
            "unfreezes": self._unfreezes,
            "frozen": gc.get_freeze_count(),
        }

    def stop(self) -> None:
        """Removes the policy and unfreezes every object. Idempotent."""
        global _active
        with _lock:
            if self._callback in gc.callbacks:
                gc.callbacks.remove(self._callback)
            self._stop.set()
            if _active is self:
                _active = None
        gc.unfreeze()


def active() -> GcPauses | None:
    """The policy installed in this process, if any."""
    return _active


def keep_gc_pauses_short(unfreeze_every: float | None = DEFAULT_UNFREEZE_EVERY) -> GcPauses:
    """Freezes what survives each full garbage collection of this process (see the module
    docstring); returns the policy (the one already installed, if any).

    Args:
      unfreeze_every: seconds between unfreezes, after which one full collection visits
        every object again and frees cycles that became garbage while frozen; ``None``
        never unfreezes.

    Raises:
      ValueError: ``unfreeze_every`` is not a positive number.
    """
    unfreeze_every = positive_number("unfreeze_every", unfreeze_every, none_ok=True)
    global _active
    with _lock:
        if _active is not None:
            return _active
        policy = GcPauses(unfreeze_every)
        gc.collect()  # what exists now (imports, the tables' set-up) is long-lived
        gc.freeze()
        gc.callbacks.append(policy._callback)
        if unfreeze_every is not None:
            policy._thread = threading.Thread(
                target=policy._unfreeze_loop, name="ostinato-gc-unfreeze", daemon=True
            )
            policy._thread.start()
        _active = policy
        return policy
