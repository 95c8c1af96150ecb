"""A toy "training cost" over real, integer and categorical parameters, with a known optimum.

It mimics how a network's validation loss depends on its settings without training one:
each optimizer has its own best learning rate (on a log scale), three layers of 128 units
are best, and batch normalization helps. The minimum, 0.0, is at

    optimizer=adam, learning_rate=1e-3, layers=3, units=128, batch_norm=True

so a search's best value says directly how close it came. ``cost`` returns a dict of
metrics; the spec's ``metric: cost`` picks the figure of merit.
"""
import math

BEST = {"optimizer": "adam", "learning_rate": 1e-3, "layers": 3, "units": 128, "batch_norm": True}
BEST_LR = {"adam": 1e-3, "rmsprop": 3e-4, "sgd": 1e-1}
OPTIMIZER_PENALTY = {"adam": 0.0, "rmsprop": 0.1, "sgd": 0.3}


def cost(params):
    optimizer = params["optimizer"]
    lr_term = (math.log10(params["learning_rate"]) - math.log10(BEST_LR[optimizer])) ** 2
    shape_term = 0.1 * (params["layers"] - 3) ** 2 + 0.05 * (math.log2(params["units"]) - 7) ** 2
    norm_term = 0.0 if params["batch_norm"] else 0.2
    total = lr_term + shape_term + norm_term + OPTIMIZER_PENALTY[optimizer]
    return {"cost": total, "parameters": float(params["layers"] * params["units"])}
