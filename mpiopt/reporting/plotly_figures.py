"""Panels -> plotly figures (as plain JSON dicts). Drawing only: figures.py decides what.

Traces that show trials carry the trial numbers in `customdata` and `meta: "trials"`; the
page fills in their hover text from one table of trials (html.py), so a study's hover
text is in the page once, not once per plot.
"""
from __future__ import annotations

import math

from mpiopt.reporting.timeline import job_bands
from mpiopt.reporting.view import STATUS_COLORS, Panel

MARGIN = {"l": 60, "r": 20, "t": 30, "b": 50}
INFEASIBLE = "#bbbbbb"     # a trial that breaks a constraint: drawn, greyed


def figure(panel: Panel) -> dict:
    """{data, layout} for Plotly.newPlot. No axis draws its zero line: plotly's template
    draws it heavier than the grid, and at trial 0 it read as a whisker of the data."""
    fig = DRAW[panel.kind](panel.data)
    fig["layout"] = {"template": {}, "margin": MARGIN, "hovermode": "closest",
                     "font": {"size": 12}, "height": 380, **fig.get("layout", {})}
    for key, axis in list(fig["layout"].items()):
        if key.startswith(("xaxis", "yaxis")):
            axis.setdefault("zeroline", False)
    for key in ("xaxis", "yaxis"):
        fig["layout"].setdefault(key, {"zeroline": False})
    return fig


def integer_axis(values, title: str) -> dict:
    """An axis of whole numbers (trials, epochs, an integer parameter): ticks on whole
    numbers only, 1, 2 or 5 times a power of ten apart, about 8 of them at most."""
    known = [v for v in values if v is not None]
    span = (max(known) - min(known)) if known else 1
    step = 1
    while span / step > 8:
        for factor in (2, 5 / 2, 2):     # 1, 2, 5, 10, 20, 50, ...
            step = round(step * factor)
            if span / step <= 8:
                break
    return {"title": {"text": title}, "tickmode": "linear", "tick0": 0, "dtick": step,
            "tickformat": "d"}


def log_axis(title: str) -> dict:
    """A log axis whose tick labels stay clear of its title: labels as powers of ten, the
    margin grown to fit them (automargin), the title set off from them."""
    return {"title": {"text": title, "standoff": 10}, "type": "log", "exponentformat": "power",
            "automargin": True}


def _trials(trace: dict, numbers) -> dict:
    """A trace of trials: the page sets its hover text (shown on hover only, never as labels)."""
    return {**trace, "customdata": list(numbers), "meta": "trials", "hoverinfo": "text",
            **({"textposition": "none"} if trace["type"] == "bar" else {})}


def history(d: dict) -> dict:
    data = []
    for status, symbol in (("COMPLETE", "circle"), ("PRUNED", "x")):
        for feasible in (True, False):
            pts = [p for p in d["points"] if p["status"] == status
                   and (p.get("feasible") is not False) == feasible]
            if pts:
                name = status.lower() + ("" if feasible else ", infeasible")
                color = STATUS_COLORS[status] if feasible else INFEASIBLE
                data.append(_trials({"type": "scatter", "mode": "markers", "name": name,
                                     "x": [p["number"] for p in pts], "y": [p["value"] for p in pts],
                                     "marker": {"color": color, "symbol": symbol, "size": 8}},
                                    [p["number"] for p in pts]))
    if d["best"]:
        data.append({"type": "scatter", "mode": "lines", "name": "best so far",
                     "x": [b[0] for b in d["best"]], "y": [b[1] for b in d["best"]],
                     "line": {"shape": "hv", "color": "#333"}})
    metric = d.get("metric", "value")
    return {"data": data, "layout": {
        "xaxis": integer_axis([p["number"] for p in d["points"]], "trial"),
        "yaxis": log_axis(metric) if d.get("log") else {"title": {"text": metric}}}}


def parallel(d: dict) -> dict:
    dims = []
    for axis in d["axes"]:
        dim = {"label": axis["name"], "values": axis["values"]}
        if axis["ticks"]:
            dim.update(tickvals=[t[0] for t in axis["ticks"]], ticktext=[t[1] for t in axis["ticks"]])
        elif axis["log"]:
            known = [v for v in axis["values"] if v is not None]
            decades = range(math.floor(min(known)), math.ceil(max(known)) + 1) if known else ()
            dim.update(tickvals=list(decades), ticktext=[f"1e{k}" for k in decades])
        elif axis.get("integer"):
            known = [v for v in axis["values"] if v is not None]
            if known:
                step = integer_axis(known, "")["dtick"]
                ticks = list(range(int(math.floor(min(known))), int(max(known)) + 1, step))
                dim.update(tickvals=ticks, ticktext=[str(t) for t in ticks])
        dims.append(dim)
    first = d["axes"][len(d["axes"]) - d.get("objectives", 1)]
    return {"data": [{"type": "parcoords", "dimensions": dims,
                      "line": {"color": first["values"], "colorscale": "Viridis",
                               "showscale": True, "colorbar": {"title": {"text": first["name"]}}}}],
            "layout": {"margin": {"l": 60, "r": 60, "t": 50, "b": 30}}}


