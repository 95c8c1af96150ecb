"""Every view right for every kind of study (issue 54): several objectives, constraints,
conditional spaces, categoricals, K-fold, the trace, the smaller defects, Optuna's names.

The studies are written through the Storage API into real SQLite files (each case is a
handful of trials chosen so that the wrong answer is visible: a trial dominated by
another with the same error, an infeasible trial with the best value, ...); the commands
run through subprocess, the report in headless chromium (tests/test_report.py's helpers),
and one real `mpiopt search` under mpiexec makes a study with two objectives, a
constraint and a conditional space end to end.
"""
from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import pytest

import test_report as browser          # its helpers (browse, drawn_plots, ...) only
from conftest import mpiopt
from mpiopt.reporting.figures import panel
from mpiopt.reporting.plotly_figures import figure
from mpiopt.reporting.view import StudyView
from mpiopt.storage import open_storage
from mpiopt.trial import FrozenTrial, TrialStatus

C, P, F = TrialStatus.COMPLETE, TrialStatus.PRUNED, TrialStatus.FAILED
SPACE = json.dumps({"x": {"type": "real", "low": 0.0, "high": 1.0},
                    "opt": {"type": "categorical", "choices": ["adam", "sgd"]},
                    "lr": {"type": "real", "low": 1e-4, "high": 1e-1, "prior": "log-uniform"},
                    "momentum": {"type": "real", "low": 0.0, "high": 0.99},
                    "units": {"type": "integer", "low": 8, "high": 64}})


def spec(name: str, objective: str, training: str = "") -> str:
    return (f"study: {{name: {name}}}\nobjective: {{function: f.py:f, {objective}}}\n"
            f"search: {{algorithm: random, trials: 10}}\n{training}")


FRONT = spec("front", "metrics: {error: minimize, cost: minimize}")
THREE = spec("three", "metrics: {error: minimize, cost: minimize, size: maximize}")
FEASIBLE = spec("feasible", "metric: error, direction: minimize, constraints: ['cost <= 3']")
KFOLD = spec("kfold", "metric: loss, direction: minimize",
             "training: {epochs: 3, kfold: 2}\n")


def params(i: int) -> dict:
    """A conditional space: momentum only with sgd."""
    p = {"x": i / 10, "opt": "adam" if i % 2 else "sgd", "lr": 10 ** -(1 + i % 3), "units": 8 + 8 * i}
    if p["opt"] == "sgd":
        p["momentum"] = 0.5 + i / 100
    return p


def add(st, sid, i, status, value=None, **extra):
    t = st.create_trial(sid, params(i), seed=i, group=i % 2, host="node1")
    st.finish_trial(t.id, status, value=value, duration=2.0 + i, **extra)
    return t


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    """One database, the studies above. In `front`, trial 1 dominates trial 0 (same error,
    lower cost), which the store's best-by-value names first."""
    url = f"sqlite:///{tmp_path_factory.mktemp('views') / 'views.db'}"
    with open_storage(url, create=True) as st:
        sid = st.create_study("front", "minimize", "error", FRONT, "f" * 64, SPACE)
        for i, (error, cost) in enumerate([(0.1, 5), (0.1, 2), (0.3, 1), (0.5, 3), (0.2, 1.5)]):
            add(st, sid, i, C, error, metrics={"error": error, "cost": cost})
        add(st, sid, 5, P, 0.9, intermediate={1: 0.9})
        sid = st.create_study("three", "minimize", "error", THREE, "t" * 64, SPACE)
        for i, (e, c, s) in enumerate([(0.1, 5, 3), (0.2, 1, 1), (0.3, 3, 9), (0.4, 4, 2)]):
            add(st, sid, i, C, e, metrics={"error": e, "cost": c, "size": s})
        sid = st.create_study("feasible", "minimize", "error", FEASIBLE, "c" * 64, SPACE)
        add(st, sid, 0, C, 0.1, metrics={"cost": 5.0})       # the lowest error, infeasible
        add(st, sid, 1, C, 0.2, metrics={"cost": 2.0}, fold_values=[0.2], value_std=0.0)
        add(st, sid, 2, C, 0.4, metrics={"cost": 1.0})
        add(st, sid, 3, F, error="ValueError: lr too large (rank 1 on node1)\nTraceback ...")
        add(st, sid, 4, C, 0.3, metrics={"cost": 3.0})
        sid = st.create_study("kfold", "minimize", "loss", KFOLD, "k" * 64, SPACE)
        for i in range(5):     # folds one after another, 3 epochs each
            curve = {(f, e): 1.0 / e if f == 0 else 1.5 / e for f in (0, 1) for e in (1, 2, 3)}
            add(st, sid, i, C, 0.5 + i / 10, intermediate=curve, fold_values=[0.4, 0.6],
                value_std=0.1, metrics={"loss": 0.5})
    return url


