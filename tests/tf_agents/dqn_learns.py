"""TF-Agents' own DQN CartPole example, unmodified, learning on Ostinato.

Runs ``tf_agents.examples.dqn.dqn_train_eval.train_eval`` (the shipped example: a Reverb table,
``ReverbAddTrajectoryObserver``, ``ReverbReplayBuffer.as_dataset``, an Actor and a Learner)
with ``import reverb`` resolving to Ostinato, and checks that the greedy policy's average
return rises well above a random policy's (~20 on CartPole-v0, whose maximum is 200).

    python -m ostinato.as_reverb tests/tf_agents/dqn_learns.py --iterations 3000 --min-return 80

Prints one JSON line with every evaluation's average return, and exits 1 if the best one is
below ``--min-return``.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import re
import sys
import tempfile
import time


class _Returns(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.values: list[float] = []

    def emit(self, record: logging.LogRecord) -> None:
        for m in re.finditer(r"AverageReturn = ([-0-9.eE+]+)", record.getMessage()):
            self.values.append(float(m.group(1)))


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--iterations", type=int, default=3000)
    p.add_argument("--eval-interval", type=int, default=1000)
    p.add_argument("--min-return", type=float, default=80.0)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()

    import numpy as np
    import tensorflow as tf
    from absl import logging as absl_logging
    from tf_agents.examples.dqn import dqn_train_eval

    random.seed(args.seed)
    np.random.seed(args.seed)
    tf.random.set_seed(args.seed)
    absl_logging.set_verbosity(absl_logging.INFO)
    returns = _Returns()
    absl_logging.get_absl_logger().addHandler(returns)
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as root:
        dqn_train_eval.train_eval(
            root, num_iterations=args.iterations, eval_interval=args.eval_interval
        )
    result = {
        "returns": returns.values,
        "best": max(returns.values, default=None),
        "iterations": args.iterations,
        "seconds": round(time.monotonic() - t0, 1),
        "min_return": args.min_return,
    }
    print(json.dumps(result), flush=True)
    if not returns.values or max(returns.values) < args.min_return:
        print(
            f"DQN did not learn: best average return {result['best']} < {args.min_return}",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