def importance(d: dict) -> dict:
    names = [s[0] for s in d["shares"]][::-1]
    shares = [s[1] for s in d["shares"]][::-1]
    return {"data": [{"type": "bar", "orientation": "h", "y": names, "x": shares,
                      "text": [f"{s:.0%}" for s in shares], "textposition": "auto"}],
            "layout": {"xaxis": {"title": {"text": "share of the variance (main effect)"},
                                 "tickformat": ".0%", "range": [0, 1]},
                       "yaxis": {"automargin": True},
                       "annotations": [{"text": f"interactions: {d['rest']:.0%} · "
                                                f"{d['trials']} complete trials",
                                        "xref": "paper", "yref": "paper", "x": 1, "y": 0,
                                        "xanchor": "right", "showarrow": False}]}}


def slices(d: dict) -> dict:
    """A grid of slices; the points' colour is the trial number, its scale drawn once."""
    n = len(d["params"])
    cols = min(n, 3)
    rows = -(-n // cols)
    lo, hi = d.get("trial_range", [0, 1])
    data, layout = [], {"height": 320 * rows, "showlegend": False,
                        "grid": {"rows": rows, "columns": cols, "pattern": "independent",
                                 "xgap": 0.15, "ygap": 0.45}}
    for k, p in enumerate(d["params"]):
        suffix = "" if k == 0 else str(k + 1)
        data.append(_trials({"type": "scatter", "mode": "markers", "x": p["x"], "y": p["y"],
                             "xaxis": f"x{suffix}", "yaxis": f"y{suffix}",
                             "marker": {"color": p["numbers"], "colorscale": "Blues",
                                        "cmin": lo, "cmax": hi, "showscale": k == 0,
                                        "colorbar": {"title": {"text": "trial"}},
                                        "line": {"width": 0.5, "color": "#333"}}}, p["numbers"]))
        axis = {"title": {"text": p["name"]}, "automargin": True}
        if p["log"]:
            axis = log_axis(p["name"])
        elif p.get("integer"):
            axis = {**integer_axis(p["x"], p["name"]), "automargin": True}
        if p["choices"]:
            axis.update(type="category", categoryorder="array", categoryarray=p["choices"])
        layout[f"xaxis{suffix}"] = axis
        layout[f"yaxis{suffix}"] = {"title": {"text": d.get("metric", "value")}, "automargin": True}
    return {"data": data, "layout": layout}


def contour(d: dict) -> dict:
    """A contour of the forest's surface; with a categorical axis, cells (a heatmap): a
    surface between two choices does not exist, so it is not interpolated."""
    x, y, pts = d["x"], d["y"], d["points"]
    surface = {"type": "heatmap"} if d.get("cells") else {
        "type": "contour", "contours": {"coloring": "heatmap"}}
    data = [{**surface, "x": x["grid"], "y": y["grid"], "z": d["z"], "colorscale": "Viridis",
             "hoverinfo": "skip", "colorbar": {"title": {"text": d.get("z_name", "")}}},
            _trials({"type": "scatter", "mode": "markers", "x": pts["x"], "y": pts["y"],
                     "marker": {"color": "white", "line": {"width": 1, "color": "black"}}},
                    pts["numbers"])]
    return {"data": data, "layout": {"xaxis": _axis(x), "yaxis": _axis(y), "height": 450}}


def _axis(a: dict) -> dict:
    axis = {"title": {"text": a["name"]}, "automargin": True}
    if a["log"]:
        axis = log_axis(a["name"])
    elif a.get("integer"):
        axis = {**integer_axis(a["grid"], a["name"]), "automargin": True}
    if a["ticks"]:
        axis.update(tickvals=[t[0] for t in a["ticks"]], ticktext=[t[1] for t in a["ticks"]],
                    tickmode="array")
    return axis


def curves(d: dict) -> dict:
    data = []
    for line in d["lines"]:
        color = STATUS_COLORS.get(line["status"], "#7f7f7f")
        n = len(line["epochs"])
        symbols = ["circle"] * (n - 1) + ["x" if line["pruned"] else "circle"]
        sizes = [4] * (n - 1) + [11 if line["pruned"] else 4]
        data.append(_trials({"type": "scatter", "mode": "lines+markers", "x": line["epochs"],
                             "y": line["values"], "connectgaps": False,
                             "line": {"color": color, "dash": "dot" if line["pruned"] else "solid"},
                             "marker": {"symbol": symbols, "size": sizes, "color": color}},
                            [line["number"]] * n))
    steps = [e for line in d["lines"] for e in line["epochs"] if e is not None]
    layout = {"showlegend": False, "xaxis": integer_axis(steps, "epoch"),
              "yaxis": {"title": {"text": d.get("metric", "value")}}}
    folds = d.get("folds")
    if folds:
        layout["xaxis"] = {"title": {"text": "epoch, fold by fold (each fold's epochs count from 1)"},
                           "tickmode": "array", "tickvals": [t[0] for t in folds["ticks"]],
                           "ticktext": [str(t[1]) for t in folds["ticks"]]}
        layout["shapes"] = [{"type": "line", "xref": "x", "yref": "paper", "x0": b, "x1": b,
                             "y0": 0, "y1": 1, "line": {"dash": "dash", "color": "#888", "width": 1}}
                            for b in folds["boundaries"]]
        layout["annotations"] = [{"text": f"fold {f}", "xref": "x", "yref": "paper",
                                  "x": at + (width + 1) / 2, "y": 1,
                                  "yanchor": "top", "showarrow": False,
                                  "font": {"color": "#666"}}
                                 for f, (at, width) in enumerate(zip(folds["offsets"],
                                                                     folds["widths"]))]
    return {"data": data, "layout": layout}


def folds(d: dict) -> dict:
    xs, ys, ns = [], [], []
    for t in d["trials"]:
        xs += [t["number"]] * len(t["folds"])
        ys += t["folds"]
        ns += [t["number"]] * len(t["folds"])
    means = [t for t in d["trials"] if t["value"] is not None]
    return {"data": [_trials({"type": "scatter", "mode": "markers", "name": "fold", "x": xs,
                              "y": ys, "marker": {"size": 7, "opacity": 0.7}}, ns),
                     _trials({"type": "scatter", "mode": "markers", "name": "mean",
                              "x": [t["number"] for t in means], "y": [t["value"] for t in means],
                              "marker": {"symbol": "line-ew-open", "size": 18, "color": "#333"}},
                             [t["number"] for t in means])],
            "layout": {"xaxis": integer_axis(xs, "trial"),
                       "yaxis": {"title": {"text": d.get("metric", "value")}}}}


def pareto(d: dict) -> dict:
    """2-D or 3-D: the front in red (joined in 2-D), the other feasible trials blue,
    those that break a constraint grey."""
    names, three = d["names"], len(d["names"]) == 3
    groups = (("front", lambda p: p["front"], "#d62728", 9),
              ("dominated", lambda p: p["feasible"] and not p["front"], STATUS_COLORS["COMPLETE"], 6),
              ("infeasible", lambda p: not p["feasible"], INFEASIBLE, 6))
    data = []
    for name, pick, color, size in groups:
        pts = [p for p in d["points"] if pick(p)]
        if not pts:
            continue
        trace = {"type": "scatter3d" if three else "scatter", "mode": "markers", "name": name,
                 "marker": {"color": color, "size": size / (1.6 if three else 1)}}
        for axis, i in zip("xyz", range(len(names))):
            trace[axis] = [p["values"][i] for p in pts]
        if name == "front" and not three:
            order = sorted(pts, key=lambda p: p["values"][0])
            trace.update(mode="lines+markers", x=[p["values"][0] for p in order],
                         y=[p["values"][1] for p in order], line={"shape": "hv", "color": color})
            pts = order
        data.append(_trials(trace, [p["number"] for p in pts]))
    titles = [f"{n} ({direction})" for n, direction in zip(names, d["directions"])]
    if three:
        scene = {f"{a}axis": {"title": {"text": t}} for a, t in zip("xyz", titles)}
        return {"data": data, "layout": {"scene": scene, "height": 520}}
    return {"data": data, "layout": {"xaxis": {"title": {"text": titles[0]}},
                                     "yaxis": {"title": {"text": titles[1]}}}}


def hypervolume(d: dict) -> dict:
    h = d["history"]
    return {"data": [{"type": "scatter", "mode": "lines+markers", "name": "hypervolume",
                      "x": [p[0] for p in h], "y": [p[1] for p in h],
                      "line": {"shape": "hv", "color": "#333"}, "marker": {"size": 4}}],
            "layout": {"showlegend": False, "xaxis": integer_axis([p[0] for p in h], "trial"),
                       "yaxis": {"title": {"text": "hypervolume"}}}}


def timeline(d: dict) -> dict:
    """Tracks on a numeric axis (a track's index) named by tick text, so two jobs' groups
    of one number stay apart; each job's groups under a band with its label."""
    data = []
    for status, color in STATUS_COLORS.items():
        bars = [b for b in d["bars"] if b["status"] == status]
        if bars:
            data.append(_trials({"type": "bar", "orientation": "h", "name": status.lower(),
                                 "base": [b["start"] for b in bars],
                                 "x": [b["end"] - b["start"] for b in bars],
                                 "y": [b["track"] for b in bars], "width": 0.9,
                                 "marker": {"color": color, "line": {"width": 1, "color": "white"}}},
                                [b["number"] for b in bars]))
    shapes = [{"type": "rect", "xref": "x", "yref": "y", "x0": a, "x1": b,
               "y0": t - 0.45, "y1": t + 0.45,
               "fillcolor": "rgba(200,0,0,0.12)", "line": {"width": 0}, "layer": "below"}
              for t, a, b in d["idle"]]
    bands = job_bands(d)
    shapes += [{"type": "line", "xref": "paper", "yref": "y", "x0": 0, "x1": 1,
                "y0": j["first"] - 0.5, "y1": j["first"] - 0.5,
                "line": {"width": 1, "color": "#333"}} for j in bands if j["first"] > 0]
    labels = [{"xref": "paper", "yref": "y", "x": 0, "y": j["last"] + 0.45, "xanchor": "left",
               "yanchor": "top", "showarrow": False, "text": j["label"], "font": {"size": 11},
               "bgcolor": "rgba(255,255,255,0.7)"} for j in bands]
    tracks = d["tracks"]
    return {"data": data, "layout": {
        "barmode": "overlay", "shapes": shapes, "annotations": labels,
        "height": 120 + 40 * len(tracks),
        "xaxis": {"title": {"text": f"seconds since {d['t0'][:19].replace('T', ' ')} UTC"}},
        "yaxis": {"tickmode": "array", "tickvals": list(range(len(tracks))),
                  "ticktext": [f"group {t['group']}" for t in tracks], "automargin": True,
                  "range": [-0.5, len(tracks) - 0.5], "showgrid": False}}}


def lineage(d: dict) -> dict:
    color = {m["member"]: MEMBER_COLORS[i % len(MEMBER_COLORS)] for i, m in enumerate(d["members"])}
    data = []
    for link in d["links"]:
        data.append({"type": "scatter", "mode": "lines", "showlegend": False, "hoverinfo": "skip",
                     "x": [link["x0"], link["x1"]], "y": [link["y0"], link["y1"]],
                     "line": {"dash": "dash", "color": "#999", "width": 1} if link["exploit"]
                     else {"color": color.get(link["member"], "#999"), "width": 1.5}})
    data += [_trials({"type": "scatter", "mode": "markers", "name": f"member {m['member']}",
                      "x": m["rounds"], "y": m["values"],
                      "marker": {"size": 7, "color": color[m["member"]]}}, m["numbers"])
             for m in d["members"]]
    return {"data": data, "layout": {"xaxis": {"title": {"text": "round"}, "dtick": 1},
                                     "yaxis": {"title": {"text": d.get("metric", "value")}}}}


MEMBER_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
                 "#7f7f7f", "#bcbd22", "#17becf")


