"""Pruners: should a running trial stop early, given the learning curves of the others?

Pure objects. The coordinator calls `judge(trial_number, step, value, history)` each time
a group reports a fold's value after an epoch; `history` maps trial numbers (this trial's
earlier reports included, or not) to their curves {Step(fold, epoch): value}. Values are
lower-is-better (the coordinator negates them for a maximised metric); the trainer's
epochs count from 1 in each fold.

Like with like. A trial is compared only with the other trials that reported the same
(fold, epoch), and on the same figure: its **figure so far**, the mean over its folds of
each fold's best value so far, which is how its final value is made (each fold's best
epoch, the mean over the folds). With folds one after another the folds before this one
are finished and count whole; with folds side by side every fold counts up to this
epoch. A fold's first `warmup` epochs (a freshly built model) are left out of the figure
until the fold is past them, so a new fold's first epochs never prune a trial by
themselves: there the decision rests on the finished folds, and in the first fold on
nothing (no decision). The best value so far, not the last, as Optuna's median pruner
judges a trial: one bad epoch of a good curve does not stop it.

How a pruned trial is told to the searcher is the trainer's part (mpiopt.training.folds):
its value is the same figure over what it trained, so it means what a finished trial's
value means, pessimistic only in that its last fold was cut short.
"""
from __future__ import annotations

import abc
import math
from dataclasses import dataclass

from mpiopt.trial import Step, as_step, step_text

__all__ = ["ASHAPruner", "Judgement", "MedianPruner", "Pruner", "figure_so_far", "make_pruner"]


@dataclass(frozen=True)
class Judgement:
    """A pruner's answer to one report, and what it rests on (for the record)."""

    prune: bool
    step: Step
    figure: float | None = None   # the trial's figure so far (lower is better), if compared
    bar: float | None = None      # the value it had to reach: the median, or ASHA's cut
    others: int = 0               # trials it was compared with
    rule: str = ""                # "median" or "asha" ("": nothing was compared)
    keep: int = 0                 # asha: 1/keep of the trials at a rung go on
    why: str = ""                 # the reason where it is no comparison (a non-finite value)
    finished: int = 0             # asha at a fold's end: the folds the figure is the mean of

    def text(self, sign: float = 1.0, folds: int = 1) -> str:
        """The reason in words, in the metric's own units (`sign` as Direction.sign):
        'pruned at fold 2 epoch 3: its figure so far 0.912 is worse than the median
        0.95 of 6 other trials there'."""
        where = f"pruned at {step_text(self.step, folds)}"
        if self.why or self.figure is None or self.bar is None:
            return f"{where}: {self.why or 'the pruner said so'}"
        mine = f"{'its best so far' if folds <= 1 else 'its figure so far'} {sign * self.figure:.6g}"
        if self.rule == "asha" and self.finished:
            done = "fold 0" if self.finished == 1 else f"folds 0-{self.finished - 1}"
            return (f"{where} (the rung at fold {self.finished - 1}'s end): its mean over "
                    f"{done} {sign * self.figure:.6g} is outside the best 1/{self.keep} of "
                    f"the {self.others + 1} trials that finished {done} (the cut: "
                    f"{sign * self.bar:.6g})")
        if self.rule == "asha":
            return (f"{where} (a rung): {mine} is outside the best 1/{self.keep} of the "
                    f"{self.others + 1} trials there (the cut: {sign * self.bar:.6g})")
        others = f"{self.others} other trial{'s' if self.others != 1 else ''}"
        return f"{where}: {mine} is worse than the median {sign * self.bar:.6g} of {others} there"


def figure_so_far(curve: dict, step: Step, warmup: int = 0, side_by_side: bool = False):
    """The trial's figure at `step` (see the module docstring), or None where every fold
    it would rest on is still in its warm-up. `curve`: {Step: lower-is-better value}."""
    if step.epoch <= warmup and (side_by_side or step.fold == 0):
        return None                       # every fold it would rest on is in its warm-up
    best: dict[int, float] = {}
    for (fold, epoch), value in curve.items():     # one pass: the coordinator asks often
        if fold > step.fold or not _finite(value):
            continue
        if fold == step.fold or side_by_side:      # counted up to this epoch, past warm-up
            if epoch > step.epoch or step.epoch <= warmup:
                continue
        if value < best.get(fold, math.inf):
            best[fold] = value
    return sum(best.values()) / len(best) if best else None