def run_json(db, *args):
    return json.loads(mpiopt(*args, "--storage", db, "--format", "json", check=True).stdout)


def text(db, *args) -> str:
    return mpiopt(*args, "--storage", db, check=True).stdout


# ---- 1. several objectives: "best" is the front everywhere --------------------------------
def test_status_studies_and_best_name_the_front_not_a_dominated_trial(db):
    status = run_json(db, "status", "front")
    assert status["best"] is None and status["front"]["size"] == 3
    assert [t["number"] for t in status["front"]["trials"]] == [1, 4, 2]
    shown = text(db, "status", "front")
    assert "front    3 trials on the Pareto front, hypervolume" in shown
    assert "(trial 0)" not in shown and "trial 1: error 0.1, cost 2" in shown
    studies = {s["name"]: s for s in run_json(db, "studies")}
    assert studies["front"]["best"] is None and studies["front"]["front"] == 3
    assert re.search(r"^front .* front of 3 ", text(db, "studies"), re.M)
    best = run_json(db, "best", "front")
    assert [r["number"] for r in best] == [1, 4, 2]


def test_best_top_k_on_a_front_prints_k_and_says_how_many_there_are(db):
    out = text(db, "best", "front", "--top", "1").splitlines()
    assert out[0].startswith("Pareto front: 3 of 5 complete trials") and "the first 1 by error" in out[0]
    assert len(out) == 3 and out[2].split()[:2] == ["1", "1"]          # header + one row
    assert [r["number"] for r in run_json(db, "best", "front", "--top", "2")] == [1, 4]


def test_the_api_best_is_the_front(db):
    import mpiopt as optuna
    from mpiopt.study.api import MultiObjectiveError

    with optuna.load_study(study_name="front", storage=db) as study:
        assert [t.number for t in study.best_trials] == [1, 4, 2]
        assert study.directions == [optuna.study.StudyDirection.MINIMIZE] * 2
        assert study.best_trials[0].values == [0.1, 2]
        with pytest.raises(MultiObjectiveError, match="best_trials is its Pareto front"):
            study.best_trial
        with pytest.raises(RuntimeError):              # as Optuna's
            study.best_value
        assert [t.number for t in study.top_trials(2)] == [1, 4]


def test_report_shows_the_front_its_hypervolume_and_both_objectives(db, tmp_path):
    page = browser.report(db, "front", tmp_path / "front.html")
    html = page.read_text(encoding="utf-8")
    assert "Pareto front: 3 of 5 complete trials (error minimize, cost minimize)" in html
    assert "error (minimize), cost (minimize)" in html            # the header's objectives
    assert re.search(r'<table id="front">.*?<td>1</td>.*?<td>4</td>.*?<td>2</td>', html, re.S)
    assert "Best error" not in html
    dom = browser.browse(page, "--dump-dom").stdout
    drawn = browser.drawn_plots(dom)
    assert drawn["plot-pareto"] >= 1 and drawn["plot-hypervolume"] >= 1, drawn
    figures = _figures(html)
    names = [t["name"] for t in figures["plot-pareto"]["data"]]
    assert names == ["front", "dominated"]
    assert figures["plot-pareto"]["data"][0]["customdata"] == [1, 4, 2]
    dims = [d["label"] for d in figures["plot-parallel"]["data"][0]["dimensions"]]
    assert dims[-2:] == ["error", "cost"]                          # both objectives drawn


