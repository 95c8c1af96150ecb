"""What each plot of a study shows: the data, computed once for every renderer.

`panel(kind, view)` returns a Panel: a title and either `data` (plain lists and numbers,
the keys documented per builder below) or a `note` saying in one sentence why there is
nothing to draw (no finished trial, no epochs, ...). The plotly page (html.py) and the
matplotlib files (static.py) draw Panels and compute nothing themselves, so the two never
disagree about what a study looks like.
"""
from __future__ import annotations

import math

from mpiopt.errors import cut
from mpiopt.reporting import importance as imp
from mpiopt.reporting.timeline import timeline
from mpiopt.reporting.view import Panel, StudyView, finite
from mpiopt.trial import TrialStatus

KINDS = ("history", "parallel", "importance", "slice", "contour", "curves", "folds", "timeline")
PBT_KINDS = ("lineage",)    # drawn for pbt studies only (the report adds it when it has data)
MULTI_KINDS = ("pareto", "hypervolume")    # several objectives (the report adds them then)
MIN_MODEL_TRIALS = 4       # a forest fitted to fewer points says nothing
CONTOUR_GRID = 24
# Points a learning curve keeps in the report: a function reporting every batch (20,000
# reports a trial) made a 7.9 MB page for 4 trials; each bucket keeps its lowest and its
# highest value, so spikes and the best epoch stay visible.
CURVE_POINTS = 400


def panel(kind: str, view: StudyView) -> Panel:
    return BUILDERS[kind](view)


def page_panels(view: StudyView, kinds=KINDS) -> list[Panel]:
    """The panels a study's page shows, in order: `kinds`, with the Pareto front and its
    hypervolume right after the history for a study of several objectives, and pbt's
    lineage where it has data. The report and the dashboard both show these, so the
    dashboard never lacks a figure the report has."""
    if view.multi:
        kinds = kinds[:1] + tuple(k for k in MULTI_KINDS if k not in kinds) + tuple(kinds[1:])
    panels = [panel(kind, view) for kind in kinds]
    return panels + [p for p in (panel(kind, view) for kind in PBT_KINDS) if p.note is None]


def history(view: StudyView) -> Panel:
    """points: [{number, value, status, feasible}] (COMPLETE and PRUNED with a value;
    feasible: False for a trial that breaks a constraint, else None/True); best:
    [[number, best so far]] over feasible COMPLETE trials in trial order; metric: the
    y-axis' name."""
    title = f"Optimization history ({view.metric}, {view.direction})"
    front = view.front
    points = [{"number": t.number, "value": t.value, "status": t.status.value,
               "feasible": front.feasible(t)}
              for t in view.trials
              if t.status in (TrialStatus.COMPLETE, TrialStatus.PRUNED) and finite(t.value)]
    if not points:
        return Panel("history", title, _no_finished(view))
    best, out = None, []
    for t in view.complete():
        if front.feasible(t) is False:
            continue
        if best is None or (t.value > best if view.maximize else t.value < best):
            best = t.value
        out.append([t.number, best])
    caption = None
    if front.multi:
        caption = (f"{view.metric} is the first of {len(front.names)} objectives; the best "
                   "trials are the Pareto front (below)")
    elif front.constrained:
        caption = f"grey: breaks a constraint ({front.constraint_text()}); never the best"
    flat = flattened_by([p["value"] for p in points])
    if flat:
        caption = "; ".join(filter(None, [caption, f"log scale: {flat} on a linear one"]))
    return Panel("history", title, data={"points": points, "best": out, "metric": view.metric,
                                         "log": bool(flat)}, caption=caption)


# A linear axis is flat when the values without their outliers span less than this share
# of the axis: the bulk of the trials would sit on one line
FLAT_SHARE = 0.05