class Pruner(abc.ABC):
    """Decides continue/prune from the trial's value at a step and the others' curves."""

    warmup = 0               # a fold's epochs left out of the figure until it is past them
    side_by_side = False     # the study's folds train side by side (training.folds.fold_plan)

    def judge(self, trial_number: int, step, value: float, history: dict) -> Judgement:
        """The decision on this report, with what it rests on."""
        step = as_step(step)
        if not _finite(value):
            return Judgement(True, step, why=f"its value is {value}")
        own = {as_step(k): v for k, v in (history.get(trial_number) or {}).items()}
        own[step] = float(value)
        others = {n: c for n, c in history.items() if n != trial_number}
        return self._judge(step, own, others)

    def should_prune(self, trial_number: int, step, value: float, history: dict) -> bool:
        """True: stop this trial now (judge's answer without its reasons)."""
        return self.judge(trial_number, step, value, history).prune

    @abc.abstractmethod
    def _judge(self, step: Step, own: dict, others: dict) -> Judgement:
        """own: this trial's curve, this report included; others: the other trials'."""

    def _figures_at(self, step: Step, others: dict) -> list[float]:
        """The figures of the other trials that reported this very step."""
        out = []
        for curve in others.values():
            curve = _stepped(curve)
            if step not in curve:
                continue
            fig = figure_so_far(curve, step, self.warmup, self.side_by_side)
            if fig is not None:
                out.append(fig)
        return out