def test_three_objectives_draw_in_3d(db, tmp_path):
    page = browser.report(db, "three", tmp_path / "three.html")
    figures = _figures(page.read_text(encoding="utf-8"))
    assert {t["type"] for t in figures["plot-pareto"]["data"]} == {"scatter3d"}
    assert "zaxis" in figures["plot-pareto"]["layout"]["scene"]
    errors = browser.console_errors(browser.browse(page, "--enable-logging=stderr", "--v=0",
                                                   "--dump-dom").stderr)
    assert errors == []


@pytest.mark.parametrize("kind", ["pareto", "hypervolume"])
def test_plot_pareto_and_hypervolume(db, tmp_path, kind):
    out = tmp_path / f"{kind}.png"
    proc = mpiopt("plot", kind, "front", "--storage", db, "-o", out)
    assert proc.returncode == 0, proc.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    one = mpiopt("plot", kind, "feasible", "--storage", db, "-o", tmp_path / "one.png")
    assert one.returncode == 0 and "one objective" in one.stderr


def test_hypervolume_over_trials_only_grows_and_ends_at_the_fronts():
    from mpiopt.search.pareto import hypervolume

    trials = [_trial(i, e, metrics={"error": e, "cost": c})
              for i, (e, c) in enumerate([(0.5, 3), (0.3, 1), (0.1, 2), (0.1, 5)])]
    shown = panel("hypervolume", _view(trials, FRONT)).data["history"]
    assert [n for n, _ in shown] == [0, 1, 2, 3]
    values = [v for _, v in shown]
    assert values == sorted(values)
    assert values[-1] == pytest.approx(hypervolume([(0.3, 1), (0.1, 2)], (0.5, 5)))


# ---- 2. constraints: marked in every table and export ----------------------------------------
def test_infeasible_trials_are_marked_in_tables_show_and_exports(db, tmp_path):
    rows = run_json(db, "trials", "feasible", "--sort", "value")
    first = rows[0]
    assert first["number"] == 0 and first["feasible"] == "no" and first["metrics"] == {"cost": 5.0}
    assert [r["feasible"] for r in rows if r["number"] in (1, 2, 4)] == ["yes"] * 3
    table = text(db, "trials", "feasible", "--sort", "value").splitlines()
    head = table[0].split()
    assert head[:5] == ["number", "status", "value", "value_std", "feasible"]
    assert table[1].split()[:5] == ["0", "COMPLETE", "0.1", "-", "no"] and "cost=5" in table[1]
    shown = text(db, "show", "feasible", "0")
    assert "INFEASIBLE: breaks cost <= 3 (never best)" in shown
    assert "feasible: meets cost <= 3" in text(db, "show", "feasible", "1")
    exported = mpiopt("export", "feasible", "--storage", db, check=True).stdout
    by_number = {r["number"]: r for r in csv.DictReader(io.StringIO(exported))}
    assert by_number["0"]["feasible"] == "no" and by_number["1"]["feasible"] == "yes"
    assert by_number["3"]["feasible"] == ""                     # failed: nothing to say
    dumped = json.loads(mpiopt("export", "feasible", "--format", "json", "--storage", db,
                               check=True).stdout)
    assert [t["feasible"] for t in dumped][:2] == ["no", "yes"]


