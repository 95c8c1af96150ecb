"""A function objective with a learning curve, for the report tests: it reports five
per-epoch values (so the median pruner can stop it), and fails for x < -3."""
import math
import time

from mpiopt.objective.evaluate import Pruned


def curve(params, report):
    x, y = params["x"], params["y"]
    if x < -3:
        raise RuntimeError("deliberate failure for x < -3")
    value = (x - 2) ** 2 + (y - 3) ** 2 + (0.5 if params["kind"] == "b" else 0.0)
    for epoch in range(1, 6):
        time.sleep(0.01)
        if not report(epoch, value * (1 + 2 / epoch) + math.sin(epoch)):
            raise Pruned()
    return value
