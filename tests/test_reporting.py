"""mpiopt.reporting on FrozenTrials made here: importance, timeline, degenerate studies, trace.

No database and no subprocess: the data each plot shows is checked directly, so a wrong
number fails here before any renderer is involved. tests/test_report.py runs the real
commands on real studies.
"""
from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import pytest

from mpiopt.reporting.figures import KINDS, panel
from mpiopt.reporting.trace import chrome_trace
from mpiopt.reporting.view import StudyView
from mpiopt.trial import FrozenTrial, TrialStatus

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)
SPACE = {"x": {"type": "real", "low": 0.0, "high": 1.0, "prior": "uniform"},
         "lr": {"type": "real", "low": 1e-4, "high": 1e-1, "prior": "log-uniform"},
         "act": {"type": "categorical", "choices": ["relu", "tanh"]}}


@dataclass(frozen=True)
class NewTrial(FrozenTrial):
    """FrozenTrial with the fields the lead is adding (device, suggest_seconds, spans)."""

    device: str | None = None
    suggest_seconds: float | None = None
    spans: list = field(default_factory=list)


def record(space=SPACE, direction="minimize"):
    return SimpleNamespace(name="s", direction=direction, metric="loss",
                           space_json=json.dumps(space))


def trial(number, params, value=None, status=TrialStatus.COMPLETE, group=0, start=0.0,
          seconds=1.0, cls=FrozenTrial, **extra):
    begin = T0 + timedelta(seconds=start)
    return cls(id=number + 1, study_id=1, number=number, status=status, params=params,
               value=value, group=group, started_at=begin, duration=seconds,
               finished_at=begin + timedelta(seconds=seconds), **extra)


def view(trials, space=SPACE, direction="minimize"):
    return StudyView.of(record(space, direction), trials, now=T0 + timedelta(hours=1))


@pytest.mark.parametrize("size", [1.0, 1e300])   # (finite values of any size: mpiopt.search.scaling)
def test_importance_finds_the_parameter_that_matters(size):
    rng = random.Random(0)
    trials = []
    for n in range(40):
        p = {"x": rng.random(), "lr": 10 ** rng.uniform(-4, -1), "act": rng.choice(["relu", "tanh"])}
        trials.append(trial(n, p, value=size * ((p["x"] - 0.3) ** 2 + 0.001 * rng.random())))
    shown = panel("importance", view(trials))
    shares = dict(shown.data["shares"])
    assert list(shares)[0] == "x" and shares["x"] > 0.8, shares
    assert shares["lr"] < 0.1 and shares["act"] < 0.1
    assert 0 <= shown.data["rest"] <= 1 and sum(shares.values()) <= 1 + 1e-9


def test_log_and_categorical_axes_come_from_the_stored_space():
    trials = [trial(n, {"x": n / 10, "lr": 10 ** -(n % 4 + 1), "act": "tanh"}, value=float(n))
              for n in range(6)]
    axes = {a["name"]: a for a in panel("parallel", view(trials)).data["axes"]}
    assert axes["lr"]["log"] and axes["lr"]["values"][:2] == pytest.approx([-1, -2])
    assert axes["act"]["ticks"] == [[0.0, "relu"], [1.0, "tanh"]] and axes["act"]["values"][0] == 1
    contour = panel("contour", view(trials)).data
    for axis in (contour["x"], contour["y"]):
        if axis["name"] == "lr":   # a log axis gets its grid in values, 1e-4 .. 1e-1
            assert axis["grid"][0] == pytest.approx(1e-4) and axis["grid"][-1] == pytest.approx(0.1)
    assert len(contour["z"]) == len(contour["y"]["grid"])
    assert len(contour["z"][0]) == len(contour["x"]["grid"])


def test_history_best_so_far_follows_the_direction():
    values = [5.0, 3.0, 4.0, 1.0]
    trials = [trial(n, {"x": 0.1, "lr": 0.01, "act": "relu"}, value=v) for n, v in enumerate(values)]
    trials.append(trial(4, {"x": 0.2, "lr": 0.01, "act": "relu"}, value=0.5,
                        status=TrialStatus.PRUNED))
    low = panel("history", view(trials)).data
    assert [b[1] for b in low["best"]] == [5.0, 3.0, 3.0, 1.0]          # pruned: not a best
    assert [p["status"] for p in low["points"]].count("PRUNED") == 1
    high = panel("history", view(trials, direction="maximize")).data
    assert [b[1] for b in high["best"]] == [5.0, 5.0, 5.0, 5.0]