def test_the_best_of_a_constrained_study_is_feasible_everywhere(db, tmp_path):
    assert run_json(db, "status", "feasible")["best"]["number"] == 1
    assert "best     (feasible) 0.2 (trial 1)" in text(db, "status", "feasible")
    assert {s["name"]: s for s in run_json(db, "studies")}["feasible"]["best"] == 0.2
    import mpiopt

    with mpiopt.load_study("feasible", storage=db) as study:
        assert study.best_trial.number == 1 and study.best_value == 0.2
    html = browser.report(db, "feasible", tmp_path / "c.html").read_text(encoding="utf-8")
    assert "Best feasible error <b>0.2</b> (trial 1)" in html
    assert "1 complete trial(s) break a constraint (cost &lt;= 3)" in html
    history = _figures(html)["plot-history"]["data"]
    grey = [t for t in history if t["name"] == "complete, infeasible"]
    assert grey and grey[0]["customdata"] == [0] and grey[0]["marker"]["color"] == "#bbbbbb"


def test_trials_json_and_table_carry_metrics(db):
    rows = run_json(db, "trials", "kfold")
    assert rows[0]["metrics"] == {"loss": 0.5}
    assert "metrics" in text(db, "trials", "kfold").splitlines()[0].split()


# ---- 3, 4. conditional parameters and categoricals -------------------------------------------
def test_an_absent_parameter_is_not_drawn_as_a_value(db, tmp_path):
    view = _stored_view(db, "kfold")
    shown = panel("parallel", view)
    for axis in shown.data["axes"]:
        assert None not in axis["values"], axis["name"]
    assert "momentum" in shown.caption and "not drawn" in shown.caption
    assert len(shown.data["numbers"]) == 3          # the sgd trials: 0, 2, 4
    page = browser.report(db, "kfold", tmp_path / "k.html")
    assert "they lack a conditional parameter (momentum)" in page.read_text(encoding="utf-8")
    out = tmp_path / "parallel.png"
    proc = mpiopt("plot", "parallel", "kfold", "--storage", db, "-o", out, check=True)
    assert "lack a conditional parameter (momentum)" in proc.stderr
    for kind in ("slice", "contour"):        # momentum's absence is no point, in PNG too
        mpiopt("plot", kind, "kfold", "--storage", db, "-o", tmp_path / f"{kind}.png", check=True)
    view.cache.setdefault("shares", {"momentum": 0.6, "x": 0.4})    # the contour over both
    contour = panel("contour", view)
    assert contour.data["points"]["numbers"] == [0, 2, 4] and "lack momentum or x" in contour.caption
    assert None not in contour.data["points"]["x"] + contour.data["points"]["y"]


def test_the_contour_does_not_interpolate_across_a_categorical(tmp_path):
    space = {"opt": {"type": "categorical", "choices": ["adam", "sgd"]},
             "x": {"type": "real", "low": 0.0, "high": 1.0}}
    trials = [_trial(i, (i % 2) * 2 + (i / 10 - 0.3) ** 2, {"opt": ["adam", "sgd"][i % 2], "x": i / 10})
              for i in range(10)]
    shown = panel("contour", _view(trials, "", space))
    assert shown.data["cells"] is True
    assert figure(shown)["data"][0]["type"] == "heatmap"
    from mpiopt.reporting.static import save

    save(shown, tmp_path / "c.png")                    # cells in matplotlib too


# ---- 5. K-fold learning curves --------------------------------------------------------------
def test_sequential_kfold_curves_break_and_draw_the_fold_boundary(db, tmp_path):
    shown = panel("curves", _stored_view(db, "kfold"))
    assert shown.data["folds"] == {"count": 2, "offsets": [0, 3], "widths": [3, 3],
                                   "boundaries": [3.5],
                                   "ticks": [[1, 1], [2, 2], [3, 3], [4, 1], [5, 2], [6, 3]]}
    line = shown.data["lines"][0]
    assert line["epochs"] == [1, 2, 3, None, 4, 5, 6] and line["values"][3] is None
    html = browser.report(db, "kfold", tmp_path / "k.html").read_text(encoding="utf-8")
    layout = _figures(html)["plot-curves"]["layout"]
    assert [s["x0"] for s in layout["shapes"]] == [3.5]
    assert [a["text"] for a in layout["annotations"]] == ["fold 0", "fold 1"]


