"""Optuna's `optuna.importance.get_param_importances`, measured as mpiopt's report does.

    >>> import mpiopt as optuna
    >>> study = optuna.load_study(study_name="jets", storage="sqlite:///mpiopt.db")  # doctest: +SKIP
    >>> optuna.importance.get_param_importances(study)                              # doctest: +SKIP
    {'lr': 0.71, 'units': 0.22, 'opt': 0.07}

The measure is the report's (mpiopt.reporting.importance: fANOVA-style main effects of a
random forest fitted to the COMPLETE trials, with a fixed seed), so the page, `mpiopt
plot importance` and this call give the same shares for the same trials. An Optuna
evaluator (`evaluator=optuna.importance.FanovaImportanceEvaluator(seed=0)`) measures
as Optuna does: the complete trials are handed to Optuna itself, in an in-memory study.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable

from mpiopt.trial import TrialState

__all__ = ["get_param_importances"]


def get_param_importances(study, *, evaluator=None, params: list[str] | None = None,
                          target: Callable | None = None,
                          normalize: bool = True) -> dict[str, float]:
    """{parameter: importance}, largest first, over the study's COMPLETE trials.

    `params`: only these parameters (an empty list gives {}); `target(trial)`: the value
    to explain instead of the objective (a TrialView: `lambda t: t.values[1]`), needed
    with several objectives, as in Optuna; `normalize`: the shares sum to 1 (Optuna's
    default), else each is the share of the variance its main effect explains on its own
    (their sum falls short of 1 by what the parameters explain only together)."""
    if evaluator is not None:
        return _by_optuna(study, evaluator, params, target, normalize)
    if params is not None and not params:
        return {}
    from mpiopt.reporting.importance import importances

    view = study.view()
    trials = _targets(study, view, target)
    if not trials:
        raise ValueError(f"study '{study.name}' has no complete trial: no importance to "
                         "measure")
    chosen = [p for p in view.params if params is None or p.name in params]
    unknown = sorted(set(params or ()) - {p.name for p in chosen})
    if unknown:
        raise ValueError(f"no parameter {unknown[0]!r} in study '{study.name}' (its "
                         f"parameters: {', '.join(p.name for p in view.params)})")
    shares = importances(chosen, trials) or {p.name: 0.0 for p in chosen}
    total = sum(shares.values())
    if normalize and total > 0:
        shares = {k: v / total for k, v in shares.items()}
    return dict(sorted(shares.items(), key=lambda kv: -kv[1]))


def _by_optuna(study, evaluator, params, target, normalize) -> dict[str, float]:
    """Optuna's get_param_importances with its own `evaluator`, over an in-memory Optuna
    study of the complete trials (their parameters, Optuna distributions, values and
    metrics as user_attrs, so a target reads them as it would in Optuna)."""
    import optuna

    level = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)   # (no line for the study it makes)
    try:
        copy = optuna.create_study(directions=[d.value for d in study.directions])
    finally:
        optuna.logging.set_verbosity(level)
    complete = study.get_trials(states=(TrialState.COMPLETE,))
    copy.add_trials([optuna.trial.create_trial(
        params=t.params, distributions=t.distributions, values=t.values,
        user_attrs=t.user_attrs) for t in complete if t.values and None not in t.values])
    return optuna.importance.get_param_importances(copy, evaluator=evaluator, params=params,
                                                   target=target, normalize=normalize)


def _targets(study, view, target) -> list:
    """The complete trials with the value to explain: the objective's, or target's."""
    if target is None:
        if view.multi:
            raise ValueError(f"study '{study.name}' has {len(view.front.names)} objectives: "
                             "name the one to explain with target=, e.g. "
                             "target=lambda t: t.values[0]")
        return view.complete()
    from mpiopt.reporting.view import finite

    by_number = {t.number: t for t in study.trials}
    out = []
    for t in view.complete():
        value = target(by_number[t.number])
        if finite(value):
            out.append(replace(t, value=float(value)))
    return out
