"""Pruners: should a running trial stop early, given the learning curves of the others?

Pure objects. The coordinator calls `should_prune(trial_number, epoch, value, history)`
each time a group reports; `history` maps the number of every OTHER trial (running or
finished) to its {epoch: value}. Values are lower-is-better (the coordinator negates them
for a maximised metric) and epochs are the trainer's 1-based report steps.

How a pruned trial is told to the searcher: it is recorded as PRUNED and the searcher is
told its last reported value. Training stopped before it could improve further, so for a
minimisation that value is pessimistic: the true final value would be at most as bad for
a curve that is still falling. That is what we want the model to learn: the region is not
promising, but not impossibly bad either (telling +inf or a huge constant would wreck a
GP's scaling, and forgetting it would make the searcher propose the same point again).
"""
from __future__ import annotations

import abc
import math

__all__ = ["ASHAPruner", "MedianPruner", "Pruner", "make_pruner"]


class Pruner(abc.ABC):
    """Decides continue/prune from the trial's value at an epoch and the others' curves."""

    @abc.abstractmethod
    def should_prune(self, trial_number: int, epoch: int, value: float,
                     history: dict[int, dict[int, float]]) -> bool:
        """True: stop this trial now."""


def _others_at(trial_number: int, epoch: int, history) -> list[float]:
    """Finite values the other trials reported at this very epoch."""
    out = []
    for number, curve in history.items():
        if number == trial_number:
            continue
        v = curve.get(epoch)
        if v is not None and math.isfinite(v):
            out.append(float(v))
    return out


class MedianPruner(Pruner):
    """Prune when this epoch's value is worse than the median of the other trials at the
    same epoch; never during the first `warmup_epochs` epochs, and only when at least
    `min_trials` other trials reported that epoch (a median of two says little)."""

    def __init__(self, warmup_epochs: int = 1, min_trials: int = 5):
        self.warmup_epochs = int(warmup_epochs)
        self.min_trials = max(1, int(min_trials))

    def should_prune(self, trial_number, epoch, value, history) -> bool:
        if not math.isfinite(value):
            return True
        if epoch <= self.warmup_epochs:
            return False
        others = sorted(_others_at(trial_number, epoch, history))
        if len(others) < self.min_trials:
            return False
        n = len(others)
        median = others[n // 2] if n % 2 else 0.5 * (others[n // 2 - 1] + others[n // 2])
        return value > median


class ASHAPruner(Pruner):
    """Asynchronous successive halving: rungs at epochs min_epoch * reduction_factor**k.

    At a rung, the trial continues only if its value is among the best 1/reduction_factor
    of all values recorded at that rung (its own included); with fewer than
    reduction_factor values the top slot is the best one, so the first trial to reach a
    rung always continues and a later one must beat everything seen there. Between rungs
    nothing is pruned, so a decision never waits for other trials (asynchronous).
    """

    def __init__(self, reduction_factor: int = 3, min_epoch: int = 1):
        if int(reduction_factor) < 2:
            raise ValueError("reduction_factor must be at least 2")
        self.rf = int(reduction_factor)
        self.min_epoch = max(1, int(min_epoch))

    def is_rung(self, epoch: int) -> bool:
        step = self.min_epoch
        while step < epoch:
            step *= self.rf
        return step == epoch

    def should_prune(self, trial_number, epoch, value, history) -> bool:
        if not math.isfinite(value):
            return True
        if not self.is_rung(epoch):
            return False
        values = sorted(_others_at(trial_number, epoch, history) + [float(value)])
        keep = max(1, len(values) // self.rf)
        return value > values[keep - 1]


def make_pruner(spec) -> Pruner | None:
    """A pruner from a PruningSpec (or a dict with the same fields); None turns pruning off."""
    if spec is None:
        return None
    get = spec.get if isinstance(spec, dict) else (lambda k, d: getattr(spec, k, d))
    kind = get("pruner", "median")
    if kind == "median":
        return MedianPruner(get("warmup_epochs", 1), get("min_trials", 5))
    if kind == "asha":
        return ASHAPruner(get("reduction_factor", 3), get("min_epoch", 1))
    raise ValueError(f"unknown pruner {kind!r}: expected median or asha")