class MedianPruner(Pruner):
    """Prune when the trial's figure so far is worse than the median of the other
    trials' figures at the same fold and epoch; never within a fold's first
    `warmup_epochs` epochs on that fold alone (see the module docstring), and only when
    at least `min_trials` other trials reported that fold and epoch (a median of two
    says little)."""

    def __init__(self, warmup_epochs: int = 1, min_trials: int = 5, side_by_side: bool = False):
        self.warmup_epochs = self.warmup = int(warmup_epochs)
        self.min_trials = max(1, int(min_trials))
        self.side_by_side = bool(side_by_side)

    def _judge(self, step, own, others) -> Judgement:
        mine = figure_so_far(own, step, self.warmup, self.side_by_side)
        if mine is None:
            return Judgement(False, step)
        theirs = sorted(self._figures_at(step, others))
        n = len(theirs)
        if n < self.min_trials:
            return Judgement(False, step, mine, others=n)
        median = theirs[n // 2] if n % 2 else 0.5 * (theirs[n // 2 - 1] + theirs[n // 2])
        return Judgement(mine > median, step, mine, median, n, "median")


class ASHAPruner(Pruner):
    """Asynchronous successive halving over the epochs a trial has trained (all its folds
    together): rungs when it has trained min_epoch * reduction_factor**k epochs.

    At a rung, the trial continues only if its figure is among the best 1/reduction_factor
    of the figures of every trial that reached the same rung (its own included); with
    fewer than reduction_factor of them the top slot is the best one, so the first trial
    there always continues and a later one must beat everything seen there. Between rungs
    nothing is pruned, so a decision never waits for other trials (asynchronous). Rungs
    count epochs trained, not a fold's epochs: the folds of a trial are repeated
    measurements of one setting, so halving at every fold's own rungs would halve the same
    trials again in each fold.

    Where a rung is decided, and on what:
    - One fold (a holdout), or folds side by side (their epochs pass together): at the
      epoch itself, on the figure so far (the best so far); a fold's epochs before
      min_epoch are its warm-up (see the module docstring).
    - Folds one after another: at the end of the fold the rung falls in, on the mean of
      the finished folds (each fold's best epoch), against the trials that finished as
      many folds. Inside a fold, ASHA would keep one trial in reduction_factor on the
      early epochs of one fold, a single noisy curve of a model still learning, where
      trials that end best are often still behind; a finished fold is a whole
      measurement of the setting, which every trial has in the same sense (whatever its
      epochs per fold or its early stopping). Rungs that fall in one fold are one
      decision: a second halving on the same fold would choose again, on the same
      measurement, among the trials it has just kept. The pruner learns that a fold
      ended from the next fold's first report, so a pruned trial trains that one epoch
      more. A rung inside the last fold is the trial's end: nothing is left to save.
    """

    def __init__(self, reduction_factor: int = 3, min_epoch: int = 1, side_by_side: bool = False,
                 folds: int = 1):
        if int(reduction_factor) < 2:
            raise ValueError("reduction_factor must be at least 2")
        self.rf = int(reduction_factor)
        self.min_epoch = max(1, int(min_epoch))
        self.warmup = self.min_epoch - 1
        self.side_by_side = bool(side_by_side)
        self.folds = max(1, int(folds))

    def is_rung(self, trained: int) -> bool:
        """Whether a trial that has trained this many epochs stands at a rung."""
        return self.rung_within(trained - 1, trained)

    def rung_within(self, before: int, through: int) -> bool:
        """Whether a rung falls after `before` and at or before `through` epochs trained."""
        step = self.min_epoch
        while step <= before:
            step *= self.rf
        return step <= through

    def _judge(self, step, own, others) -> Judgement:
        if self.folds > 1 and not self.side_by_side:
            return self._judge_fold_end(step, own, others)
        # one fold: the epochs trained; side by side, the folds' epochs pass together
        trained = step.epoch if self.side_by_side else sum(1 for s in own if s <= step)
        if not self.is_rung(trained):
            return Judgement(False, step)
        mine = figure_so_far(own, step, self.warmup, self.side_by_side)
        if mine is None:
            return Judgement(False, step)
        return self._cut(step, mine, self._figures_at(step, others))

    def _judge_fold_end(self, step, own, others) -> Judgement:
        """Folds one after another: at a fold's first report, the rungs that fell in the
        fold before it, decided on the finished folds (see the class docstring)."""
        if step.fold == 0 or any(s.fold == step.fold and s.epoch < step.epoch for s in own):
            return Judgement(False, step)
        before = sum(1 for s in own if s.fold < step.fold - 1)
        through = sum(1 for s in own if s.fold < step.fold)
        if not self.rung_within(before, through):
            return Judgement(False, step)
        finished = Step(step.fold, 0)        # the figure of the folds before this one
        mine = figure_so_far(own, finished)
        if mine is None:
            return Judgement(False, step)
        theirs = [figure_so_far(curve, finished) for curve in map(_stepped, others.values())
                  if any(s.fold >= step.fold for s in curve)]
        return self._cut(step, mine, [f for f in theirs if f is not None], step.fold)

    def _cut(self, step: Step, mine: float, theirs: list, finished: int = 0) -> Judgement:
        """Prune unless `mine` is among the best 1/rf of the figures, its own included."""
        values = sorted(theirs + [mine])
        cut = values[max(1, len(values) // self.rf) - 1]
        return Judgement(mine > cut, step, mine, cut, len(theirs), "asha", self.rf,
                         finished=finished)


def _stepped(curve: dict) -> dict:
    """A curve keyed by Step (a bare epoch is fold 0's; the coordinator's are Steps)."""
    if not curve or isinstance(next(iter(curve)), tuple):
        return curve
    return {as_step(k): v for k, v in curve.items()}


def _finite(v) -> bool:
    return v is not None and math.isfinite(v)


def make_pruner(spec, side_by_side: bool = False, folds: int = 1) -> Pruner | None:
    """A pruner from a PruningSpec (or a dict with the same fields); None turns pruning off.
    folds: a trial's folds; side_by_side: they train side by side
    (mpiopt.training.folds.fold_plan)."""
    if spec is None:
        return None
    get = spec.get if isinstance(spec, dict) else (lambda k, d: getattr(spec, k, d))
    kind = get("pruner", "median")
    if kind == "median":
        return MedianPruner(get("warmup_epochs", 1), get("min_trials", 5), side_by_side)
    if kind == "asha":
        return ASHAPruner(get("reduction_factor", 3), get("min_epoch", 1), side_by_side, folds)
    raise ValueError(f"unknown pruner {kind!r}: expected median or asha")