DRAW = {"pareto": pareto, "hypervolume": hypervolume, "lineage": lineage, "history": history, "parallel": parallel, "importance": importance, "slice": slices,
        "contour": contour, "curves": curves, "folds": folds, "timeline": timeline}


def standalone(panel: Panel, hovers: dict) -> dict:
    """`panel` as a figure that stands alone (mpiopt.visualization: a notebook, a file),
    where the report's page gives its section a heading and fills the hover texts: the
    title (and the caption under it) in the figure, each trial trace's hover text from
    `hovers` (view.trial_hovers), a note in place of an empty plot."""
    heading = panel.title + (f"<br><sup>{panel.caption}</sup>" if panel.caption else "")
    if panel.note is not None:
        return {"data": [], "layout": {
            "title": {"text": panel.title}, "xaxis": {"visible": False},
            "yaxis": {"visible": False},
            "annotations": [{"text": panel.note, "xref": "paper", "yref": "paper", "x": 0.5,
                             "y": 0.5, "showarrow": False}]}}
    fig = figure(panel)
    for trace in fig["data"]:
        if trace.get("meta") == "trials":
            trace["text"] = [hovers.get(n, "") for n in trace["customdata"]]
    top = fig["layout"]["margin"]["t"] + (50 if panel.caption else 30)
    fig["layout"].update(title={"text": heading}, margin={**fig["layout"]["margin"], "t": top})
    return fig