def test_timeline_efficiency_and_idle_gaps():
    p = {"x": 0.5, "lr": 0.01, "act": "relu"}
    trials = [trial(0, p, 1.0, group=0, start=0, seconds=4),     # group 0: busy 0-4, 6-10
              trial(1, p, 1.0, group=0, start=6, seconds=4),
              trial(2, p, 1.0, group=1, start=0, seconds=5)]     # group 1: busy 0-5
    d = panel("timeline", view(trials)).data
    assert d["tracks"] == [{"job": None, "group": 0}, {"job": None, "group": 1}]
    assert d["wall"] == pytest.approx(10) and d["held"] == pytest.approx(20)
    assert d["busy"] == pytest.approx(13) and d["efficiency"] == pytest.approx(13 / 20)
    assert sorted(map(tuple, d["idle"])) == [(0, 4.0, 6.0), (1, 5.0, 10.0)]


def job_record(id, host, launcher=None):
    return SimpleNamespace(id=id, host=host, launcher=launcher, pid=100 + id)


def test_timeline_keeps_each_jobs_groups_together_and_counts_only_the_time_jobs_held():
    """Two jobs both have a group 0: two tracks, job by job under their labels. Job 2
    started after job 1 ended; the time between them is nobody's, so it is not idle."""
    p = {"x": 0.5, "lr": 0.01, "act": "relu"}
    trials = [trial(0, p, 1.0, group=0, start=0, seconds=4, job=1),
              trial(1, p, 1.0, group=1, start=0, seconds=2, job=1),     # idle 2-4 in job 1
              trial(2, p, 1.0, group=0, start=100, seconds=5, job=2),
              trial(3, p, 1.0, group=0, start=105, seconds=5, job=2)]
    v = StudyView.of(record(), trials, now=T0 + timedelta(hours=1),
                     jobs=[job_record(1, "n1", "slurm 42_0"), job_record(2, "n2")])
    d = panel("timeline", v).data
    assert d["tracks"] == [{"job": 1, "group": 0}, {"job": 1, "group": 1}, {"job": 2, "group": 0}]
    assert [(b["number"], b["track"]) for b in d["bars"]] == [(0, 0), (1, 1), (2, 2), (3, 2)]
    assert [(j["label"], j["first"], j["last"]) for j in d["jobs"]] == [
        ("job 1 (n1, slurm 42_0)", 0, 1), ("job 2 (n2)", 2, 2)]
    assert d["held"] == pytest.approx(4 + 4 + 10) and d["busy"] == pytest.approx(4 + 2 + 10)
    assert d["efficiency"] == pytest.approx(16 / 18)
    assert [tuple(i) for i in d["idle"]] == [(1, 2.0, 4.0)]


def test_the_drawn_timeline_labels_each_job_and_names_tracks_by_group():
    from mpiopt.reporting.plotly_figures import figure

    p = {"x": 0.5, "lr": 0.01, "act": "relu"}
    trials = [trial(0, p, 1.0, group=0, start=0, seconds=4, job=1),
              trial(1, p, 1.0, group=0, start=1, seconds=4, job=2)]
    v = StudyView.of(record(), trials, now=T0 + timedelta(hours=1),
                     jobs=[job_record(1, "n1", "slurm 42_0"), job_record(2, "n2", "slurm 42_1")])
    layout = figure(panel("timeline", v))["layout"]
    assert layout["yaxis"]["ticktext"] == ["group 0", "group 0"]
    assert [(a["text"], a["y"]) for a in layout["annotations"]] == [
        ("job 1 (n1, slurm 42_0)", 0.45), ("job 2 (n2, slurm 42_1)", 1.45)]
    assert [s["y0"] for s in layout["shapes"] if s["type"] == "line"] == [0.5]
    # a database from before jobs were recorded: no job labels
    old = figure(panel("timeline", view([trial(0, p, 1.0, group=0)])))["layout"]
    assert old["annotations"] == [] and old["yaxis"]["ticktext"] == ["group 0"]


