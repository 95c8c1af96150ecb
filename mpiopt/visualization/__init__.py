"""Optuna's `optuna.visualization` over mpiopt's studies: each function takes a study
(mpiopt.load_study) and returns a plotly Figure, drawn as `mpiopt report` draws it.

    >>> import mpiopt as optuna
    >>> study = optuna.load_study(study_name="jets", storage="sqlite:///mpiopt.db")  # doctest: +SKIP
    >>> optuna.visualization.plot_optimization_history(study).show()               # doctest: +SKIP
    >>> optuna.visualization.matplotlib.plot_contour(study).savefig("contour.png")  # doctest: +SKIP

What each figure shows is decided once, in mpiopt.reporting.figures, for the report, the
dashboard, `mpiopt plot` and these functions, so they never disagree; mpiopt.visualization
.matplotlib draws the same as matplotlib Figures. Optuna's own arguments that choose
what to draw (params=, target=) are not taken: a figure shows what the report shows. A
plot with nothing to draw (no complete trial yet) is a figure saying why. Needs plotly
(the `report` extra).
"""
from __future__ import annotations

from mpiopt.visualization import matplotlib  # noqa: F401  (optuna.visualization.matplotlib)

__all__ = ["is_available", "plot_contour", "plot_folds", "plot_hypervolume_history",
           "plot_intermediate_values", "plot_lineage", "plot_optimization_history",
           "plot_parallel_coordinate", "plot_param_importances", "plot_pareto_front",
           "plot_slice", "plot_timeline"]


def is_available() -> bool:
    """Whether plotly is installed (Optuna's visualization.is_available)."""
    try:
        import plotly  # noqa: F401
    except ImportError:
        return False
    return True


def _figure(study, kind: str):
    from mpiopt.errors import MpioptError

    try:
        import plotly.graph_objects as go
    except ImportError:
        raise MpioptError("mpiopt.visualization needs plotly: pip install 'mpiopt[report]'") from None
    from mpiopt.reporting.figures import panel
    from mpiopt.reporting.plotly_figures import standalone
    from mpiopt.reporting.view import trial_hovers

    view = study.view()
    return go.Figure(standalone(panel(kind, view), trial_hovers(view)))


def plot_optimization_history(study):
    """Each finished trial's value and the best so far (a log axis when one outlier
    would flatten the rest)."""
    return _figure(study, "history")


def plot_parallel_coordinate(study):
    """The complete trials' parameters and objectives on parallel axes."""
    return _figure(study, "parallel")


def plot_param_importances(study):
    """Each parameter's share of the variance (mpiopt.importance's measure)."""
    return _figure(study, "importance")


def plot_slice(study):
    """The objective against each parameter, one panel per parameter."""
    return _figure(study, "slice")


def plot_contour(study):
    """A random forest's prediction of the objective over the two most important
    parameters, with the trials as points (a model's prediction, not measured values)."""
    return _figure(study, "contour")


def plot_intermediate_values(study):
    """Every trial's learning curve (its per-epoch reports); pruned trials marked."""
    return _figure(study, "curves")


def plot_pareto_front(study):
    """The Pareto front of a study of several objectives (2-D, or 3-D for three)."""
    return _figure(study, "pareto")


def plot_hypervolume_history(study):
    """The hypervolume of the Pareto front after each trial."""
    return _figure(study, "hypervolume")


def plot_timeline(study):
    """What each group did over time, trial by trial."""
    return _figure(study, "timeline")


def plot_folds(study):
    """mpiopt's own: each trial's K-fold values beside their mean."""
    return _figure(study, "folds")


def plot_lineage(study):
    """mpiopt's own: a pbt study's members, round by round, and whom each exploited."""
    return _figure(study, "lineage")
