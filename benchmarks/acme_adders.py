#!/usr/bin/env python3
"""Acme's own Reverb adders writing into Ostinato and into dm-reverb, side by side.

The user code is Acme 0.4.0's, unmodified: an actor's loop of ``adder.add_first(timestep)``
and ``adder.add(action, timestep)`` over episodes of a synthetic ``dm_env`` environment
(observation ``f32[64]``, action ``int32``, reward and discount ``float32``: W2's step; 100 steps
an episode), into a table on a server in the same process (``server.localhost_client()``, as
``core_bench.py``). Acme's adders write each step in two appends (the observation with
``partial_step=True``, then the rest), end each episode with ``end_episode`` and create:

* ``sequence``: ``SequenceAdder(sequence_length=5, period=1)``: an item of the last 5 steps of
  every column per step (padded at the episode's end);
* ``nstep``: ``NStepTransitionAdder(n_step=3, discount=0.99)``: a transition per step, its
  n-step return and discount computed in the adder (Acme's numpy code, the same on both).

Steps per second of the timed loop (the last episode's ``end_episode`` flushes), medians of
``--repeat`` runs. One implementation per process; ``--compare`` alternates an Ostinato and a
dm-reverb process per round::

    # Ostinato (in .venv-acme, which scripts/test_acme.sh builds)
    .venv-acme/bin/python -m ostinato.as_reverb benchmarks/acme_adders.py
    # both: dm-reverb's interpreter needs dm-acme (--no-deps), dm-env, jax 0.4.30
    python benchmarks/acme_adders.py --compare --ostinato-python .venv-acme/bin/python \\
        --reverb-python /work/reverb-venv/bin/python --rounds 3

dm-reverb 0.14 no longer takes an argument Acme 0.4.0 passes to ``trajectory_writer``
(``get_signature_timeout_ms``); on that side the client drops it (``_Reverb014Client``).
Acme imports ``launchpad``, which has no wheel for these Pythons: ``tests/acme_support`` (put
on ``PYTHONPATH`` by ``--compare``) holds the stand-in ``scripts/test_acme.sh`` uses.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ADDERS = ("sequence", "nstep")
EPISODE = 100  # steps an episode
OBS = 64


def _environment(np, dm_env, env_specs):
    """A ``dm_env`` environment of ``EPISODE``-step episodes of W2-like steps (random data
    drawn once; steps are views of it, as an environment's arrays would be)."""
    rng = np.random.default_rng(0)
    obs = rng.standard_normal((EPISODE + 1, OBS)).astype(np.float32)
    rewards = rng.standard_normal(EPISODE).astype(np.float32)
    one = np.float32(1.0)

    class Env(dm_env.Environment):
        def __init__(self) -> None:
            self._t = 0

        def reset(self):
            self._t = 0
            return dm_env.restart(obs[0])

        def step(self, action):
            self._t += 1
            if self._t < EPISODE:
                return dm_env.transition(rewards[self._t - 1], obs[self._t], discount=one)
            return dm_env.TimeStep(dm_env.StepType.LAST, rewards[-1], one, obs[self._t])

        def observation_spec(self):
            return env_specs.Array((OBS,), np.float32, name="observation")

        def action_spec(self):
            return env_specs.DiscreteArray(4, dtype=np.int32, name="action")

        def reward_spec(self):
            return env_specs.Array((), np.float32, name="reward")

        def discount_spec(self):
            return env_specs.BoundedArray((), np.float32, 0.0, 1.0, name="discount")

    return Env()


class _Reverb014Client:
    """dm-reverb 0.14's client as Acme 0.4.0 calls it: Acme passes
    ``trajectory_writer(..., get_signature_timeout_ms=...)``, an argument of the Reverb it was
    written for that 0.14 no longer takes (it raises ``TypeError``); this drops it. Ostinato
    takes it."""

    def __init__(self, client) -> None:
        self._client = client

    def trajectory_writer(self, *args, get_signature_timeout_ms=None, **kwargs):
        return self._client.trajectory_writer(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._client, name)


def measure(adder_name: str, steps: int, repeat: int) -> list[float]:
    """Steps per second of Acme's ``adder_name`` adder, ``repeat`` runs (a fresh table each)."""
    import dm_env
    import numpy as np
    import reverb
    from acme import specs
    from acme.adders import reverb as adders
    from dm_env import specs as env_specs

    env = _environment(np, dm_env, env_specs)
    spec = specs.make_environment_spec(env)
    if adder_name == "sequence":
        signature = adders.SequenceAdder.signature(spec, sequence_length=5)

        def make(client):
            return adders.SequenceAdder(client, sequence_length=5, period=1)
    else:
        signature = adders.NStepTransitionAdder.signature(spec)

        def make(client):
            return adders.NStepTransitionAdder(client, n_step=3, discount=0.99)

    actions = [np.int32(t % 4) for t in range(EPISODE)]
    episodes = max(1, steps // EPISODE)
    out = []
    for _ in range(repeat + 1):  # the first run warms up, untimed
        table = reverb.Table(
            name=adders.DEFAULT_PRIORITY_TABLE,
            sampler=reverb.selectors.Uniform(),
            remover=reverb.selectors.Fifo(),
            max_size=1_000_000,
            rate_limiter=reverb.rate_limiters.MinSize(1),
            signature=signature,
        )
        server = reverb.Server([table])
        try:
            client = server.localhost_client()
            if not getattr(reverb, "__ostinato__", False):
                client = _Reverb014Client(client)
            adder = make(client)
            t0 = time.perf_counter()
            for _ in range(episodes):
                timestep = env.reset()
                adder.add_first(timestep)
                for action in actions:
                    timestep = env.step(action)
                    adder.add(action, timestep)
            # The last step's add() ended the episode (end_episode flushes its items).
            out.append(episodes * EPISODE / (time.perf_counter() - t0))
            size = client.server_info()[adders.DEFAULT_PRIORITY_TABLE].current_size
            if size < episodes * (EPISODE - 5):
                raise SystemExit(f"{adder_name}: the table holds only {size} items")
            del adder
        finally:
            server.stop()
    return out[1:]


def _child(args: argparse.Namespace) -> int:
    import reverb

    impl = "ostinato" if getattr(reverb, "__ostinato__", False) else "dm-reverb"
    res = {name: measure(name, args.steps, args.repeat) for name in args.adders}
    print("RESULT " + json.dumps({"impl": impl, "steps_per_s": res}), flush=True)
    for name, values in res.items():
        print(
            f"{impl} {name}: {statistics.median(values):,.0f} steps/s "
            f"(runs {', '.join(f'{v:,.0f}' for v in values)})",
            file=sys.stderr,
        )
    return 0


def _run(python: str, ostinato: bool, args: argparse.Namespace) -> dict:
    cmd = [python]
    if ostinato:
        cmd += ["-m", "ostinato.as_reverb"]
    cmd += [__file__, "--steps", str(args.steps), "--repeat", "1"]
    cmd += ["--adders", ",".join(args.adders)]
    env = dict(os.environ, PYTHONPATH=str(ROOT / "tests" / "acme_support"))
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])["steps_per_s"]
    raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")


