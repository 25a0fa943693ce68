"""A small actor/learner demo on an embedded server.

Several actor threads play a toy environment and write 3-step trajectories into a prioritized
table; a learner samples batches, "learns" (computes a fake TD error) and updates priorities.
Throughput is printed once a second and summarised at the end.

Run it with ``ostinato-demo`` or ``python -m ostinato.demo --seconds 10 --actors 4``.
"""

from __future__ import annotations

import argparse
import threading
import time

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


def _actor(client: reverb.Client, seed: int, stop: threading.Event, steps: _Counter,
           items: _Counter, episode_len: int = 200) -> None:
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
                    writer.create_item("replay", priority=1.0, trajectory={
                        "obs": h["obs"][-TRAJ_LEN:],
                        "action": h["action"][-TRAJ_LEN:],
                        "reward": h["reward"][-TRAJ_LEN:],
                    })
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


def _learner(client: reverb.Client, batch_size: int, stop: threading.Event, sampled: _Counter,
             updates: _Counter) -> None:
    while not stop.is_set():
        try:
            batch = client.sample_batch("replay", batch_size, timeout=0.5)
        except reverb.errors.RateLimiterTimeout:
            continue
        except reverb.errors.CancelledError:
            return
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
    parser.add_argument("--samples-per-insert", type=float, default=4.0,
                        help="SampleToInsertRatio target (default 4)")
    args = parser.parse_args(argv)
    if args.seconds <= 0 or args.actors < 1 or args.batch_size < 1:
        parser.error("--seconds, --actors and --batch-size must be positive")

    table = reverb.Table(
        name="replay",
        sampler=reverb.selectors.Prioritized(priority_exponent=0.6),
        remover=reverb.selectors.Fifo(),
        max_size=100_000,
        rate_limiter=reverb.rate_limiters.SampleToInsertRatio(
            samples_per_insert=args.samples_per_insert, min_size_to_sample=1_000,
            error_buffer=max(1000.0, 10 * args.batch_size * args.samples_per_insert)),
        signature={
            "obs": reverb.TensorSpec([TRAJ_LEN, OBS_DIM], np.float32),
            "action": reverb.TensorSpec([TRAJ_LEN], np.int32),
            "reward": reverb.TensorSpec([TRAJ_LEN], np.float32),
        },
    )
    stop = threading.Event()
    steps, items, sampled, updates = _Counter(), _Counter(), _Counter(), _Counter()
    with reverb.Server([table]) as server:
        client = server.localhost_client()
        print(f"Ostinato {reverb.__version__} demo: embedded server on port {server.port}, "
              f"{args.actors} actors, 1 learner (batch {args.batch_size}), {args.seconds:g} s")
        threads = [threading.Thread(target=_actor, args=(client, i, stop, steps, items), daemon=True)
                   for i in range(args.actors)]
        threads.append(threading.Thread(target=_learner, daemon=True,
                                        args=(client, args.batch_size, stop, sampled, updates)))
        start = time.perf_counter()
        for t in threads:
            t.start()
        last = (start, 0, 0)
        while (now := time.perf_counter()) - start < args.seconds:
            time.sleep(min(1.0, args.seconds - (now - start)))
            now = time.perf_counter()
            dt = now - last[0]
            print(f"  t={now - start:5.1f}s  items/s {(items.value - last[1]) / dt:>9,.0f}  "
                  f"samples/s {(sampled.value - last[2]) / dt:>10,.0f}  "
                  f"table size {table.size:>7,}", flush=True)
            last = (now, items.value, sampled.value)
        stop.set()
        server.stop()  # wakes anything still blocked on the rate limiter
        for t in threads:
            t.join(timeout=10)
        elapsed = time.perf_counter() - start
    print(f"Done: {steps.value:,} steps, {items.value:,} items written "
          f"({items.value / elapsed:,.0f}/s); {sampled.value:,} items sampled in "
          f"{updates.value:,} batches ({sampled.value / elapsed:,.0f}/s) with priority updates.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
