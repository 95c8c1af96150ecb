"""Finite values of any size for the code that models them (numpy only).

A trial's value may be any finite float, up to 1.8e308 (a diverging simulation's), but
from about 1e154 its square overflows, and with it every variance, standard deviation
and difference a model takes: a Gaussian process predicts NaN everywhere and the study
ends; a random forest's importances are NaN. Where only the order and the ratios of the
values matter (a model's fit, a share of variance), `in_range` divides them by a power
of two first, which changes only the exponent: exact, and values of an ordinary size are
left as they are, bit for bit.
"""
from __future__ import annotations

import numpy as np

# Values at least this large in size are scaled down (2**256, about 1e77: their squares
# and sums of squares stay far below the float limit)
HUGE = 2.0 ** 256


def in_range(values) -> np.ndarray:
    """The values (per column, for a 2-D array of several objectives) divided by a power
    of two where any reaches HUGE in size, so that the largest is below 1."""
    values = np.asarray(values, dtype=float)
    peak = np.max(np.abs(values), axis=0) if values.size else 0.0
    if not np.any(peak >= HUGE):
        return values
    exponent = np.where(peak >= HUGE, np.frexp(np.maximum(peak, 1.0))[1], 0)
    return np.ldexp(values, -exponent)
