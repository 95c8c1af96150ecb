"""Optuna's `optuna.visualization.matplotlib`: the same figures as mpiopt.visualization,
as matplotlib Figures (`mpiopt plot` draws them into files). A Figure is not attached to
pyplot: drawing one neither opens a window nor changes the caller's backend; show it in
a notebook as it is, or save it with fig.savefig(path). Needs matplotlib (the `report`
extra)."""
from __future__ import annotations

__all__ = ["plot_contour", "plot_folds", "plot_hypervolume_history",
           "plot_intermediate_values", "plot_lineage", "plot_optimization_history",
           "plot_parallel_coordinate", "plot_param_importances", "plot_pareto_front",
           "plot_slice", "plot_timeline"]


def _figure(study, kind: str):
    from mpiopt.errors import MpioptError

    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise MpioptError("mpiopt.visualization.matplotlib needs matplotlib: pip install "
                          "'mpiopt[report]'") from None
    from mpiopt.reporting.figures import panel
    from mpiopt.reporting.static import draw

    return draw(panel(kind, study.view()))


def plot_optimization_history(study):
    """Each finished trial's value and the best so far."""
    return _figure(study, "history")


def plot_parallel_coordinate(study):
    """The complete trials' parameters and objectives on parallel axes."""
    return _figure(study, "parallel")


def plot_param_importances(study):
    """Each parameter's share of the variance (mpiopt.importance's measure)."""
    return _figure(study, "importance")


def plot_slice(study):
    """The objective against each parameter."""
    return _figure(study, "slice")


def plot_contour(study):
    """A random forest's prediction over the two most important parameters."""
    return _figure(study, "contour")


def plot_intermediate_values(study):
    """Every trial's learning curve."""
    return _figure(study, "curves")


def plot_pareto_front(study):
    """The Pareto front of a study of several objectives."""
    return _figure(study, "pareto")


def plot_hypervolume_history(study):
    """The hypervolume of the Pareto front after each trial."""
    return _figure(study, "hypervolume")


def plot_timeline(study):
    """What each group did over time."""
    return _figure(study, "timeline")


def plot_folds(study):
    """mpiopt's own: each trial's K-fold values beside their mean."""
    return _figure(study, "folds")


def plot_lineage(study):
    """mpiopt's own: a pbt study's lineage."""
    return _figure(study, "lineage")
