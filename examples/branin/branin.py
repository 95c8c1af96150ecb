"""The Branin function: a standard 2-D test of global optimizers.

Three global minima, all with value 0.397887..., at (-pi, 12.275), (pi, 2.275) and
(9.42478, 2.475), on x1 in [-5, 10], x2 in [0, 15]. mpiopt calls ``branin(params)`` with
the parameter dict of one trial and records the returned float.
"""
import math

GLOBAL_MINIMUM = 0.39788735772973816
MINIMIZERS = [(-math.pi, 12.275), (math.pi, 2.275), (9.42477796, 2.475)]


def branin(params):
    x1, x2 = params["x1"], params["x2"]
    a, b, c = 1.0, 5.1 / (4 * math.pi ** 2), 5 / math.pi
    r, s, t = 6.0, 10.0, 1 / (8 * math.pi)
    return a * (x2 - b * x1 ** 2 + c * x1 - r) ** 2 + s * (1 - t) * math.cos(x1) + s