def test_kfold_curves_place_each_value_at_its_stored_fold_and_epoch():
    """Issue 62: with training.epochs searched, a trial of 2 epochs and one of 4 are drawn
    fold by fold from what each stored, (fold, epoch), not from a step decoded with the
    spec's epochs (the spec says 3 here: it must not matter)."""
    from mpiopt.trial import Step

    short = {Step(f, e): 1.0 - 0.1 * e for f in (0, 1, 2) for e in (1, 2)}
    long = {Step(f, e): 0.9 - 0.1 * e for f in (0, 1) for e in (1, 2, 3, 4)}
    trials = [_trial(0, 0.8, intermediate=short), _trial(1, 0.5, status=P, intermediate=long)]
    shown = panel("curves", _view(trials, "training: {epochs: 3, kfold: 3}\n"))
    folds = shown.data["folds"]
    assert (folds["offsets"], folds["widths"], folds["boundaries"]) == ([0, 4, 8], [4, 4, 2],
                                                                        [4.5, 8.5])
    a, b = shown.data["lines"]
    assert a["epochs"] == [1, 2, None, 5, 6, None, 9, 10]       # (1, 1) at x 5 in both
    assert b["epochs"] == [1, 2, 3, 4, None, 5, 6, 7, 8] and b["pruned"]
    assert "3 folds" in shown.title and "count from 1" in shown.title
    one = panel("curves", _view([_trial(0, 0.5, intermediate={Step(0, 1): 0.5, Step(0, 2): 0.4})],
                                "training: {epochs: 1, kfold: 3}\n"))
    assert "folds" not in one.data and one.data["lines"][0]["epochs"] == [1, 2]


# ---- 6. the Chrome trace nests -----------------------------------------------------------------
def test_every_track_of_the_chrome_trace_nests():
    """Suggestions asked ahead overlap (0.5 s apart, 2 s each): each lane nests; a fold's
    epoch that ran past its trial's cut slice is clipped to it."""
    from mpiopt.reporting.trace import chrome_trace

    spans = [{"kind": "fold", "fold": 0, "epoch": None, "start": 0.0, "end": 5.0},
             {"kind": "epoch", "fold": 0, "epoch": 1, "start": 0.0, "end": 5.0}]
    trials = [_trial(i, 1.0, group=i % 2, start=3 + 0.5 * i, seconds=4.0, suggest_seconds=2.0,
                     spans=spans) for i in range(6)]
    events = chrome_trace(_view(trials, ""))["traceEvents"]
    slices = [e for e in events if e["ph"] == "X"]
    assert any(e["tid"] != 0 for e in slices if e["cat"] == "suggest")   # a second lane
    for tid in {e["tid"] for e in slices}:
        track = sorted((e for e in slices if e["tid"] == tid), key=lambda e: (e["ts"], -e["dur"]))
        for a in track:
            for b in track:
                if a is not b and a["ts"] <= b["ts"] < a["ts"] + a["dur"]:
                    assert b["ts"] + b["dur"] <= a["ts"] + a["dur"], (tid, a, b)


def test_a_pruned_trial_keeps_its_epoch_spans():
    """The trainer's spans travel with the Pruned that ends a trial, into its Result."""
    from mpiopt.errors import Pruned
    from mpiopt.objective.evaluate import stopped_result
    from mpiopt.training.folds import Plan, run_folds
    from mpiopt.trial import Trial

    class Comm:
        def Get_rank(self):
            return 0

        def bcast(self, x, root=0):
            return x

    class Trainer:
        def __init__(self, fold):
            self.fold, self.epoch, self.done, self.history, self.artifacts = fold, 0, False, [], None
            self.spans = [{"kind": "fold", "fold": fold, "epoch": None, "start": 0.0, "end": 0.0}]

        def run_epoch(self):
            self.epoch += 1
            self.spans.append({"kind": "epoch", "fold": self.fold, "epoch": self.epoch,
                               "start": self.epoch - 1.0, "end": float(self.epoch)})
            return 1.0, {}

    with pytest.raises(Pruned) as caught:
        run_folds(Comm(), Plan(1, False, 1), lambda comm, fold: Trainer(fold), 5,
                  lambda epoch, value, fold: epoch < 2, None)
    result = stopped_result(Trial(1, 0, {}, 0), caught.value, "rank 0")
    assert result.status == TrialStatus.PRUNED
    assert [s["epoch"] for s in result.spans if s["kind"] == "epoch"] == [1, 2]


