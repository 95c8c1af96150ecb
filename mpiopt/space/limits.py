"""The numbers a search space may hold: those every searcher can compute with.

Searchers work in float64 on each dimension's scale (its bounds, or their logarithms for
a log-uniform prior): they take high - low to normalise and high + low for a midpoint,
divide by the width or a part of it, and turn integers into floats and back. A range
where that arithmetic fails would pass `mpiopt validate` and then end the study in the
middle, in one searcher and not another, so it is refused here, with the field and the
limit:

- a scale whose width or sum overflows (a real range -1e308..1e308): both must stay within
  the largest float, 1.797e308;
- a scale narrower than the smallest normal float, 2.225e-308 (a subnormal range such as
  [5e-324, 1e-323], or a log-uniform range whose two logarithms are one float): dividing by
  such a width gives infinity or NaN;
- an integer bound beyond ±2**53: float64 holds every integer up to 2**53 and not all above
  it, so a searcher's arithmetic would move suggestions to other integers, or a narrow range
  to nothing;
- a log-uniform real range whose low × high underflows to 0: scikit-optimize (behind
  `bayesian` and `auto`) takes that for a range holding 0;
- an integer choice of a categorical beyond the largest float (stored beside its text as a
  float, and turned into one by Optuna's samplers).
"""
from __future__ import annotations

import math
import sys
from typing import Any

from mpiopt.errors import SpaceError, shown

LARGEST = sys.float_info.max            # 1.7976931348623157e308
SMALLEST_NORMAL = sys.float_info.min    # 2.2250738585072014e-308
SMALLEST = math.ulp(0.0)                # 5e-324, the smallest float above 0
EXACT_INT = 2**53                       # float64 holds every integer up to here, exactly


def as_float(value: Any) -> float | None:
    """`value` as a float, None where it has no finite one (an int of 400 digits)."""
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def check_bound(field: str, value: Any, integer: bool) -> None:
    """A bound a searcher can hold: a finite float, or an integer within ±2**53."""
    if integer and abs(value) > EXACT_INT:
        raise SpaceError(field, f"{shown(value)} is beyond ±2**53 ({EXACT_INT}): searchers "
                                "compute in float64, which holds no larger integer exactly")
    if as_float(value) is None:
        raise SpaceError(field, f"expected a finite number (within ±{LARGEST:.4g}), "
                                f"got {shown(value)}")


def check_scale(name: str, low: Any, high: Any, lo: float, hi: float, log: bool) -> None:
    """The range [low, high] on the scale searchers work on ([lo, hi]: the bounds, their
    logarithms, or an integer range's widened edges): its width and sum finite, its width
    at least the smallest normal float."""
    if not (math.isfinite(hi - lo) and math.isfinite(hi + lo)):
        raise SpaceError(name, f"[{low}, {high}] is too wide: high - low and high + low must "
                               f"stay within ±{LARGEST:.4g}, the largest float")
    if hi - lo < SMALLEST_NORMAL:
        width = "log(high) - log(low)" if log else "high - low"
        hint = " (a uniform prior takes this range)" if log and _fits(low, high) else ""
        raise SpaceError(name, f"[{low}, {high}] is too narrow: {width} ({hi - lo:.4g}) must be "
                               f"at least {SMALLEST_NORMAL:.4g}, the smallest normal float{hint}")


def _fits(low: Any, high: Any) -> bool:
    """Whether [low, high] passes check_scale on its own (uniform) scale."""
    lo, hi = float(low), float(high)
    return math.isfinite(hi - lo) and math.isfinite(hi + lo) and hi - lo >= SMALLEST_NORMAL


def check_log_product(name: str, low: float, high: float) -> None:
    """A log-uniform real range whose low × high is a float above 0."""
    if low * high == 0.0:
        raise SpaceError(f"{name}.low", f"a log-uniform range needs low × high of at least "
                                        f"{SMALLEST:.2g}, the smallest float; {low!r} × {high!r} "
                                        f"underflows to 0")


def check_choice(field: str, choice: Any) -> None:
    """A categorical choice a searcher and the storage can turn into a float."""
    if isinstance(choice, (int, float)) and not isinstance(choice, bool) \
            and as_float(choice) is None:
        raise SpaceError(field, f"expected a finite number (within ±{LARGEST:.4g}), "
                                f"got {shown(choice)}")