def flattened_by(values: list[float]) -> str | None:
    """Why a linear axis would flatten these values ("1 outlier would squeeze the other
    11 into 2% of the axis"), when a log axis shows them and a linear one does not; None
    otherwise. Outliers: the values farthest from the median, one in twenty (at least
    one). A log axis needs every value above zero; a study of signed values keeps its
    linear axis."""
    if len(values) < 5 or min(values) <= 0:
        return None
    ordered = sorted(values)
    median = ordered[len(ordered) // 2]
    outliers = max(1, len(values) // 20)
    bulk = sorted(values, key=lambda v: abs(math.log(v / median)))[:-outliers]
    span = max(values) - min(values)
    share = (max(bulk) - min(bulk)) / span if span > 0 else 1.0
    if share >= FLAT_SHARE:
        return None
    room = f"{share:.0%}" if share >= 0.01 else "under 1%"
    return (f"{outliers} outlier(s) would squeeze the other {len(bulk)} values into "
            f"{room} of the axis")


def parallel(view: StudyView) -> Panel:
    """axes: [{name, values (encoded), log, integer, ticks: [[encoded, label]] or None}],
    the objectives last (the first one colours the lines); one entry per shown trial in
    every axis' values. A trial without one of the parameters (a conditional space's
    inactive one) is not drawn, as Optuna does: an absent value is not a value; when that
    leaves none, the parameters every complete trial has are drawn instead."""
    title = "Parallel coordinates (complete trials)"
    trials = view.complete()
    if not trials:
        return Panel("parallel", title, _no_complete(view))
    params = list(view.params)
    front = view.front
    trials = [t for t in trials if all(finite(v) for v in front.values(t))]
    if not trials:
        return Panel("parallel", title, "no complete trial has every objective's value")

    def has(t, p) -> bool:
        return p.encode(t.params.get(p.name)) is not None

    shown = [t for t in trials if all(has(t, p) for p in params)]
    caption = None
    if len(shown) < len(trials):
        left = [p.name for p in params if not all(has(t, p) for t in trials)]
        if len(shown) >= 2:
            caption = (f"{len(trials) - len(shown)} of {len(trials)} complete trials are not "
                       f"drawn: they lack a conditional parameter ({', '.join(left)})")
        else:
            params = [p for p in params if p.name not in left]
            shown = trials
            caption = (f"conditional parameters left out ({', '.join(left)}): no two complete "
                       "trials have them all")
    axes = [{"name": p.name, "log": p.log, "integer": p.kind == "integer",
             "values": [p.encode(t.params.get(p.name)) for t in shown],
             "ticks": [[float(i), p.label(c)] for i, c in enumerate(p.choices)] or None}
            for p in params]
    for name in front.names:
        axes.append({"name": name, "log": False, "integer": False, "ticks": None,
                     "values": [front.metrics_of(t).get(name) for t in shown]})
    return Panel("parallel", title, data={"axes": axes, "numbers": [t.number for t in shown],
                                          "objectives": len(front.names)}, caption=caption)


def pareto(view: StudyView) -> Panel:
    """names, directions: the objectives drawn (the first 2, or 3 in 3-D); points:
    [{number, values, feasible, front}] over COMPLETE trials with every objective's value
    (feasible: False greys a trial that breaks a constraint); front: the front's numbers
    in the order of the first objective."""
    front = view.front
    title = "Pareto front"
    if not front.multi:
        return Panel("pareto", title, "the study has one objective (objective.metrics with "
                                      "two or more draws a Pareto front)")
    names = front.names[:3]
    title = f"Pareto front: {' × '.join(names)} ({len(front.trials)} trials on the front)"
    points = []
    for t in front.complete:
        values = front.values(t)[:len(names)]
        if all(finite(v) for v in values):
            points.append({"number": t.number, "values": values,
                           "feasible": front.feasible(t) is not False, "front": front.on_front(t)})
    if not points:
        return Panel("pareto", title, _no_complete(view))
    caption = None
    if len(front.names) > 3:
        caption = f"the first three of {len(front.names)} objectives are drawn"
    infeasible = sum(not p["feasible"] for p in points)
    if infeasible:
        caption = "; ".join(filter(None, [caption, f"grey: {infeasible} trial(s) break a "
                                          f"constraint ({front.constraint_text()})"]))
    return Panel("pareto", title, data={
        "names": names, "directions": front.directions[:len(names)], "points": points,
        "front": [t.number for t in front.trials]}, caption=caption)


def hypervolume(view: StudyView) -> Panel:
    """history: [[number, hypervolume of the front after that trial]] over COMPLETE
    trials; reference: how the reference point was chosen."""
    front = view.front
    title = "Hypervolume of the Pareto front over trials"
    if not front.multi:
        return Panel("hypervolume", title, "the study has one objective: no hypervolume")
    if not front.history:
        return Panel("hypervolume", title, _no_complete(view))
    reference = ("objective.reference" if front.objective.reference
                 else "the worst value seen in each objective")
    return Panel("hypervolume", f"{title} (reference: {reference})",
                 data={"history": [list(h) for h in front.history]})


def importance(view: StudyView) -> Panel:
    """shares: [[name, share]] largest first; rest: the share left to interactions."""
    title = "Parameter importance (random-forest main effects, fANOVA-style)"
    trials = view.complete()
    note = _model_note(view, trials, need_params=2)
    if note:
        return Panel("importance", title, note)
    shares = _shares(view, trials)
    if not shares:
        return Panel("importance", title, f"every complete trial has the same {view.metric}: "
                                          "nothing to explain")
    shares = {k: min(1.0, v) for k, v in shares.items()}
    return Panel("importance", title, data={
        "shares": [[k, v] for k, v in shares.items()], "trials": len(trials),
        "rest": max(0.0, 1.0 - sum(shares.values()))})


def slices(view: StudyView) -> Panel:
    """params: [{name, log, integer, choices (labels) or None, x (values; choice labels
    for a categorical), y, numbers}] over COMPLETE trials; trial_range: [first, last]
    trial number (the points' colour, with its scale drawn)."""
    title = f"Slices: {view.metric} against each parameter"
    trials = view.complete()
    if not trials:
        return Panel("slice", title, _no_complete(view))
    out = []
    for p in view.params:
        have = [t for t in trials if p.encode(t.params.get(p.name)) is not None]
        out.append({"name": p.name, "log": p.log, "integer": p.kind == "integer",
                    "choices": [p.label(c) for c in p.choices] if p.categorical else None,
                    "x": [p.label(t.params[p.name]) if p.categorical else t.params[p.name]
                          for t in have],
                    "y": [t.value for t in have], "numbers": [t.number for t in have]})
    numbers = [t.number for t in trials]
    return Panel("slice", title, data={"params": out, "metric": view.metric,
                                       "trial_range": [min(numbers), max(numbers)]})


def contour(view: StudyView) -> Panel:
    """x, y: {name, log, integer, categorical, grid (values, or choice indices), ticks or
    None}; z: rows over y.grid of the forest's two-parameter partial dependence; points:
    {x, y, value, numbers} (encoded like the grid: log10 values are shown on log axes as
    the values); cells: True when an axis is categorical, so z is drawn as cells (a
    heatmap), never interpolated between two choices."""
    title = f"Contour of {view.metric} as a model predicts it, over the two most important parameters"
    trials = view.complete()
    note = _model_note(view, trials, need_params=2)
    if note:
        return Panel("contour", title, note)
    shares = _shares(view, trials)
    order = list(shares) or [p.name for p in view.params]
    index = {p.name: j for j, p in enumerate(view.params)}
    i, j = index[order[0]], index[order[1]]
    pi, pj = view.params[i], view.params[j]
    model = imp.fit(view.params, trials)
    background = imp.uniform_points(view.params, trials, imp.SAMPLES // 4)
    gx, gy = imp.grid(pi, trials, CONTOUR_GRID), imp.grid(pj, trials, CONTOUR_GRID)
    z = imp.surface(model, background, i, j, gx, gy)
    have = [t for t in trials if pi.encode(t.params.get(pi.name)) is not None
            and pj.encode(t.params.get(pj.name)) is not None]     # absent: not a point
    caption = (f"the colours are a model's prediction, not measured: a random forest fitted "
               f"to {len(trials)} complete trials, averaged over the other parameters "
               "(partial dependence); the points are the trials")
    if len(have) < len(trials):
        caption += (f"; {len(trials) - len(have)} complete trial(s) lack {pi.name} or "
                    f"{pj.name} (conditional): not drawn as points")
    return Panel("contour", f"Contour of {view.metric} predicted by a random forest: "
                            f"{pi.name} × {pj.name}", data={
        "x": _axis(pi, gx), "y": _axis(pj, gy), "z": z.tolist(),
        "z_name": f"predicted {view.metric}",
        "cells": pi.categorical or pj.categorical,
        "points": {"x": [_shown(pi, t.params.get(pi.name)) for t in have],
                   "y": [_shown(pj, t.params.get(pj.name)) for t in have],
                   "value": [t.value for t in have],
                   "numbers": [t.number for t in have]}}, caption=caption)


def curves(view: StudyView) -> Panel:
    """lines: [{number, status, epochs, values, pruned}] for trials with per-epoch
    values, `epochs` the x positions; a pruned trial's line ends where it was stopped.
    folds (with several folds): {count, offsets, widths, boundaries, ticks}: fold f's
    epoch e is drawn at offsets[f] + e, each fold as wide as the most epochs any trial
    reported in it (the stored (fold, epoch) of each value: the same point of every trial
    at the same x, also when training.epochs is searched), boundaries between folds, and
    ticks [[x, epoch]]; each line is broken between folds (a None), so a new fold's
    first epoch is not drawn as a fall from the last fold's best."""
    title = "Learning curves (per-epoch values; × marks a pruned trial's last epoch)"
    shown = [t for t in view.trials if t.intermediate]
    if not shown:
        return Panel("curves", title, "no trial reported per-epoch values (a Keras model "
                                      "objective, or a function calling report(epoch, value))")
    widths: dict[int, int] = {}
    for t in shown:
        for step in t.intermediate:
            widths[step.fold] = max(widths.get(step.fold, 0), step.epoch)
    data = {"metric": view.metric}
    if len(widths) > 1:
        offsets, at = {}, 0
        for fold in sorted(widths):
            offsets[fold], at = at, at + widths[fold]
        data["folds"] = {"count": len(widths), "offsets": [offsets[f] for f in sorted(widths)],
                         "widths": [widths[f] for f in sorted(widths)],
                         "boundaries": [offsets[f] + 0.5 for f in sorted(widths)[1:]],
                         "ticks": _fold_ticks(offsets, widths)}
        title = (f"Learning curves, fold by fold ({len(widths)} folds; each fold's epochs "
                 "count from 1; × marks a pruned trial's last epoch)")
    else:
        offsets = {fold: 0 for fold in widths}
    lines = []
    for t in shown:
        curve = thinned_curve({offsets[s.fold] + s.epoch: v for s, v in t.intermediate.items()},
                              CURVE_POINTS)
        if len(widths) > 1:
            curve["epochs"], curve["values"] = _broken_at_folds(curve["epochs"], curve["values"],
                                                                offsets)
        lines.append({"number": t.number, "status": t.status.value,
                      "pruned": t.status == TrialStatus.PRUNED, **curve})
    data.update(lines=lines, pruned=sum(line["pruned"] for line in lines))
    return Panel("curves", title, data=data)


def _fold_ticks(offsets: dict, widths: dict, most: int = 30) -> list[list[int]]:
    """[[x, epoch]]: every fold's epochs, every k-th where there would be more than
    `most` ticks in all (each fold's 1 and last kept)."""
    every = max(1, -(-sum(widths.values()) // most))
    ticks = []
    for fold in sorted(widths):
        shown = sorted({1, widths[fold], *range(every, widths[fold] + 1, every)})
        ticks += [[offsets[fold] + e, e] for e in shown]
    return ticks


def _broken_at_folds(xs: list, values: list, offsets: dict) -> tuple[list, list]:
    """A None between two points of different folds: the line is not drawn across."""
    starts = sorted(offsets.values())
    fold_of = [sum(1 for s in starts if x > s) for x in xs]
    out_x, out_y = [], []
    for i, (x, y) in enumerate(zip(xs, values)):
        if i and fold_of[i] != fold_of[i - 1]:
            out_x.append(None)
            out_y.append(None)
        out_x.append(x)
        out_y.append(y)
    return out_x, out_y


def thinned_curve(intermediate: dict, limit: int) -> dict:
    """{epochs, values} in epoch order, at most about `limit` of them: past it, the epochs
    fall into limit / 2 buckets and each keeps its lowest and highest finite value (its
    first epoch where it has none), the first and the last epoch always."""
    epochs = sorted(intermediate)
    if len(epochs) <= limit:
        return {"epochs": epochs, "values": [intermediate[e] for e in epochs]}
    buckets = max(1, limit // 2)
    keep = {0, len(epochs) - 1}
    for b in range(buckets):
        part = range(b * len(epochs) // buckets, (b + 1) * len(epochs) // buckets)
        good = [i for i in part if finite(intermediate[epochs[i]])]
        if not good:
            keep.add(part[0])
            continue
        keep.add(min(good, key=lambda i: intermediate[epochs[i]]))
        keep.add(max(good, key=lambda i: intermediate[epochs[i]]))
    order = sorted(keep)
    return {"epochs": [epochs[i] for i in order], "values": [intermediate[epochs[i]] for i in order]}


def folds(view: StudyView) -> Panel:
    """trials: [{number, folds, value, std}] for trials with per-fold values (std None
    with one fold: a spread of one value is not 0, it is unknown)."""
    title = "K-fold spread (each fold's value per trial; the line is the mean)"
    rows = [{"number": t.number, "folds": list(t.fold_values), "value": t.value,
             "std": t.value_std if len(t.fold_values) > 1 else None, "status": t.status.value}
            for t in view.trials if t.fold_values]
    if not rows:
        return Panel("folds", title, "no trial has per-fold values (training.kfold is 1, "
                                     "or the objective is a function)")
    return Panel("folds", title, data={"trials": rows, "metric": view.metric})


def lineage(view: StudyView) -> Panel:
    """A pbt study's population: members: [{member, rounds, values, numbers}] (each
    member's complete rounds in order); links: [{number, member, exploit, x0, y0, x1, y1}]
    from a round's parent's point to its own (exploit: the parent is another member's);
    rows: [{number, member, round, parent, how, value, status, params}] every round."""
    title = "Population-based training: members' values across rounds (dashed: exploit)"
    rounds = [t for t in view.trials if t.round is not None]
    if not rounds:
        return Panel("lineage", title, "not a pbt study (search.algorithm: pbt records lineage)")
    by_number = {t.number: t for t in rounds}
    members: dict[int, dict] = {}
    exploits, rows = [], []
    for t in sorted(rounds, key=lambda t: (t.round, t.number)):
        parent = by_number.get(t.parent)
        how = ("start" if t.parent is None else "continue" if parent is None
               or parent.member == t.member else f"exploit member {parent.member}")
        rows.append({"number": t.number, "member": t.member, "round": t.round, "parent": t.parent,
                     "how": how, "value": t.value, "status": t.status.value,
                     "params": dict(t.params)})
        if t.status != TrialStatus.COMPLETE or not finite(t.value):
            continue
        line = members.setdefault(t.member, {"member": t.member, "rounds": [], "values": [],
                                             "numbers": []})
        line["rounds"].append(t.round)
        line["values"].append(t.value)
        line["numbers"].append(t.number)
        if parent is not None and finite(parent.value):
            exploits.append({"number": t.number, "member": t.member,
                             "exploit": how.startswith("exploit"),
                             "x0": parent.round, "y0": parent.value, "x1": t.round, "y1": t.value})
    rows.sort(key=lambda r: r["number"])
    return Panel("lineage", title, data={"members": [members[m] for m in sorted(members)],
                                         "links": exploits, "rows": rows, "metric": view.metric})


def failures(view: StudyView) -> Panel:
    """rows: [{number, group, host, attempt, error}] of FAILED trials."""
    rows = [{"number": t.number, "group": t.group, "host": t.host, "attempt": t.attempt,
             "error": cut(t.error) or "(no error text)"}
            for t in view.trials if t.status == TrialStatus.FAILED]
    title = f"Failures ({len(rows)})"
    if not rows:
        return Panel("failures", title, "no failed trial")
    return Panel("failures", title, data={"rows": rows})


def _shares(view: StudyView, trials) -> dict[str, float]:
    """Importance, computed once per view: the importance and contour panels share it."""
    if "shares" not in view.cache:
        view.cache["shares"] = imp.importances(view.params, trials)
    return view.cache["shares"]


def _axis(p, values) -> dict:
    return {"name": p.name, "log": p.log, "integer": p.kind == "integer",
            "categorical": p.categorical, "grid": [_shown(p, p.decode(v)) if not p.categorical
                                                    else v for v in values],
            "ticks": [[float(i), p.label(c)] for i, c in enumerate(p.choices)] or None}


def _shown(p, value):
    """A value where a contour draws it: the choice's index, else the value itself."""
    return p.encode(value) if p.categorical else value


def _model_note(view: StudyView, trials, need_params: int) -> str | None:
    if len(view.params) < need_params:
        return (f"the study has {len(view.params)} parameter(s): this plot needs "
                f"at least {need_params}")
    if len(trials) < MIN_MODEL_TRIALS:
        pruned = view.count(TrialStatus.PRUNED)
        why = (f"; {pruned} pruned trial(s) are left out, as a pruned trial's value is not "
               "its final one" if pruned else "")
        return (f"{len(trials)} complete trial(s): a model of {view.metric} needs at least "
                f"{MIN_MODEL_TRIALS}{why}")
    return None


def _no_complete(view: StudyView) -> str:
    if not view.trials:
        return "the study has no trial yet"
    failed = view.count(TrialStatus.FAILED)
    if failed == len(view.trials):
        return f"all {failed} trial(s) failed: see the failures"
    return f"no complete trial yet ({len(view.trials)} trial(s), {failed} failed)"


def _no_finished(view: StudyView) -> str:
    return _no_complete(view).replace("no complete trial", "no finished trial with a value")


BUILDERS = {"history": history, "parallel": parallel, "pareto": pareto,
            "hypervolume": hypervolume, "importance": importance,
            "slice": slices, "contour": contour, "curves": curves, "folds": folds,
            "timeline": timeline, "failures": failures, "lineage": lineage}