# ---- 7. the smaller ones -------------------------------------------------------------------------
def test_no_zero_line_and_whole_number_ticks_and_the_metric_on_the_y_axis(db, tmp_path):
    view = _stored_view(db, "kfold")
    for kind in ("history", "slice", "curves", "folds", "timeline", "contour"):
        fig = figure(panel(kind, view))
        for key, axis in fig["layout"].items():
            if key.startswith(("xaxis", "yaxis")):
                assert axis["zeroline"] is False, (kind, key)
    page = browser.report(db, "feasible", tmp_path / "f.html")
    dom = browser.browse(page, "--dump-dom").stdout
    history = dom[dom.index('id="plot-history"'):dom.index('id="parallel"')]
    ticks = re.findall(r'class="xtick"><text[^>]*>([^<]*)<', history)
    assert ticks and all(re.fullmatch(r"\d+", t) for t in ticks), ticks    # 5 trials: 0..4
    assert re.search(r'class="g-ytitle".*?>error<', history)
    assert "colorbar" in dom[dom.index('id="plot-slice"'):dom.index('id="contour"')]


def test_log_axes_keep_their_labels_clear_of_the_title(db):
    layout = figure(panel("slice", _stored_view(db, "kfold")))["layout"]
    lr = next(a for a in layout.values() if isinstance(a, dict) and a.get("type") == "log")
    assert lr["automargin"] is True and lr["exponentformat"] == "power"
    assert lr["title"]["standoff"] > 0 and layout["grid"]["ygap"] >= 0.4


def test_studies_has_a_pruned_column(db):
    assert {s["name"]: s for s in run_json(db, "studies")}["front"]["pruned"] == 1
    assert "pruned" in text(db, "studies").splitlines()[0].split()


def test_one_fold_shows_no_spread_and_failed_trials_show_their_error(db):
    shown = text(db, "show", "feasible", "1")
    assert "error (minimize): 0.2\n" in shown and "±" not in shown
    assert run_json(db, "trials", "feasible")[1]["value_std"] is None
    failed = text(db, "trials", "feasible", "--status", "FAILED").splitlines()
    assert failed[0].split()[-1] == "error"
    assert failed[1].endswith("ValueError: lr too large (rank 1 on node1)")


def test_a_dead_job_reads_stopped_in_every_line_and_a_live_one_says_its_period(tmp_path):
    import socket

    url = f"sqlite:///{tmp_path / 'dead.db'}"
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    with open_storage(url, create=True) as st:
        dead = st.create_study("dead", "minimize", "loss", spec("dead", "metric: loss"), "d" * 64, SPACE)
        st.join_study(dead, socket.gethostname(), gone.pid, 30)
        live = st.create_study("live", "minimize", "loss", spec("live", "metric: loss"), "l" * 64, SPACE)
        st.join_study(live, socket.gethostname(), os.getpid(), 30)
    lines = text(url, "status", "dead").splitlines()
    assert lines[0].startswith("study    dead (stopped (") and "RUNNING" not in lines[0]
    assert f"stopped without a word (its process {gone.pid} is gone" in lines[-1]
    states = {s["name"]: s["state"] for s in run_json(url, "studies")}
    assert states["dead"].startswith("stopped") and states["live"] == "running"
    live_state = text(url, "status", "live").splitlines()[-1]
    assert "it beats every 30s, and 1m30s without one means the job died" in live_state


