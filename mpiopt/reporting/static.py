"""`mpiopt plot`: one Panel as a PNG or SVG with matplotlib, for a node without a browser.

Drawing only: figures.py decides what a plot shows, so these files agree with the HTML
report. matplotlib is imported on first use, with the Agg backend (no display needed).
A Panel with a note (nothing to draw) becomes a figure showing the note.
"""
from __future__ import annotations

from pathlib import Path

from mpiopt.reporting.timeline import held_text, job_bands
from mpiopt.reporting.view import STATUS_COLORS, Panel

INFEASIBLE = "#bbbbbb"     # a trial that breaks a constraint: drawn, greyed

FORMATS = (".png", ".svg")


def save(panel: Panel, path: Path) -> None:
    """Draw `panel` into `path` (its suffix picks the format). An SVG keeps its text as
    text (svg.fonttype none), so it can be selected, searched and edited."""
    import matplotlib

    matplotlib.use("Agg")
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        draw(panel).savefig(path, format=path.suffix[1:], bbox_inches="tight")


def draw(panel: Panel):
    """`panel` as a matplotlib Figure (not attached to pyplot, so drawing one neither
    opens a window nor changes the caller's backend); a note becomes the figure's text."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 5), dpi=100, layout="constrained")   # room for the title
    if panel.note is not None:
        fig.text(0.5, 0.5, panel.note, ha="center", va="center", wrap=True, fontsize=12)
    else:
        DRAW[panel.kind](fig, panel.data)
    if panel.caption:
        fig.supxlabel(panel.caption, fontsize=8, color="#8a5a00")
    fig.suptitle(panel.title, fontsize=11)
    return fig


def _whole_numbers(axis) -> None:
    """Ticks on whole numbers only (trials, epochs, rounds, integer parameters)."""
    from matplotlib.ticker import MaxNLocator

    axis.set_major_locator(MaxNLocator(integer=True))


def history(fig, d: dict) -> None:
    ax = fig.subplots()
    for status, marker in (("COMPLETE", "o"), ("PRUNED", "x")):
        for feasible in (True, False):
            pts = [p for p in d["points"] if p["status"] == status
                   and (p.get("feasible") is not False) == feasible]
            if pts:
                ax.scatter([p["number"] for p in pts], [p["value"] for p in pts], marker=marker,
                           color=STATUS_COLORS[status] if feasible else INFEASIBLE,
                           label=status.lower() + ("" if feasible else ", infeasible"), zorder=3)
    if d["best"]:
        ax.step([b[0] for b in d["best"]], [b[1] for b in d["best"]], where="post",
                color="#333", label="best so far")
    ax.set(xlabel="trial", ylabel=d.get("metric", "value"))
    if d.get("log"):
        ax.set_yscale("log")
    _whole_numbers(ax.xaxis)
    ax.legend(loc="best", fontsize=8)


def parallel(fig, d: dict) -> None:
    """Each axis scaled to [0, 1] between its own min and max, labelled at both ends."""
    ax = fig.subplots()
    axes = d["axes"]
    metric = axes[len(axes) - d.get("objectives", 1)]["values"]
    known = [v for v in metric if v is not None]
    lo_m, hi_m = min(known), max(known)
    cmap = _cmap("viridis")
    scaled = [_unit(a["values"]) for a in axes]
    for k in range(len(metric)):
        if any(col[k] is None for col in scaled):     # absent is not a value: not drawn
            continue
        shade = 0.5 if hi_m == lo_m else (metric[k] - lo_m) / (hi_m - lo_m)
        ax.plot(range(len(axes)), [col[k] for col in scaled], color=cmap(shade), alpha=0.8)
    for i, a in enumerate(axes):
        ax.axvline(i, color="#999", lw=0.8)
        known = [v for v in a["values"] if v is not None]
        if known:
            ends = [min(known), max(known)]
            labels = [_tick(a, v) for v in ends]
            ax.text(i, -0.06, labels[0], ha="center", va="top", fontsize=7)
            ax.text(i, 1.04, labels[1], ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(axes)), [a["name"] for a in axes], fontsize=8)
    ax.set_yticks([])
    ax.set_ylim(-0.15, 1.12)


def importance(fig, d: dict) -> None:
    ax = fig.subplots()
    names = [s[0] for s in d["shares"]][::-1]
    shares = [s[1] for s in d["shares"]][::-1]
    ax.barh(names, shares, color=STATUS_COLORS["COMPLETE"])
    for y, s in enumerate(shares):
        ax.text(s, y, f" {s:.0%}", va="center", fontsize=8)
    ax.set_xlim(0, 1)
    ax.set_xlabel(f"share of the variance (main effect); interactions {d['rest']:.0%}; "
                  f"{d['trials']} complete trials")


def slices(fig, d: dict) -> None:
    params = d["params"]
    cols = min(len(params), 3)
    rows = -(-len(params) // cols)
    fig.set_size_inches(4 * cols + 1, 3.2 * rows)
    lo, hi = d.get("trial_range", [0, 1])
    axes, shown = [], None
    for k, p in enumerate(params):
        ax = fig.add_subplot(rows, cols, k + 1)
        axes.append(ax)
        x = [p["choices"].index(v) for v in p["x"]] if p["choices"] else p["x"]
        shown = ax.scatter(x, p["y"], c=p["numbers"], cmap="Blues", vmin=lo, vmax=hi,
                           edgecolors="#333", linewidths=0.5)
        if p["log"]:
            ax.set_xscale("log")
        if p["choices"]:
            ax.set_xticks(range(len(p["choices"])), p["choices"])
        elif p.get("integer"):
            _whole_numbers(ax.xaxis)
        ax.set_xlabel(p["name"])
        if k % cols == 0:
            ax.set_ylabel(d.get("metric", "value"))
    if shown is not None:
        fig.colorbar(shown, ax=axes, label="trial")


def contour(fig, d: dict) -> None:
    """Filled contours; cells (pcolormesh, nearest) when an axis is categorical: no
    surface is drawn between two choices."""
    ax = fig.subplots()
    x, y, pts = d["x"], d["y"], d["points"]
    if d.get("cells"):
        filled = ax.pcolormesh(x["grid"], y["grid"], d["z"], shading="nearest", cmap="viridis")
    else:
        filled = ax.contourf(x["grid"], y["grid"], d["z"], levels=15, cmap="viridis")
    fig.colorbar(filled, ax=ax, label=d.get("z_name", ""))
    ax.scatter(pts["x"], pts["y"], c="white", edgecolors="black", s=25)
    for axis, set_scale, set_ticks, label, ticker in (
            (x, ax.set_xscale, ax.set_xticks, ax.set_xlabel, ax.xaxis),
            (y, ax.set_yscale, ax.set_yticks, ax.set_ylabel, ax.yaxis)):
        if axis["log"]:
            set_scale("log")
        if axis["ticks"]:
            set_ticks([t[0] for t in axis["ticks"]], [t[1] for t in axis["ticks"]])
        elif axis.get("integer"):
            _whole_numbers(ticker)
        label(axis["name"])


def curves(fig, d: dict) -> None:
    ax = fig.subplots()
    nan = float("nan")
    for line in d["lines"]:
        color = STATUS_COLORS.get(line["status"], "#7f7f7f")
        xs = [nan if v is None else v for v in line["epochs"]]
        ys = [nan if v is None else v for v in line["values"]]
        ax.plot(xs, ys, color=color, lw=1, ls=":" if line["pruned"] else "-")
        if line["pruned"]:
            ax.plot(xs[-1], ys[-1], "x", color=color, ms=9)
    folds = d.get("folds")
    ax.set(xlabel="epoch", ylabel=d.get("metric", "value"))
    if not folds:
        _whole_numbers(ax.xaxis)
        return
    for b in folds["boundaries"]:
        ax.axvline(b, ls="--", color="#888", lw=0.8)
    for f, (at, width) in enumerate(zip(folds["offsets"], folds["widths"])):
        ax.text(at + (width + 1) / 2, 1.0, f"fold {f}", transform=ax.get_xaxis_transform(),
                ha="center", va="bottom", fontsize=8)
    ax.set_xticks([t[0] for t in folds["ticks"]], [str(t[1]) for t in folds["ticks"]])
    ax.set_xlabel("epoch, fold by fold (each fold's epochs count from 1)")


def folds(fig, d: dict) -> None:
    ax = fig.subplots()
    for t in d["trials"]:
        ax.scatter([t["number"]] * len(t["folds"]), t["folds"], s=20, alpha=0.7,
                   color=STATUS_COLORS["COMPLETE"])
        if t["value"] is not None:
            ax.plot([t["number"] - 0.3, t["number"] + 0.3], [t["value"]] * 2, color="#333")
    ax.set(xlabel="trial", ylabel=d.get("metric", "value"))
    if d.get("log"):
        ax.set_yscale("log")
    _whole_numbers(ax.xaxis)


def pareto(fig, d: dict) -> None:
    """2-D or 3-D: the front red (a staircase in 2-D), other feasible trials blue,
    infeasible ones grey."""
    names, three = d["names"], len(d["names"]) == 3
    ax = fig.add_subplot(projection="3d") if three else fig.subplots()
    for label, pick, color, size in (
            ("front", lambda p: p["front"], "#d62728", 40),
            ("dominated", lambda p: p["feasible"] and not p["front"], STATUS_COLORS["COMPLETE"], 20),
            ("infeasible", lambda p: not p["feasible"], INFEASIBLE, 20)):
        pts = [p for p in d["points"] if pick(p)]
        if pts:
            ax.scatter(*([p["values"][i] for p in pts] for i in range(len(names))), s=size,
                       color=color, label=label, zorder=3)
        if pts and label == "front" and not three:
            order = sorted(pts, key=lambda p: p["values"][0])
            ax.step([p["values"][0] for p in order], [p["values"][1] for p in order],
                    where="post", color=color, lw=1)
    titles = [f"{n} ({direction})" for n, direction in zip(names, d["directions"])]
    ax.set_xlabel(titles[0])
    ax.set_ylabel(titles[1])
    if three:
        ax.set_zlabel(titles[2])
    ax.legend(loc="best", fontsize=8)


def hypervolume(fig, d: dict) -> None:
    ax = fig.subplots()
    h = d["history"]
    ax.step([p[0] for p in h], [p[1] for p in h], where="post", color="#333")
    ax.scatter([p[0] for p in h], [p[1] for p in h], s=8, color="#333")
    ax.set(xlabel="trial", ylabel="hypervolume")
    _whole_numbers(ax.xaxis)


def timeline(fig, d: dict) -> None:
    ax = fig.subplots()
    tracks = d["tracks"]
    fig.set_size_inches(9, 1.5 + 0.5 * len(tracks))
    for t, a, b in d["idle"]:
        ax.barh(t, b - a, left=a, height=0.9, color=(0.8, 0, 0, 0.12))
    for bar in d["bars"]:
        ax.barh(bar["track"], bar["end"] - bar["start"], left=bar["start"],
                height=0.9, color=STATUS_COLORS.get(bar["status"], "#7f7f7f"), edgecolor="white")
    from matplotlib.patches import Patch
    from matplotlib.transforms import blended_transform_factory

    shown = sorted({bar["status"] for bar in d["bars"]})
    ax.legend(handles=[Patch(color=STATUS_COLORS.get(s, "#7f7f7f"), label=s.lower()) for s in shown]
              + [Patch(color=(0.8, 0, 0, 0.12), label="idle")], loc="upper left",
              bbox_to_anchor=(1.0, 1.0), fontsize=8)
    ax.set_yticks(range(len(tracks)), [f"group {t['group']}" for t in tracks])
    ax.set_ylim(-0.5, len(tracks) - 0.5)
    band = blended_transform_factory(ax.transAxes, ax.transData)
    for job in job_bands(d):
        if job["first"] > 0:
            ax.axhline(job["first"] - 0.5, color="#333", lw=0.8)
        ax.text(0.005, job["last"] + 0.45, job["label"], transform=band, va="top", ha="left",
                fontsize=8, bbox={"facecolor": "white", "alpha": 0.7, "lw": 0, "pad": 1})
    ax.set_xlabel(f"seconds since {d['t0'][:19].replace('T', ' ')} UTC; efficiency "
                  f"{d['efficiency']:.1%} = {held_text(d)}")


def _unit(values: list) -> list:
    known = [v for v in values if v is not None]
    lo, hi = (min(known), max(known)) if known else (0.0, 1.0)
    return [None if v is None else 0.5 if hi == lo else (v - lo) / (hi - lo) for v in values]


def _tick(axis: dict, v: float) -> str:
    if axis["ticks"]:
        return dict((t[0], t[1]) for t in axis["ticks"]).get(v, f"{v:g}")
    return f"{10 ** v:.3g}" if axis["log"] else f"{v:.4g}"


def _cmap(name: str):
    import matplotlib

    return matplotlib.colormaps[name]


def lineage(fig, d: dict) -> None:
    from matplotlib.ticker import MaxNLocator

    ax = fig.subplots()
    color = {m["member"]: f"C{i % 10}" for i, m in enumerate(d["members"])}
    for link in d["links"]:
        if link["exploit"]:
            ax.plot([link["x0"], link["x1"]], [link["y0"], link["y1"]], ls="--", color="#999", lw=0.8)
        else:
            ax.plot([link["x0"], link["x1"]], [link["y0"], link["y1"]], color=color[link["member"]], lw=1.2)
    for m in d["members"]:
        ax.scatter(m["rounds"], m["values"], s=20, color=color[m["member"]], label=f"member {m['member']}",
                   zorder=3)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set(xlabel="round", ylabel=d.get("metric", "value"))
    ax.legend(loc="best", fontsize=8)


DRAW = {"pareto": pareto, "hypervolume": hypervolume, "lineage": lineage, "history": history, "parallel": parallel, "importance": importance, "slice": slices,
        "contour": contour, "curves": curves, "folds": folds, "timeline": timeline}
