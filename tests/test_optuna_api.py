"""What an Optuna user reaches for after load_study (issue 62): parameter importances,
plot functions that return figures, trial.distributions, trial.last_step, StudyDirection.

Each is checked against Optuna itself (installed with mpiopt): the names are Optuna's,
the distributions are Optuna's classes that Optuna's own create_trial accepts, and the
direction reads as Optuna's does. The studies come from real searches under mpiexec -n 3.
"""
from __future__ import annotations

import math

import optuna as real_optuna
import pytest

from conftest import mpiopt

OBJECTIVE = '''
import math


def f(params, report):
    """Fails before its first report for lr < 1e-3; else reports three epochs."""
    if params["lr"] < 1e-3:
        raise ValueError("lr too small")
    value = (math.log10(params["lr"]) + 2.0) ** 2 + params["units"] / 64
    value += 0.5 if params["opt"] == "sgd" else 0.0
    for epoch in (1, 2, 3):
        report(epoch, value + 1.0 / epoch)
    return {"loss": value, "cost": params["units"] / 8}
'''
SPACE = """search_space:
  lr: {type: real, low: 1.0e-4, high: 1.0e-1, prior: log-uniform}
  units: {type: integer, low: 8, high: 64}
  opt: [adam, sgd]
search: {algorithm: random, trials: 14, seed: 3}
"""
ONE = "study: {name: one}\nobjective: {function: %s:f, metric: loss, direction: minimize}\n"
TWO = "study: {name: two}\nobjective: {function: %s:f, metrics: {loss: minimize, cost: maximize}}\n"


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    folder = tmp_path_factory.mktemp("optuna_api")
    (folder / "objective.py").write_text(OBJECTIVE)
    url = f"sqlite:///{folder / 'studies.db'}"
    for head in (ONE, TWO):
        spec = folder / "spec.yaml"
        spec.write_text(head % (folder / "objective.py") + SPACE)
        mpiopt("search", spec, "--storage", url, np=3, cwd=folder, check=True, timeout=240)
    return url


@pytest.fixture
def study(url):
    import mpiopt

    with mpiopt.load_study(study_name="one", storage=url) as study:
        yield study


def test_param_importances_in_optunas_call(study):
    import mpiopt as optuna
    from mpiopt.reporting.figures import panel

    shares = optuna.importance.get_param_importances(study)
    assert set(shares) == {"lr", "units", "opt"}
    assert list(shares.values()) == sorted(shares.values(), reverse=True)
    assert math.isclose(sum(shares.values()), 1.0)
    raw = optuna.importance.get_param_importances(study, normalize=False)
    report = dict(panel("importance", study.view()).data["shares"])
    assert raw == pytest.approx(report)                  # the report's measure, unscaled
    assert optuna.importance.get_param_importances(study, params=["lr"]) == {"lr": 1.0}
    assert optuna.importance.get_param_importances(study, params=[]) == {}
    by_cost = optuna.importance.get_param_importances(study, target=lambda t: t.user_attrs["cost"])
    assert next(iter(by_cost)) == "units"        # cost is units / 8: units explains it all
    fanova = real_optuna.importance.FanovaImportanceEvaluator(seed=0)   # Optuna's own measure
    theirs = optuna.importance.get_param_importances(study, evaluator=fanova)
    assert set(theirs) == {"lr", "units", "opt"} and math.isclose(sum(theirs.values()), 1.0)


def test_param_importances_of_several_objectives_need_a_target(url):
    import mpiopt

    with mpiopt.load_study("two", url) as study:
        with pytest.raises(ValueError, match="target="):
            mpiopt.importance.get_param_importances(study)
        shares = mpiopt.importance.get_param_importances(study, target=lambda t: t.values[1])
        assert next(iter(shares)) == "units"


PLOTS = ("plot_optimization_history", "plot_parallel_coordinate", "plot_param_importances",
         "plot_slice", "plot_contour", "plot_intermediate_values", "plot_timeline")


def test_plot_functions_return_figures_under_optunas_names(study, url):
    import matplotlib.figure
    import plotly.graph_objects as go

    import mpiopt as optuna

    assert optuna.visualization.is_available()
    for name in PLOTS + ("plot_pareto_front", "plot_hypervolume_history"):
        assert hasattr(real_optuna.visualization, name), name     # Optuna's own name
        assert hasattr(real_optuna.visualization.matplotlib, name), name
    for name in PLOTS:
        fig = getattr(optuna.visualization, name)(study)
        assert isinstance(fig, go.Figure) and fig.data, name
        assert fig.layout.title.text, name
        for trace in fig.data:
            if trace.meta == "trials":                      # hover texts filled in
                assert trace.text and all(trace.text), name
        drawn = getattr(optuna.visualization.matplotlib, name)(study)
        assert isinstance(drawn, matplotlib.figure.Figure) and drawn.axes, name
    contour = optuna.visualization.plot_contour(study)
    assert "predicted" in contour.layout.title.text
    with optuna.load_study("two", url) as two:
        front = optuna.visualization.plot_pareto_front(two)
        assert front.data and "Pareto front" in front.layout.title.text
        assert optuna.visualization.plot_hypervolume_history(two).data
    empty = optuna.visualization.plot_pareto_front(study)       # one objective: a note
    assert not empty.data and "one objective" in empty.layout.annotations[0].text