def test_svg_text_is_text(db, tmp_path):
    out = tmp_path / "h.svg"
    mpiopt("plot", "history", "feasible", "--storage", db, "-o", out, check=True)
    svg = out.read_text()
    assert re.search(r"<text[^>]*>[^<]*Optimization history \(error, minimize\)", svg)
    assert "<text" in svg and 'id="DejaVuSans-' not in svg       # no glyphs drawn as paths


def test_a_model_panel_says_why_pruned_trials_leave_it_empty():
    trials = [_trial(i, float(i), {"x": i / 10, "opt": "adam"}) for i in range(3)]
    trials += [_trial(i, 9.0, {"x": 0.5, "opt": "sgd"}, status=P) for i in range(3, 10)]
    for kind in ("importance", "contour"):
        note = panel(kind, _view(trials, "")).note
        assert "3 complete trial(s)" in note and "7 pruned trial(s) are left out" in note


# ---- 9. an Optuna user's first lines ------------------------------------------------------------
def test_an_optuna_users_first_lines_run_unchanged(db):
    """Optuna's tutorial lines, `import optuna` replaced by `import mpiopt as optuna` and
    the storage URL by this database's; nothing else changed."""
    storage_url = db
    import mpiopt as optuna

    study = optuna.load_study(study_name="feasible", storage=storage_url)
    print(study.study_name, study.direction, study.directions)
    print(study.best_trial.params, study.best_value, study.best_params)
    df = study.trials_dataframe()
    print(df[df.state == "COMPLETE"].sort_values("value").head())
    complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    print([t.state for t in study.trials], len(complete))
    trial = study.trials[1]
    print(trial.number, trial.value, trial.params, trial.intermediate_values, trial.user_attrs)
    print(trial.datetime_start, trial.datetime_complete, trial.duration.total_seconds())
    print(study.user_attrs, [t.number for t in study.best_trials])
    assert study.direction == optuna.study.StudyDirection.MINIMIZE == "minimize"
    assert study.best_trial.number == 1 and len(complete) == 4
    assert [t.state for t in study.trials][3] == optuna.trial.TrialState.FAIL
    assert list(df.columns[:5]) == ["number", "value", "datetime_start", "datetime_complete",
                                    "duration"]
    assert "status" not in df and list(df["state"])[3] == "FAIL"
    assert str(df["value_std"].dtype) == "float64" and math.isnan(df["value_std"][1])
    assert df["duration"][0] == timedelta(seconds=2.0)
    assert trial.datetime_start.tzinfo is not None and trial.user_attrs == {"cost": 2.0}
    assert optuna.get_all_study_names(storage=storage_url)[:2] == ["front", "three"]
    study.close()


def test_intermediate_values_and_the_frame_of_several_objectives(db):
    import mpiopt

    with mpiopt.load_study(study_name="kfold", storage=db) as study:
        assert study.trials[0].intermediate_values[(1, 1)] == 1.5
    with mpiopt.load_study("front", db) as study:        # the shipped positional form too
        frame = study.trials_dataframe()
        assert list(frame.columns[:3]) == ["number", "values_error", "values_cost"]
        assert list(frame["values_cost"][:2]) == [5, 2]
        assert list(study.trials_dataframe(attrs=("number", "params")).columns) == [
            "number", "params_x", "params_opt", "params_lr", "params_units", "params_momentum"]


# ---- the same, end to end: a real search ----------------------------------------------------------
SEARCH = """
study: {name: live}
objective:
  function: %s:trade_off
  metrics: {error: minimize, cost: minimize}
  constraints: ["latency <= 0.8"]
search_space:
  opt: [adam, sgd]
  lr: {type: real, low: 1.0e-4, high: 1.0e-1, prior: log-uniform}
  momentum: {type: real, low: 0.0, high: 0.99, when: {opt: sgd}}
  units: {type: integer, low: 8, high: 64}
search: {algorithm: random, trials: 16, seed: 5}
"""


