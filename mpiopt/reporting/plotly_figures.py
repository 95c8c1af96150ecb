"""Panels -> plotly figures (as plain JSON dicts). Drawing only: figures.py decides what.

Traces that show trials carry the trial numbers in `customdata` and `meta: "trials"`; the
page fills in their hover text from one table of trials (html.py), so a study's hover
text is in the page once, not once per plot.
"""
from __future__ import annotations

import math

from mpiopt.reporting.view import STATUS_COLORS, Panel

MARGIN = {"l": 60, "r": 20, "t": 30, "b": 50}


def figure(panel: Panel) -> dict:
    """{data, layout} for Plotly.newPlot."""
    fig = DRAW[panel.kind](panel.data)
    fig["layout"] = {"template": {}, "margin": MARGIN, "hovermode": "closest",
                     "font": {"size": 12}, "height": 380, **fig.get("layout", {})}
    return fig


def _trials(trace: dict, numbers) -> dict:
    """A trace of trials: the page sets its hover text (shown on hover only, never as labels)."""
    return {**trace, "customdata": list(numbers), "meta": "trials", "hoverinfo": "text",
            **({"textposition": "none"} if trace["type"] == "bar" else {})}


def history(d: dict) -> dict:
    data = []
    for status, symbol in (("COMPLETE", "circle"), ("PRUNED", "x")):
        pts = [p for p in d["points"] if p["status"] == status]
        if pts:
            data.append(_trials({"type": "scatter", "mode": "markers", "name": status.lower(),
                                 "x": [p["number"] for p in pts], "y": [p["value"] for p in pts],
                                 "marker": {"color": STATUS_COLORS[status], "symbol": symbol,
                                            "size": 8}}, [p["number"] for p in pts]))
    if d["best"]:
        data.append({"type": "scatter", "mode": "lines", "name": "best so far",
                     "x": [b[0] for b in d["best"]], "y": [b[1] for b in d["best"]],
                     "line": {"shape": "hv", "color": "#333"}})
    return {"data": data, "layout": {"xaxis": {"title": {"text": "trial"}},
                                     "yaxis": {"title": {"text": "value"}}}}


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
        dims.append(dim)
    metric = d["axes"][-1]["values"]
    return {"data": [{"type": "parcoords", "dimensions": dims,
                      "line": {"color": metric, "colorscale": "Viridis", "showscale": True}}],
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
    n = len(d["params"])
    cols = min(n, 3)
    rows = -(-n // cols)
    data, layout = [], {"height": 300 * rows, "showlegend": False,
                        "grid": {"rows": rows, "columns": cols, "pattern": "independent"}}
    for k, p in enumerate(d["params"]):
        suffix = "" if k == 0 else str(k + 1)
        data.append(_trials({"type": "scatter", "mode": "markers", "x": p["x"], "y": p["y"],
                             "xaxis": f"x{suffix}", "yaxis": f"y{suffix}",
                             "marker": {"color": p["numbers"], "colorscale": "Blues",
                                        "line": {"width": 0.5, "color": "#333"}}}, p["numbers"]))
        axis = {"title": {"text": p["name"]}}
        if p["log"]:
            axis["type"] = "log"
        if p["choices"]:
            axis.update(type="category", categoryorder="array", categoryarray=p["choices"])
        layout[f"xaxis{suffix}"] = axis
    return {"data": data, "layout": layout}


def contour(d: dict) -> dict:
    x, y, pts = d["x"], d["y"], d["points"]
    data = [{"type": "contour", "x": x["grid"], "y": y["grid"], "z": d["z"],
             "colorscale": "Viridis", "hoverinfo": "skip", "contours": {"coloring": "heatmap"}},
            _trials({"type": "scatter", "mode": "markers", "x": pts["x"], "y": pts["y"],
                     "marker": {"color": "white", "line": {"width": 1, "color": "black"}}},
                    pts["numbers"])]
    return {"data": data, "layout": {"xaxis": _axis(x), "yaxis": _axis(y), "height": 450}}


def _axis(a: dict) -> dict:
    axis = {"title": {"text": a["name"]}}
    if a["log"]:
        axis["type"] = "log"
    if a["ticks"]:
        axis.update(tickvals=[t[0] for t in a["ticks"]], ticktext=[t[1] for t in a["ticks"]])
    return axis


def curves(d: dict) -> dict:
    data = []
    for line in d["lines"]:
        color = STATUS_COLORS.get(line["status"], "#7f7f7f")
        symbols = ["circle"] * (len(line["epochs"]) - 1) + ["x" if line["pruned"] else "circle"]
        sizes = [4] * (len(line["epochs"]) - 1) + [11 if line["pruned"] else 4]
        data.append(_trials({"type": "scatter", "mode": "lines+markers", "x": line["epochs"],
                             "y": line["values"],
                             "line": {"color": color, "dash": "dot" if line["pruned"] else "solid"},
                             "marker": {"symbol": symbols, "size": sizes, "color": color}},
                            [line["number"]] * len(line["epochs"])))
    return {"data": data, "layout": {"showlegend": False, "xaxis": {"title": {"text": "epoch (step)"}},
                                     "yaxis": {"title": {"text": "value"}}}}


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
            "layout": {"xaxis": {"title": {"text": "trial"}}, "yaxis": {"title": {"text": "value"}}}}


def timeline(d: dict) -> dict:
    data = []
    for status, color in STATUS_COLORS.items():
        bars = [b for b in d["bars"] if b["status"] == status]
        if bars:
            data.append(_trials({"type": "bar", "orientation": "h", "name": status.lower(),
                                 "base": [b["start"] for b in bars],
                                 "x": [b["end"] - b["start"] for b in bars],
                                 "y": [f"group {b['group']}" for b in bars],
                                 "marker": {"color": color, "line": {"width": 1, "color": "white"}}},
                                [b["number"] for b in bars]))
    shapes = [{"type": "rect", "xref": "x", "yref": "y", "x0": a, "x1": b,
               "y0": d["groups"].index(g) - 0.45, "y1": d["groups"].index(g) + 0.45,
               "fillcolor": "rgba(200,0,0,0.12)", "line": {"width": 0}, "layer": "below"}
              for g, a, b in d["idle"]]
    return {"data": data, "layout": {
        "barmode": "overlay", "shapes": shapes, "height": 120 + 40 * len(d["groups"]),
        "xaxis": {"title": {"text": f"seconds since {d['t0'][:19].replace('T', ' ')} UTC"}},
        "yaxis": {"type": "category", "categoryorder": "array", "automargin": True,
                  "categoryarray": [f"group {g}" for g in d["groups"]]}}}


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
                                     "yaxis": {"title": {"text": "value"}}}}


MEMBER_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
                 "#7f7f7f", "#bcbd22", "#17becf")


DRAW = {"lineage": lineage, "history": history, "parallel": parallel, "importance": importance, "slice": slices,
        "contour": contour, "curves": curves, "folds": folds, "timeline": timeline}