def test_a_running_trial_ends_now():
    p = {"x": 0.5, "lr": 0.01, "act": "relu"}
    running = FrozenTrial(id=1, study_id=1, number=0, status=TrialStatus.RUNNING, params=p,
                          group=0, started_at=(T0 + timedelta(minutes=50)).replace(tzinfo=None))
    d = panel("timeline", view([running])).data     # naive datetime, as SQLite returns it
    assert d["bars"][0]["end"] == pytest.approx(600) and d["efficiency"] == pytest.approx(1)


DEGENERATE = {
    "no trial": [],
    "all failed": [trial(n, {"x": 0.1, "lr": 0.01, "act": "relu"}, status=TrialStatus.FAILED,
                         error="RuntimeError: boom (rank 1 on n1)") for n in range(3)],
    "one parameter": [trial(n, {"x": n / 10}, value=float(n)) for n in range(6)],
    "one complete trial": [trial(0, {"x": 0.1, "lr": 0.01, "act": "relu"}, value=1.0)],
}


@pytest.mark.parametrize("case", DEGENERATE)
def test_degenerate_studies_get_notes_not_crashes(case):
    space = {"x": SPACE["x"]} if case == "one parameter" else SPACE
    v = view(DEGENERATE[case], space)
    panels = {k: panel(k, v) for k in KINDS + ("failures",)}
    # no epochs and no folds in any of them
    assert "per-epoch" in panels["curves"].note and "per-fold" in panels["folds"].note
    if case == "no trial":
        assert all(panels[k].note for k in KINDS)
    if case == "all failed":   # failed trials still took their groups' time
        assert all(panels[k].note for k in KINDS if k != "timeline")
        assert {b["status"] for b in panels["timeline"].data["bars"]} == {"FAILED"}
        assert "all 3 trial(s) failed" in panels["history"].note
        assert len(panels["failures"].data["rows"]) == 3
    if case == "one parameter":
        assert "1 parameter" in panels["importance"].note and "1 parameter" in panels["contour"].note
        assert panels["slice"].note is None and panels["history"].note is None
    if case == "one complete trial":
        assert "needs at least" in panels["importance"].note and panels["parallel"].note is None
    from mpiopt.reporting.html import render

    page = render(v)
    for p in panels.values():
        if p.note:
            assert p.note.replace("'", "&#x27;") in page


def test_constant_values_say_there_is_nothing_to_explain():
    trials = [trial(n, {"x": n / 10, "lr": 0.01, "act": "relu"}, value=2.0) for n in range(6)]
    assert "same loss" in panel("importance", view(trials)).note


def test_device_is_in_the_hover_text_when_the_trial_has_one():
    from mpiopt.reporting.html import render

    trials = [trial(0, {"x": 0.1, "lr": 0.01, "act": "relu"}, value=1.0, cls=NewTrial,
                    device="gpu: NVIDIA H100")]
    assert "device: gpu: NVIDIA H100" in render(view(trials))


def _tracks(trace):
    return {e["args"]["name"]: e["tid"] for e in trace["traceEvents"]
            if e["ph"] == "M" and e["name"] == "thread_name"}


