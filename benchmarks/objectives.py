"""Objectives the benchmarks run."""
import math
import os
import time


def branin(x, y):
    b, c, t = 5.1 / (4 * math.pi**2), 5 / math.pi, 1 / (8 * math.pi)
    return (y - b * x**2 + c * x - 6) ** 2 + 10 * (1 - t) * math.cos(x) + 10


def sleeping(params):
    """Sleeps MPIOPT_BENCH_SLEEP seconds and reports when it ran (for scheduling gaps)."""
    start = time.time()
    time.sleep(float(os.environ.get("MPIOPT_BENCH_SLEEP", "0.5")))
    return {"value": branin(params["x"], params["y"]), "t_start": start, "t_end": time.time()}