def test_a_real_study_with_two_objectives_a_constraint_and_conditions(tmp_path):
    """mpiexec -n 3 (two groups): the report draws it without a script error, with the
    front, the hypervolume, infeasible trials grey and momentum's absence noted."""
    objective = tmp_path / "views_objective.py"
    objective.write_text(
        "import math\n\ndef trade_off(p):\n"
        "    error = (math.log10(p['lr']) + 2.5) ** 2 + (0.3 if p['opt'] == 'sgd' else 0.0)\n"
        "    error += (1 - p.get('momentum', 1.0)) * 0.2\n"
        "    cost = p['units'] / 64\n"
        "    return {'error': error, 'cost': cost, 'latency': cost + 0.2}\n")
    path = tmp_path / "live.yaml"
    path.write_text(SEARCH % objective)
    url = f"sqlite:///{tmp_path / 'live.db'}"
    mpiopt("search", path, "--storage", url, np=3, cwd=tmp_path, check=True, timeout=180)
    status = run_json(url, "status", "live")
    assert status["best"] is None and status["front"]["size"] >= 1
    rows = run_json(url, "trials", "live")
    assert {r["feasible"] for r in rows} == {"yes", "no"}
    page = browser.report(url, "live", tmp_path / "live.html")
    proc = browser.browse(page, "--enable-logging=stderr", "--v=0", "--dump-dom")
    assert browser.console_errors(proc.stderr) == []
    drawn = browser.drawn_plots(proc.stdout)
    assert drawn["plot-pareto"] >= 1 and drawn["plot-hypervolume"] >= 1
    html = page.read_text(encoding="utf-8")
    assert "grey:" in html and "lack a conditional parameter (momentum)" in html
    front = {t["number"] for t in status["front"]["trials"]}
    assert front == {t["number"] for t in run_json(url, "best", "live")}


# ---- helpers ------------------------------------------------------------------------------------------
T0 = datetime(2026, 1, 1, 12, tzinfo=timezone.utc)


def _trial(number, value, params=None, status=C, group=0, start=None, seconds=1.0, **extra):
    begin = T0 + timedelta(seconds=number if start is None else start)
    return FrozenTrial(id=number + 1, study_id=1, number=number, status=status,
                       params=params if params is not None else {"x": number / 10},
                       value=value, group=group, started_at=begin, duration=seconds,
                       finished_at=begin + timedelta(seconds=seconds), **extra)


def _view(trials, spec_text: str, space=None):
    record = SimpleNamespace(name="s", direction="minimize", metric="error",
                             space_json=json.dumps(space or {"x": {"type": "real", "low": 0.0,
                                                                   "high": 1.0}}),
                             spec_text=spec_text)
    return StudyView.of(record, trials, now=T0 + timedelta(hours=1))


def _stored_view(url: str, name: str):
    with open_storage(url, read_only=True) as st:
        record = st.get_study(name)
        return StudyView.of(record, st.get_trials(record.id))


def _figures(html: str) -> dict:
    return json.loads(re.search(r"const FIGURES = (\{.*?\});\n", html, re.S).group(1))



def test_the_dashboard_names_the_front_and_the_best_feasible_trial(db):
    """The live view says "best" as every other view does: the front of a study with
    several objectives (not its dominated trial 0), the best feasible trial of one with a
    constraint (not the infeasible trial 0 of lowest error)."""
    from mpiopt.reporting.dashboard import _best
    from mpiopt.reporting.view import StudyView

    with open_storage(db) as st:
        views = {name: StudyView.of(st.get_study(name), st.get_trials(st.get_study(name).id))
                 for name in ("front", "feasible")}
    front = _best(views["front"])
    assert front["front"] == [1, 4, 2] and "Pareto front" in front["title"]
    assert _best(views["feasible"])["number"] == 1
