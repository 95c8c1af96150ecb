"""What a batch of Gaussian-process suggestions costs (issue 64's two cases), in CPU time.

- first batch: plain `bayesian` on Hartmann-6 with 16 results told (a wave of 16 design
  points) and one pending, asked for 16: the kernel fit from scratch and 16 picks. All 16
  groups wait for it when their trials end together (simulate.py's 16 groups of 0.3 s).
- at scale: `auto`'s Gaussian process with 3,000 results told and 5,000 pending, asked for
  200 (the kernel already fitted): the CPU per suggestion, which must stay under the
  results' spacing (about 3.5 ms with 10,000 groups of 10-60 s trials) for the model to
  keep up.

CPU time of the asking thread (time.thread_time), the least of `--repeats` runs (the
machine is shared: the least is the run least disturbed), with the median beside it.
To compare two revisions, run this file from an export of each (`git archive REV mpiopt
benchmarks | tar -x -C DIR`): it imports the mpiopt beside it.

    python benchmarks/batch_cost.py [--repeats 5]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))

from problems import _reals, hartmann6  # noqa: E402

from mpiopt.search import make_searcher  # noqa: E402

SPACE = _reals(6, 0.0, 1.0)


def _history(n: int, seed: int) -> list:
    rng = np.random.default_rng(seed)
    return [(p, float(hartmann6(p))) for p in (SPACE.sample(rng) for _ in range(n))]


def first_batch(seed: int) -> float:
    """CPU seconds of bayesian's first model batch of 16 (its fit included)."""
    searcher = make_searcher("bayesian", SPACE, {}, 0, budget=64, parallel=16)
    searcher.replay(_history(16, seed))
    searcher.hold(SPACE.sample(np.random.default_rng(99)))
    start = time.thread_time()
    searcher.ask_batch(range(17, 33))
    return time.thread_time() - start


def batch_at_scale(told: int = 3000, pending: int = 5000, size: int = 200) -> float:
    """CPU seconds per suggestion of one batch of `size` from auto's Gaussian process."""
    searcher = make_searcher("auto", SPACE, {}, 0, budget=30000, parallel=10000)
    searcher.replay(_history(told, 1))
    gp = searcher._model
    gp.ask_batch(range(told, told + 8))               # the kernel's fit
    rng = np.random.default_rng(2)
    for _ in range(pending):
        gp.hold(SPACE.sample(rng))
    start = time.thread_time()
    gp.ask_batch(range(told + 8, told + 8 + size))
    return (time.thread_time() - start) / size


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    first_batch(0)                                    # (imports, the thread controls)
    first = [first_batch(k % 3) for k in range(args.repeats)]
    scale = [batch_at_scale() for _ in range(max(1, args.repeats // 2))]
    print("| case | least CPU ms | median CPU ms |\n|---|---|---|")
    print(f"| bayesian's first batch of 16 (fit from scratch at 16 told) | "
          f"{1000 * min(first):.0f} | {1000 * statistics.median(first):.0f} |")
    print(f"| auto's GP, batch of 200 at 3,000 told and 5,000 pending, per suggestion | "
          f"{1000 * min(scale):.2f} | {1000 * statistics.median(scale):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
