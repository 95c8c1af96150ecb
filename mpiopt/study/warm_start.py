"""search.warm_start: tell a new study's searcher another study's results first.

Why: a study often follows an earlier one over a narrowed or changed space; its finished
results are evidence the searcher should not pay for again. They are told before the
study's own trials (so a Bayesian model starts fitted) and never count toward the budget
or appear as this study's trials; they are read again on every run, as the study's own
results are replayed, so a resumed study rebuilds the same searcher state.

A result is told when it is usable (COMPLETE or PRUNED with a finite value, what a study
tells its own searcher) and its parameters fit the new space: every parameter of the new
space present with a value inside it. Parameters the new space no longer has are dropped.
The other study must be in the same database and have the same metric and direction:
otherwise its values mean something else, and the start is refused.
"""
from __future__ import annotations

import math

from mpiopt.errors import ResumeError, UnknownStudyError
from mpiopt.trial import TrialStatus

USABLE = (TrialStatus.COMPLETE, TrialStatus.PRUNED)


def warm_results(storage, spec) -> tuple[list[tuple[dict, float]], str | None]:
    """([(params, value)], the header's line) for spec.search.warm_start, or ([], None)."""
    other = getattr(spec.search, "warm_start", None)
    if not other:
        return [], None
    if other == spec.study.name:
        raise ResumeError(f"search.warm_start: '{other}' is this study itself; name another "
                          "study in the same database")
    try:
        record = storage.get_study(other)
    except UnknownStudyError as exc:
        raise UnknownStudyError(f"search.warm_start: {exc}") from None
    mine = (spec.objective.metric, spec.objective.direction)
    if (record.metric, record.direction) != mine:
        raise ResumeError(f"search.warm_start: study '{other}' {record.direction}s "
                          f"{record.metric}, this one {mine[1]}s {mine[0]}: its values "
                          "cannot be told to this searcher")
    told, skipped = [], 0
    for trial in storage.get_trials(record.id, statuses=USABLE):
        params = fitting(spec.space, trial.params)
        if params is None or trial.value is None or not math.isfinite(trial.value):
            skipped += 1
            continue
        told.append((params, float(trial.value)))
    return told, (f"warm start from study '{other}': {len(told)} result(s) told, {skipped} "
                  "skipped (parameters outside this space, or no usable value)")


def fitting(space, params: dict) -> dict | None:
    """`params` restricted to the space's parameters, or None if one is missing or out."""
    try:
        return space.parameter_set(space.active({n: params[n] for n in space.names if n in params}))
    except (KeyError, ValueError):
        return None