def _compare(args: argparse.Namespace) -> int:
    runs: dict[str, dict[str, list[float]]] = {"ostinato": {}, "dm-reverb": {}}
    for r in range(args.rounds):
        for impl, python in (("ostinato", args.ostinato_python), ("dm-reverb", args.reverb_python)):
            got = _run(python, impl == "ostinato", args)
            for name, values in got.items():
                runs[impl].setdefault(name, []).extend(values)
            print(
                f"[acme_adders] round {r + 1} {impl}: "
                + ", ".join(f"{n} {v[0]:,.0f}" for n, v in got.items()),
                file=sys.stderr,
            )
    print(f"\nAcme 0.4.0's adders, {args.steps:,} steps a run, {args.rounds} alternated rounds\n")
    print("| adder | Ostinato steps/s [runs] | dm-reverb steps/s [runs] | ratio of medians |")
    print("|---|---:|---:|---:|")
    for name in args.adders:
        o, d = runs["ostinato"][name], runs["dm-reverb"][name]
        mo, md = statistics.median(o), statistics.median(d)
        print(
            f"| {name} | {mo:,.0f} [{min(o):,.0f}-{max(o):,.0f}] | "
            f"{md:,.0f} [{min(d):,.0f}-{max(d):,.0f}] | {mo / md:.2f}× |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps({"steps": args.steps, "runs": runs}, indent=1))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=5_000, help="steps a run (default 5,000)")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs in this process")
    ap.add_argument("--adders", default=",".join(ADDERS), help="sequence,nstep")
    ap.add_argument("--compare", action="store_true", help="alternate two interpreters")
    ap.add_argument("--rounds", type=int, default=3, help="with --compare: rounds")
    ap.add_argument("--ostinato-python", default=str(ROOT / ".venv-acme" / "bin" / "python"))
    ap.add_argument("--reverb-python", default=os.environ.get("OSTINATO_REVERB_PYTHON", ""))
    ap.add_argument("--json", help="with --compare: write every run here")
    args = ap.parse_args(argv)
    args.adders = [a for a in args.adders.split(",") if a]
    bad = [a for a in args.adders if a not in ADDERS]
    if bad:
        ap.error(f"--adders: unknown {bad}; choose from {', '.join(ADDERS)}")
    if args.compare:
        if not args.reverb_python:
            ap.error("--compare needs --reverb-python (or $OSTINATO_REVERB_PYTHON)")
        return _compare(args)
    return _child(args)


if __name__ == "__main__":
    sys.exit(main())
