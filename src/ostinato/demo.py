"""A small actor/learner demo on an embedded server.

Several actor threads play a toy environment and write 3-step trajectories into a prioritized
table; a learner samples batches, "learns" (computes a fake TD error) and updates priorities.
Throughput is printed once a second and summarised at the end.

Run it with ``ostinato-demo`` or ``python -m ostinato.demo --seconds 10 --actors 4``.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

import numpy as np

import ostinato as reverb

OBS_DIM = 16
TRAJ_LEN = 3


class _Counter:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.value = 0

    def add(self, n: int) -> None:
        with self._lock:
            self.value += n


# Errors a call raises because the server (or its table) stopped under it. At shutdown, a thread
# still blocked in such a call exits quietly; any other error, or one of these while the server
# is still running, is reported.
_SHUTDOWN_ERRORS = (reverb.errors.CancelledError, reverb.errors.UnavailableError)


def _caused_by_shutdown(exc: BaseException | None) -> bool:
    """True if ``exc``, or an error it was raised from, is a "server/table stopped" error.

    A trajectory writer reports a failed delivery as ``FailedPreconditionError`` raised from
    the transport's error, so the cause chain is followed.
    """
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, _SHUTDOWN_ERRORS):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


class _Worker(threading.Thread):
    """A daemon thread that runs ``target`` and keeps its error instead of printing a traceback.

    ``server_stopping`` is set just before the server stops: an error caused by that is
    expected (the thread was still blocked in a call) and dropped; any other error is printed
    with its traceback and makes the demo exit non-zero.
    """

    def __init__(
        self,
        name: str,
        target: Callable[..., None],
        args: tuple[Any, ...],
        server_stopping: threading.Event,
    ) -> None:
        super().__init__(name=name, daemon=True)
        self._fn, self._fn_args = target, args
        self._server_stopping = server_stopping
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._fn(*self._fn_args)
        except BaseException as e:  # noqa: BLE001 - printed here, counted by main()
            if self._server_stopping.is_set() and _caused_by_shutdown(e):
                return
            self.error = e
            print(f"ostinato-demo: {self.name} failed:", file=sys.stderr, flush=True)
            traceback.print_exception(type(e), e, e.__traceback__, file=sys.stderr)
            sys.stderr.flush()


def _join_all(threads: list[_Worker], timeout: float) -> list[_Worker]:
    """Joins ``threads`` within ``timeout`` seconds in all; returns those still running."""
    deadline = time.monotonic() + timeout
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    return [t for t in threads if t.is_alive()]


def _actor(
    client: reverb.Client,
    seed: int,
    stop: threading.Event,
    steps: _Counter,
    items: _Counter,
    episode_len: int = 200,
) -> None:
    rng = np.random.default_rng(seed)
    with client.trajectory_writer(num_keep_alive_refs=TRAJ_LEN) as writer:
        while not stop.is_set():
            obs = rng.standard_normal(OBS_DIM).astype(np.float32)
            for t in range(episode_len):
                action = np.int32(rng.integers(4))
                reward = np.float32(rng.standard_normal())
                writer.append({"obs": obs, "action": action, "reward": reward})
                obs = (obs * 0.9 + rng.standard_normal(OBS_DIM) * 0.1).astype(np.float32)
                if writer.episode_steps >= TRAJ_LEN:
                    h = writer.history
                    writer.create_item(
                        "replay",
                        priority=1.0,
                        trajectory={
                            "obs": h["obs"][-TRAJ_LEN:],
                            "action": h["action"][-TRAJ_LEN:],
                            "reward": h["reward"][-TRAJ_LEN:],
                        },
                    )
                    items.add(1)
                steps.add(1)
                if stop.is_set():
                    break
                if t % 50 == 49:
                    # Keep at most 50 items in flight: bounded memory when the learner is slow.
                    try:
                        writer.flush(block_until_num_items=50, timeout_ms=1000)
                    except reverb.DeadlineExceededError:
                        pass
            writer.end_episode(timeout_ms=5000)
        writer.flush(timeout_ms=5000)


def _learner(
    client: reverb.Client,
    batch_size: int,
    stop: threading.Event,
    sampled: _Counter,
    updates: _Counter,
) -> None:
    while not stop.is_set():
        try:
            batch = client.sample_batch("replay", batch_size, timeout=0.5)
        except reverb.errors.RateLimiterTimeout:
            continue
        rewards = batch.data["reward"]
        td_error = np.abs(rewards.sum(axis=1)) + 1e-3  # stand-in for a real TD error
        client.update_priorities("replay", batch.info.key, td_error)
        sampled.add(len(batch.info.key))
        updates.add(1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="how long to run (default 10)")
    parser.add_argument("--actors", type=int, default=4, help="actor threads (default 4)")
    parser.add_argument("--batch-size", type=int, default=256, help="learner batch size")
    parser.add_argument(
        "--samples-per-insert",
        type=float,
        default=4.0,
        help="SampleToInsertRatio target (default 4)",
    )
    args = parser.parse_args(argv)
    if args.seconds <= 0 or args.actors < 1 or args.batch_size < 1:
        parser.error("--seconds, --actors and --batch-size must be positive")

    table = reverb.Table(
        name="replay",
        sampler=reverb.selectors.Prioritized(priority_exponent=0.6),
        remover=reverb.selectors.Fifo(),
        max_size=100_000,
        rate_limiter=reverb.rate_limiters.SampleToInsertRatio(
            samples_per_insert=args.samples_per_insert,
            min_size_to_sample=1_000,
            error_buffer=max(1000.0, 10 * args.batch_size * args.samples_per_insert),
        ),
        signature={
            "obs": reverb.TensorSpec([TRAJ_LEN, OBS_DIM], np.float32),
            "action": reverb.TensorSpec([TRAJ_LEN], np.int32),
            "reward": reverb.TensorSpec([TRAJ_LEN], np.float32),
        },
    )
    actors_stop, learner_stop, server_stopping = (
        threading.Event(),
        threading.Event(),
        threading.Event(),
    )
    steps, items, sampled, updates = _Counter(), _Counter(), _Counter(), _Counter()
    interrupted = False
    with reverb.Server([table]) as server:
        client = server.localhost_client()
        print(
            f"Ostinato {reverb.__version__} demo: embedded server on port {server.port}, "
            f"{args.actors} actors, 1 learner (batch {args.batch_size}), {args.seconds:g} s"
        )
        actors = [
            _Worker(f"actor {i}", _actor, (client, i, actors_stop, steps, items), server_stopping)
            for i in range(args.actors)
        ]
        learner = _Worker(
            "learner",
            _learner,
            (client, args.batch_size, learner_stop, sampled, updates),
            server_stopping,
        )
        start = time.perf_counter()
        for t in [*actors, learner]:
            t.start()
        last = (start, 0, 0)
        try:
            while (now := time.perf_counter()) - start < args.seconds:
                time.sleep(min(1.0, args.seconds - (now - start)))
                now = time.perf_counter()
                dt = now - last[0]
                print(
                    f"  t={now - start:5.1f}s  items/s {(items.value - last[1]) / dt:>9,.0f}  "
                    f"samples/s {(sampled.value - last[2]) / dt:>10,.0f}  "
                    f"table size {table.size:>7,}",
                    flush=True,
                )
                last = (now, items.value, sampled.value)
        except KeyboardInterrupt:
            interrupted = True
            print("Interrupted; stopping.", flush=True)
        # Orderly shutdown. Actors first, while the learner still samples: an actor's last
        # items may be waiting for the rate limiter, which only sampling lets through. Then
        # the learner (its sample calls time out every 0.5 s). Then the server; a thread still
        # blocked in a call after its bounded join wakes with an error there and exits quietly.
        actors_stop.set()
        stuck = _join_all(actors, timeout=10)
        learner_stop.set()
        stuck += _join_all([learner], timeout=5)
        elapsed = time.perf_counter() - start
        server_stopping.set()
        server.stop()
        stuck = _join_all(stuck, timeout=5)
    if stuck:
        print(
            f"ostinato-demo: {', '.join(t.name for t in stuck)} did not stop in time.",
            file=sys.stderr,
        )
    print(
        f"Done: {steps.value:,} steps, {items.value:,} items written "
        f"({items.value / elapsed:,.0f}/s); {sampled.value:,} items sampled in "
        f"{updates.value:,} batches ({sampled.value / elapsed:,.0f}/s) with priority updates."
    )
    failed = [t for t in [*actors, learner] if t.error is not None]
    if failed:
        print(f"ostinato-demo: {len(failed)} thread(s) failed (tracebacks above).", file=sys.stderr)
        return 1
    return 130 if interrupted else 0


if __name__ == "__main__":
    raise SystemExit(main())