def test_trial_distributions_are_optunas_own(study):
    from optuna.distributions import (CategoricalDistribution, FloatDistribution,
                                      IntDistribution)

    done = study.get_trials(states=(real_optuna.trial.TrialState.COMPLETE,))
    trial = done[0]
    assert trial.distributions == {
        "lr": FloatDistribution(1e-4, 1e-1, log=True),
        "units": IntDistribution(8, 64),
        "opt": CategoricalDistribution(["adam", "sgd"])}
    # Optuna accepts them as they are: a trial made from them is valid in Optuna
    copy = real_optuna.trial.create_trial(params=trial.params, distributions=trial.distributions,
                                          value=trial.value)
    assert copy.params == trial.params


def test_last_step_is_the_last_reported_epoch(study):
    states = {t.number: t.state.name for t in study.trials}
    assert {"COMPLETE", "FAIL"} <= set(states.values())
    for t in study.trials:
        assert t.last_step == (3 if states[t.number] == "COMPLETE" else None), t


def test_study_direction_reads_as_optunas(study, url):
    import mpiopt as optuna

    assert [d.name for d in optuna.study.StudyDirection] == \
        [d.name for d in real_optuna.study.StudyDirection]
    assert study.direction is optuna.study.StudyDirection.MINIMIZE
    assert repr(study.direction).startswith("<StudyDirection.MINIMIZE")
    assert study.direction == "minimize"
    with optuna.load_study("two", url) as two:
        assert two.directions == [optuna.study.StudyDirection.MINIMIZE,
                                  optuna.study.StudyDirection.MAXIMIZE]
        assert [d.name for d in two.directions] == ["MINIMIZE", "MAXIMIZE"]


# ---- one naming: export (CSV, JSON), trials_dataframe(), Optuna's own frame ----------------
@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
@pytest.mark.parametrize("name", ["one", "two"])
def test_export_and_the_dataframe_name_every_column_alike_and_as_optuna_does(url, name, tmp_path):
    import csv
    import io
    import json

    import mpiopt

    with mpiopt.load_study(name, url) as study:
        frame = study.trials_dataframe()
        trials = study.trials
        directions = [d.value for d in study.directions]
        metric_names = study.metric_names
    header = next(csv.reader(io.StringIO(mpiopt_export(url, name, "csv"))))
    assert header == list(frame.columns)
    records = json.loads(mpiopt_export(url, name, "json"))
    spread = {"params": "params_", "user_attrs": "user_attrs_", "values": "values_",
              "fold_values": "fold_"}
    for record in records:
        for key, value in record.items():
            if key in spread and value:
                items = enumerate(value) if key == "fold_values" else value.items()
                assert all(f"{spread[key]}{k}" in header for k, _ in items), key
            elif key not in spread and key not in ("intermediate_values", "spans"):
                assert key in header, key
    assert [r["state"] for r in records] == list(frame["state"])
    # Optuna's own DataFrame of the same trials: each of its columns is ours, same name
    theirs = real_optuna.create_study(directions=directions)
    if len(directions) > 1:
        theirs.set_metric_names(metric_names)     # (Optuna's frame: values_<name> then)
    for t in trials:
        if t.state.name in ("COMPLETE", "FAIL"):
            theirs.add_trial(real_optuna.trial.create_trial(
                params=t.params, distributions=t.distributions, user_attrs=t.user_attrs,
                values=t.values if t.state.name == "COMPLETE" else None,
                intermediate_values=t.intermediate_values,
                state=getattr(real_optuna.trial.TrialState, t.state.name)))
    optuna_columns = set(theirs.trials_dataframe().columns)
    assert optuna_columns <= set(header), sorted(optuna_columns - set(header))
    assert ("values_cost" in header) == (name == "two")
    complete = frame[frame["state"] == "COMPLETE"]
    assert list(complete["state"].unique()) == ["COMPLETE"] and len(complete) > 0


def mpiopt_export(url: str, name: str, fmt: str) -> str:
    return mpiopt("export", name, "--storage", url, "--format", fmt, check=True).stdout