def test_chrome_trace_tracks_spans_and_suggestions():
    p = {"x": 0.5, "lr": 0.01, "act": "relu"}
    sequential = [{"kind": "fold", "fold": f, "epoch": None, "start": 2.0 * f, "end": 2.0 * f + 2}
                  for f in range(2)] + [
                 {"kind": "epoch", "fold": f, "epoch": e, "start": 2.0 * f + e, "end": 2.0 * f + e + 1}
                  for f in range(2) for e in range(2)]
    concurrent = [{"kind": "fold", "fold": f, "epoch": None, "start": 0.0, "end": 3.0}
                  for f in range(2)]
    trials = [trial(0, p, 1.0, group=0, start=1, seconds=4, cls=NewTrial, spans=sequential,
                    suggest_seconds=0.5, device="cpu: AMD EPYC 7763"),
              trial(1, p, 2.0, group=1, start=1, seconds=3, cls=NewTrial, spans=concurrent,
                    suggest_seconds=0.25),
              trial(2, p, status=TrialStatus.FAILED, group=1, start=5, seconds=0.5,
                    error="RuntimeError: boom (rank 2 on n1)\nTraceback ...")]
    trace = json.loads(json.dumps(chrome_trace(view(trials))))
    tracks = _tracks(trace)
    assert {"coordinator", "group 0", "group 1", "group 1 fold 0", "group 1 fold 1"} == set(tracks)
    events = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    by_name = {e["name"]: e for e in events}
    # t0 is the first suggestion's start: trial 0 started 0.5 s later
    assert by_name["suggest trial 0"]["ts"] == 0 and by_name["trial 0"]["ts"] == 500_000
    assert by_name["suggest trial 0"]["tid"] == tracks["coordinator"]
    assert by_name["trial 0"]["dur"] == 4_000_000 and by_name["trial 0"]["tid"] == tracks["group 0"]
    assert by_name["trial 0"]["args"]["device"] == "cpu: AMD EPYC 7763"
    assert by_name["trial 2"]["args"]["error"] == "RuntimeError: boom (rank 2 on n1)"
    # sequential folds and their epochs nest inside the trial, on the group's track
    inner = [e for e in events if e["tid"] == tracks["group 0"] and e["cat"] in ("fold", "epoch")]
    assert len(inner) == 6
    for e in inner:
        assert by_name["trial 0"]["ts"] <= e["ts"] and \
            e["ts"] + e["dur"] <= by_name["trial 0"]["ts"] + by_name["trial 0"]["dur"]
    assert by_name["fold 1 epoch 1"]["ts"] == 500_000 + 3_000_000
    # concurrent folds overlap, so each gets a track of its own
    folds = {e["args"]["fold"]: e["tid"] for e in events
             if e["cat"] == "fold" and e["args"]["trial"] == 1}
    assert folds == {0: tracks["group 1 fold 0"], 1: tracks["group 1 fold 1"]}


def test_chrome_trace_gives_each_job_a_process_of_its_own():
    p = {"x": 0.5, "lr": 0.01, "act": "relu"}
    trials = [trial(0, p, 1.0, group=0, start=0, seconds=4, job=1),
              trial(1, p, 1.0, group=0, start=1, seconds=4, job=2)]
    v = StudyView.of(record(), trials, now=T0 + timedelta(hours=1),
                     jobs=[job_record(1, "n1", "slurm 42_0"), job_record(2, "n2")])
    trace = chrome_trace(v)
    names = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"]
             if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == {1: "study s, job 1 (n1, slurm 42_0)", 2: "study s, job 2 (n2)"}
    placed = {e["name"]: (e["pid"], e["tid"]) for e in trace["traceEvents"] if e["ph"] == "X"}
    assert placed == {"trial 0": (1, 1), "trial 1": (2, 1)}     # both group 0, apart


def test_chrome_trace_of_an_old_database_has_trials_only():
    p = {"x": 0.5, "lr": 0.01, "act": "relu"}
    trace = chrome_trace(view([trial(0, p, 1.0, group=3)]))
    assert set(_tracks(trace)) == {"group 3"}
    assert [e["name"] for e in trace["traceEvents"] if e["ph"] == "X"] == ["trial 0"]
    assert math.isclose(trace["traceEvents"][-1]["dur"], 1e6)


def test_a_curve_of_every_batch_is_thinned_keeping_its_ends_and_extremes():
    """A function reporting every batch (20,000 values a trial) made a 7.9 MB report for 4
    trials; each curve keeps about CURVE_POINTS points, its lowest and highest per bucket,
    its first and last epoch, and one point of a stretch with no finite value."""
    from mpiopt.reporting.figures import thinned_curve

    values = {e: 1.0 / (e + 1) for e in range(20000)}
    values[12345] = 7.0                                    # a spike
    values.update({e: float("nan") for e in range(15000, 15400)})
    curve = thinned_curve(values, 400)
    assert len(curve["epochs"]) <= 402 and curve["epochs"] == sorted(curve["epochs"])
    assert curve["epochs"][0] == 0 and curve["epochs"][-1] == 19999
    assert 12345 in curve["epochs"] and min(v for v in curve["values"] if v == v) == values[19999]
    assert any(15000 <= e < 15400 for e in curve["epochs"])
    assert [values[e] for e in curve["epochs"]][:5] == curve["values"][:5]
    few = {e: float(e) for e in range(30)}
    assert thinned_curve(few, 400) == {"epochs": list(range(30)), "values": [float(e) for e in range(30)]}
